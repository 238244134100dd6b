"""bkcore.runs: a run's struct format and where two sequences part."""

import struct

import pytest

from bkcore.runs import leading_equal_count, run_format


@pytest.mark.parametrize("sizes", [(), (0,), (5,), (3, 3, 3), (3, 4, 3), (1024,) * 7 + (1,)])
def test_a_run_format_is_one_record_format_per_size(sizes):
    assert run_format("I%ds", sizes) == ">" + "".join("I%ds" % size for size in sizes)
    data = b"".join(struct.pack(">I", index) + b"x" * size for index, size in enumerate(sizes))
    fields = struct.unpack(run_format("I%ds", sizes), data)
    assert fields[0::2] == tuple(range(len(sizes))) and tuple(map(len, fields[1::2])) == sizes


def test_leading_equal_count():
    assert leading_equal_count([], []) == 0
    assert leading_equal_count((1, 2, 3), (1, 2, 3)) == 3
    assert leading_equal_count([1, 2, 3], [1, 5, 3]) == 1
    assert leading_equal_count([0, 2], [1, 2]) == 0
