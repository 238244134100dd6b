"""Stream records: packing into entries, DLSN order and text form, batching by size."""

import pytest
from hypothesis import given, strategies as st

from bkcore.stream.records import (
    DLSN, Record, RecordBatcher, RecordFormatError, pack_records, positioned, unpack_records,
)


@given(st.lists(st.tuples(st.integers(0, 2**62), st.binary(max_size=50)), max_size=30), st.booleans())
def test_records_round_trip(items, is_end):
    records = [Record(t, p) for t, p in items]
    assert unpack_records(pack_records(records, is_end_of_stream=is_end)) == (records, is_end)


def test_bad_payloads_are_refused():
    for junk in [b"", b"\x01\x02", pack_records([]).replace(b"\x01", b"\x07", 1)]:
        with pytest.raises(RecordFormatError):
            unpack_records(junk)


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
            entries.append(full)
    entries.append(batcher.flush())
    assert all(len(entry) <= 200 for entry in entries) and len(entries) > 1
    txids = [r.txid for e, payload in enumerate(entries) for r in unpack_records(payload)[0]]
    assert txids == list(range(20))
    assert [p.dlsn for p in positioned(7, 3, entries[0])][:2] == [DLSN(7, 3, 0), DLSN(7, 3, 1)]
    with pytest.raises(ValueError):
        batcher.add(Record(99, b"y" * 500))
