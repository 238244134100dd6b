"""bktransports.lmdb_index: a write of more keys than one putmulti slice is one transaction."""

import struct

import pytest

from bktransports import lmdb_index
from bktransports.lmdb_index import LmdbIndexStore


def test_a_write_of_many_slices_puts_every_key_and_deletes_first(tmp_path):
    store = LmdbIndexStore(str(tmp_path))
    count = 2 * lmdb_index.PUT_SLICE_COUNT + 7
    store.write(((struct.pack(">Q", i), b"v%d" % i) for i in range(count)), [])
    store.write({struct.pack(">Q", 0): b"again"}, [struct.pack(">Q", 1)])
    assert store.get(struct.pack(">Q", 0)) == b"again" and store.get(struct.pack(">Q", 1)) is None
    assert store.get(struct.pack(">Q", count - 1)) == b"v%d" % (count - 1)
    assert len(store.items_from(b"", 10 * count)) == count - 1


def test_a_write_that_fails_in_a_later_slice_leaves_nothing_of_the_earlier_ones(tmp_path):
    store = LmdbIndexStore(str(tmp_path))

    def puts():
        for i in range(lmdb_index.PUT_SLICE_COUNT + 5):
            yield struct.pack(">Q", i), b"v"
        raise RuntimeError("the checkpoint's writer failed")

    with pytest.raises(RuntimeError):
        store.write(puts(), [])
    assert store.items_from(b"", 10) == []
