"""bkspark.arrow_rows without a JVM: the record batches of stream and ledger entries against the
plain list-built versions they replaced, the fast position forms against the plain ones at the
edges of their widths, and malformed entries refused."""

import struct

import msgpack
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings, strategies as st

from bkcore.stream.entry_format import RecordFormatError, pack_entry, unpack_columns
from bkcore.stream.records import Record, StreamEntry
from bkspark.arrow_rows import (
    LedgerRows, StreamRows, _fast_ledger_positions, _fast_positions, _ledger_positions, _positions, arrow_schema,
    format_position, ledger_batch, stream_batch,
)
from bkspark.planning import TXID_MAX, ReadSpan


def _reference_stream_batch(span, first_entry_id, payloads, value_format):
    """stream_batch as first written: Python lists of every column, one pa.array each."""
    entry_ids, slots, txids, data, positions = [], [], [], [], []
    for entry_id, payload in enumerate(payloads, first_entry_id):
        columns = unpack_columns(payload)
        count = len(columns.txids)
        first_slot = span.first_slot if entry_id == span.first_entry_id else 0
        end_slot = span.end_slot if entry_id == span.last_entry_id and span.end_slot >= 0 else count
        for slot in range(first_slot, min(end_slot, count)):
            if span.txid_min <= columns.txids[slot] <= span.txid_max:
                entry_ids.append(entry_id)
                slots.append(slot)
                txids.append(columns.txids[slot])
                data.append(columns.payloads[slot])
                positions.append(format_position(span.seqno, entry_id, slot))
    count = len(entry_ids)
    return _reference_batch(span.stream, [span.seqno] * count, span.ledger_id, entry_ids, slots, txids, positions,
                            data, value_format)


def _reference_ledger_batch(ledger_id, first_entry_id, payloads, value_format):
    entry_ids = list(range(first_entry_id, first_entry_id + len(payloads)))
    count = len(entry_ids)
    return _reference_batch(None, [None] * count, ledger_id, entry_ids, [None] * count, [None] * count,
                            [f"{ledger_id}:{entry_id:012d}" for entry_id in entry_ids], payloads, value_format)


def _reference_batch(stream, segments, ledger_id, entry_ids, slots, txids, positions, data, value_format):
    count = len(entry_ids)
    columns = [[stream] * count, segments, [ledger_id] * count, entry_ids, slots, txids, positions, data]
    if value_format != "binary":
        columns.append([payload.decode() for payload in data])
    schema = arrow_schema(value_format)
    return pa.RecordBatch.from_arrays([pa.array(column, field.type) for column, field in zip(columns, schema)],
                                      schema=schema)


def _entries(record_counts, *, first_txid=0):
    entries, txid = [], first_txid
    for count in record_counts:
        records = tuple(Record(txid + i, f"r{txid + i}".encode()) for i in range(count))
        entries.append(pack_entry(StreamEntry(records, last_txid=txid + count - 1, is_end_of_stream=count == 0)))
        txid += count
    return entries


@settings(max_examples=60)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=8), st.integers(0, 10**6), st.integers(0, 7),
       st.integers(-1, 7), st.integers(0, 30), st.integers(0, 40), st.sampled_from(["binary", "utf8", "json"]),
       st.integers(1, 4))
