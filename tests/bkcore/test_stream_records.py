"""Stream records: packing into entries, DLSN order and text form, batching by size."""

import pytest
from hypothesis import given, strategies as st

from bkcore.stream.records import (
    DLSN, ColumnBatcher, Record, RecordBatcher, RecordFormatError, StreamEntry, pack_columns, pack_entry, positioned,
    unpack_columns, unpack_entry,
)


@given(st.lists(st.tuples(st.integers(0, 2**62), st.binary(max_size=50)), max_size=30), st.booleans(),
       st.integers(0, 2**40), st.integers(0, 2**40), st.integers(-1, 2**62))
def test_entries_round_trip(items, is_end, records_before, bytes_before, last_txid):
    entry = StreamEntry(tuple(Record(t, p) for t, p in items), records_before, bytes_before, last_txid, is_end)
    assert unpack_entry(pack_entry(entry)) == entry
    assert entry.records_through == records_before + len(items)
    assert entry.bytes_through == bytes_before + sum(len(p) for _, p in items)


def test_bad_payloads_are_refused():
    good = pack_entry(StreamEntry((Record(1, b"x"),)))
    for junk in [b"", b"\x01\x02", good.replace(b"\x01", b"\x07", 1), pack_entry(StreamEntry(()))[:-1],
                 good.replace(b"\xc4\x01x", b"\xa1x")]:
        with pytest.raises(RecordFormatError):
            unpack_entry(junk)


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
def test_the_column_batcher_cuts_the_entries_the_record_batcher_cuts(chunks, size_max, count_max):
    """Spark's sink hands records over a column chunk at a time; the entries must be those the
    stream writer would make of the same records one by one."""
    by_record = RecordBatcher(entry_size_max=size_max, record_count_max=count_max)
    by_column = ColumnBatcher(entry_size_max=size_max, record_count_max=count_max)
    expected, got, txid = [], [], 0
    for chunk in chunks:
        txids = list(range(txid, txid + len(chunk)))
        txid += len(chunk)
        for record in map(Record, txids, chunk):
            full = by_record.add(record)
            if full:
                expected.append(([r.txid for r in full], [r.payload for r in full]))
        got += by_column.add(txids, chunk)
        assert by_column.pending_count == by_record.pending_count
    rest = by_record.flush()
    assert got == expected
    assert by_column.flush() == ([r.txid for r in rest], [r.payload for r in rest])
    assert by_column.flush() == ([], []) and by_column.pending_count == 0


def test_the_column_batcher_refuses_an_oversized_record_before_taking_any():
    batcher = ColumnBatcher(entry_size_max=200)
    batcher.add([1], [b"a"])
    with pytest.raises(ValueError, match="record of 500 bytes exceeds the entry size limit 200"):
        batcher.add([2, 3], [b"b", b"y" * 500])
    assert batcher.flush() == ([1], [b"a"])


@given(st.lists(st.tuples(st.integers(0, 2**62), st.binary(max_size=50)), max_size=30), st.booleans(),
       st.integers(0, 2**40), st.integers(0, 2**40), st.integers(-1, 2**62))
def test_columns_pack_to_the_bytes_records_pack_to(items, is_end, records_before, bytes_before, last_txid):
    entry = StreamEntry(tuple(Record(t, p) for t, p in items), records_before, bytes_before, last_txid, is_end)
    packed = pack_columns([t for t, _ in items], [p for _, p in items], records_before=records_before,
                          bytes_before=bytes_before, last_txid=last_txid, is_end_of_stream=is_end)
    assert packed == pack_entry(entry)
    assert unpack_columns(packed).payloads == [p for _, p in items]
