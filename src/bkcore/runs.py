"""Runs of records handled a run at a time: what a batch read's hot paths (a bookie splitting
its entry log records, a client checking the entries it got) share.

Python pays per call, not per byte: a struct format that spells out a whole run of records,
each of its own size, splits them all with one unpack, and checks over whole tuples compare
them with what is expected in one C comparison. The answer to "where does it go wrong" is
only computed when something does.
"""

from __future__ import annotations

from operator import eq


def run_format(record_format: str, sizes: tuple[int, ...]) -> str:
    """A big-endian struct format of one record_format per size, its one %d the size:
    run_format("I%ds", (3, 5)) == ">I3sI5s". Records of a run are most often alike, and then
    the format is one record's repeated (formatting a number per record costs as much as the
    rest of the unpack)."""
    if sizes and sizes.count(sizes[0]) == len(sizes):
        return ">" + (record_format % sizes[0]) * len(sizes)
    return ">" + record_format * len(sizes) % sizes


def leading_equal_count(items: list | tuple, expected: list | tuple) -> int:
    """How many items at the start of two sequences of the same length and type are equal."""
    if items == expected:                  # the usual answer, in one C comparison
        return len(items)
    return list(map(eq, items, expected)).index(False)