def test_stream_rows_are_the_rows_the_plain_version_makes(record_counts, first_entry_id, first_slot, end_slot,
                                                          txid_min, txid_span, value_format, read_count):
    payloads = _entries(record_counts, first_txid=3)
    txid_max = TXID_MAX if txid_span == 40 else txid_min + txid_span
    span = ReadSpan("ns/s", 12, 34, first_entry_id, first_entry_id + len(payloads) - 1, first_slot=first_slot,
                    end_slot=end_slot, txid_min=txid_min, txid_max=txid_max)
    expected = _reference_stream_batch(span, first_entry_id, payloads, value_format)
    assert stream_batch(span, first_entry_id, payloads, value_format).equals(expected)
    rows = StreamRows(span)                         # the same entries in a few reads, as read_span adds them
    step = -(-len(payloads) // read_count)
    for start in range(0, len(payloads), step):
        rows.add(first_entry_id + start, payloads[start:start + step])
    assert rows.take_batch(value_format).equals(expected)
    assert rows.row_count == 0 and rows.take_batch(value_format).num_rows == 0


@given(st.lists(st.binary(max_size=20), max_size=30), st.integers(0, 10**6), st.integers(1, 5))
def test_ledger_rows_are_the_rows_the_plain_version_makes(payloads, first_entry_id, read_count):
    expected = _reference_ledger_batch(7, first_entry_id, payloads, "binary")
    assert ledger_batch(7, first_entry_id, payloads, "binary").equals(expected)
    rows = LedgerRows(7, first_entry_id)
    step = max(1, -(-len(payloads) // read_count))
    for start in range(0, len(payloads), step):
        rows.add(first_entry_id + start, payloads[start:start + step])
    assert rows.take_batch("binary").equals(expected)
    assert rows.next_entry_id == first_entry_id + len(payloads)


@pytest.mark.parametrize("segment, entry_ids, slots", [
    (0, [0, 0, 5], [0, 1, 0]),
    (9_999_999_999, [10**12 - 1, 10**12 - 1], [0, 99_999]),       # the widest numbers the fast form prints
    (10**10, [1], [2]),                                             # wider than that: the plain form, unpadded
    (3, [10**12], [0]),
    (3, [4], [10**5]),
])
def test_fast_positions_are_the_plain_positions(segment, entry_ids, slots):
    entry_array, slot_array = pa.array(entry_ids, pa.int64()), pa.array(slots, pa.int32())
    fast = _fast_positions(segment, entry_array, slot_array, entry_id_max=max(entry_ids), slot_max=max(slots))
    assert fast.equals(_positions(pa.repeat(pa.scalar(segment, pa.int64()), len(entry_ids)), entry_array, slot_array))
    assert fast.to_pylist() == [format_position(segment, e, s) for e, s in zip(entry_ids, slots)]
    fast_ledger = _fast_ledger_positions(segment, entry_array, entry_id_max=max(entry_ids))
    assert fast_ledger.equals(_ledger_positions(segment, entry_array))
    assert fast_ledger.to_pylist() == [f"{segment}:{e:012d}" for e in entry_ids]


def test_position_strings_order_as_positions():
    span = ReadSpan("ns/s", 2, 5, 9, 11)
    positions = stream_batch(span, 9, _entries([3, 0, 2]), "binary").column("position")
    assert positions.to_pylist() == ["0000000002:000000000009:00000", "0000000002:000000000009:00001",
                                     "0000000002:000000000009:00002", "0000000002:000000000011:00000",
                                     "0000000002:000000000011:00001"]
    assert pc.equal(pc.sort_indices(positions), pa.array(range(5), pa.uint64())).to_pylist() == [True] * 5


def test_a_malformed_entry_is_refused():
    span = ReadSpan("ns/s", 1, 5, 0, 1)
    with pytest.raises(RecordFormatError):
        stream_batch(span, 0, _entries([2]) + [b"\x93\x01\x02\x03"], "binary")
    with pytest.raises(RecordFormatError):           # format 1, a text payload
        StreamRows(span).add(0, [msgpack.packb([1, 0, 0, 0, 1, [[1, "x"]]])])
    # Format 2 with its payload offsets running past the payloads: refused before Arrow sees it.
    body = struct.pack("<q2i", 1, 0, 5) + b"abc"
    with pytest.raises(RecordFormatError, match="offsets"):
        StreamRows(span).add(0, [msgpack.packb([2, 0, 0, 0, 1, 1, body])])
    assert StreamRows(span).add(0, [msgpack.packb([2, 0, 0, 0, 1, 1, struct.pack("<q2i", 1, 0, 3) + b"abc"])]) is None
