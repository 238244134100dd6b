"""bktransports.lmdb_index: a write of more keys than one putmulti slice is one transaction."""

import random
import struct

import pytest

from bkcore.bookie.index import entry_key, entry_locations_plain, ledger_key, pack_location
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


def test_entry_locations_are_the_plain_ones(tmp_path):
    # Ledgers with gaps, next to each other and to ledger keys, up to the end of the store.
    store = LmdbIndexStore(str(tmp_path))
    rng = random.Random(3)
    held = {ledger_id: sorted(rng.sample(range(60), 40)) for ledger_id in (1, 2, 255, 256)}
    puts = {entry_key(ledger_id, entry_id): pack_location(ledger_id, entry_id * 100)
            for ledger_id, entry_ids in held.items() for entry_id in entry_ids}
    puts.update({ledger_key(ledger_id): b"state" for ledger_id in held})
    store.write(puts, [])
    for ledger_id in (0, 1, 2, 3, 255, 256, 257):
        for first_entry_id in range(-1, 62):
            for count_max in (0, 1, 5, 100):
                found = store.entry_locations(ledger_id, first_entry_id, count_max) if first_entry_id >= 0 else []
                expected = entry_locations_plain(store, ledger_id, max(first_entry_id, 0), count_max)
                assert found == (expected if first_entry_id >= 0 else [])
                entry_ids = held.get(ledger_id, [])
                run = []
                while first_entry_id + len(run) in entry_ids and len(run) < count_max:
                    run.append(pack_location(ledger_id, (first_entry_id + len(run)) * 100))
                assert found == run
