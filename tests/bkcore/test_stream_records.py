"""Stream records: DLSN order and text form, and cutting records into entries by size (one by
one, and by their sizes alone as Spark's sink does)."""

import pytest
from hypothesis import given, strategies as st

from bkcore.stream.entry_format import pack_entry, unpack_entry
from bkcore.stream.records import DLSN, EntryCutter, Record, RecordBatcher, StreamEntry, positioned


def test_dlsn_orders_and_parses():
    assert DLSN(1, 5, 2) < DLSN(1, 6, 0) < DLSN(2, 0, 0)
    assert DLSN.parse(str(DLSN(3, 14, 15))) == DLSN(3, 14, 15)
    with pytest.raises(ValueError):
        DLSN.parse("3:14")


def test_batcher_fills_entries_up_to_the_limit_and_keeps_order():
    batcher = RecordBatcher(entry_size_max=200)
    entries = []
    for txid in range(20):
        full = batcher.add(Record(txid, b"x" * 40))
        if full:
            entries.append(pack_entry(StreamEntry(tuple(full), 2**40, 2**40, 2**62)))
    entries.append(pack_entry(StreamEntry(tuple(batcher.flush()), 2**40, 2**40, 2**62)))
    assert batcher.flush() == [] and batcher.pending_count == 0
    assert all(len(entry) <= 200 for entry in entries) and len(entries) > 1
    txids = [r.txid for payload in entries for r in unpack_entry(payload).records]
    assert txids == list(range(20))
    first = unpack_entry(entries[0])
    assert [p.dlsn for p in positioned(7, 3, first)][:2] == [DLSN(7, 3, 0), DLSN(7, 3, 1)]
    with pytest.raises(ValueError):
        batcher.add(Record(99, b"y" * 500))


@given(st.lists(st.lists(st.binary(max_size=120), max_size=40), max_size=6), st.integers(150, 600),
       st.integers(1, 12))
def test_the_entry_cutter_cuts_the_entries_the_record_batcher_cuts(chunks, size_max, count_max):
    """Spark's sink hands records over a column chunk at a time and cuts them by their sizes
    alone; the entries must be those the stream writer would make of the same records one by
    one."""
    by_record = RecordBatcher(entry_size_max=size_max, record_count_max=count_max)
    cutter = EntryCutter(entry_size_max=size_max, record_count_max=count_max)
    expected, got, pending, txid = [], [], [], 0
    for chunk in chunks:
        txids = list(range(txid, txid + len(chunk)))
        txid += len(chunk)
        for record in map(Record, txids, chunk):
            full = by_record.add(record)
            if full:
                expected.append([r.txid for r in full])
        start = 0
        for end in cutter.cut([len(payload) for payload in chunk]):
            got.append(pending + txids[start:end])
            pending, start = [], end
        pending += txids[start:]
        assert cutter.pending_count == by_record.pending_count == len(pending)
    rest = by_record.flush()
    assert got == expected
    assert cutter.flush() == len(rest) == len(pending)
    assert cutter.flush() == 0 and cutter.pending_count == 0


def test_the_entry_cutter_refuses_an_oversized_record_before_taking_any():
    cutter = EntryCutter(entry_size_max=200)
    assert cutter.cut([1]) == []
    with pytest.raises(ValueError, match="record of 500 bytes exceeds the entry size limit 200"):
        cutter.cut([1, 500])
    assert cutter.flush() == 1
