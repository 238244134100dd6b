"""Entries to Arrow: the rows the Spark source yields, one pyarrow.RecordBatch per entry read.

Stream entries are decoded with bkcore.stream.records.unpack_columns (the one definition of
the format, as columns); raw ledger entries become one row each. Columns are built whole with pyarrow compute,
never row by row in Python: the per-record Python work is only unpacking the entry.

The `position` column is the record's DLSN zero-padded (segment 10 digits, entry 12, slot 5),
so that comparing positions as strings orders them as positions: a filter such as
`position >= "0000000003:000000000010:00000"` then means what it says, whether Spark or the
source evaluates it. Other code accepts either form (DLSN.parse ignores leading zeros).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from bkcore.stream.records import unpack_columns
from bkspark.planning import ReadSpan

VALUE_FORMATS = ("binary", "utf8", "json")

_BASE_FIELDS = [
    ("stream", pa.string()), ("segment", pa.int64()), ("ledger_id", pa.int64()), ("entry_id", pa.int64()),
    ("slot", pa.int32()), ("txid", pa.int64()), ("position", pa.string()), ("payload", pa.binary()),
]
_SPARK_TYPES = {pa.string(): "string", pa.int64(): "bigint", pa.int32(): "int", pa.binary(): "binary"}


def arrow_schema(value_format: str) -> pa.Schema:
    """The source's columns; `value` (the payload as text) when records are UTF-8 or JSON."""
    fields = list(_BASE_FIELDS)
    if value_format in ("utf8", "json"):
        fields.append(("value", pa.string()))
    return pa.schema(fields)


def spark_schema_ddl(value_format: str) -> str:
    return ", ".join(f"{field.name} {_SPARK_TYPES[field.type]}" for field in arrow_schema(value_format))


def format_position(segment: int, entry_id: int, slot: int) -> str:
    return f"{segment:010d}:{entry_id:012d}:{slot:05d}"


def _padded(values: pa.Array, width: int) -> pa.Array:
    return pc.utf8_lpad(pc.cast(values, pa.string()), width=width, padding="0")


def _positions(segments: pa.Array, entry_ids: pa.Array, slots: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise(_padded(segments, 10), _padded(entry_ids, 12), _padded(slots, 5), ":")


def stream_batch(span: ReadSpan, first_entry_id: int, payloads: list[bytes], value_format: str) -> pa.RecordBatch:
    """The records of consecutive entries of `span`'s segment, starting at `first_entry_id`,
    within the span's slot and txid bounds."""
    entry_ids: list[int] = []
    slots: list[int] = []
    txids: list[int] = []
    data: list[bytes] = []
    last_entry_id = first_entry_id + len(payloads) - 1
    for entry_id, payload in enumerate(payloads, first_entry_id):
        columns = unpack_columns(payload)
        count = len(columns.txids)
        first_slot = span.first_slot if entry_id == span.first_entry_id else 0
        end_slot = span.end_slot if entry_id == span.last_entry_id and span.end_slot >= 0 else count
        end_slot = min(end_slot, count)
        if first_slot >= end_slot:
            continue
        entry_ids += [entry_id] * (end_slot - first_slot)
        slots += range(first_slot, end_slot)
        if first_slot == 0 and end_slot == count:
            txids += columns.txids
            data += columns.payloads
        else:
            txids += columns.txids[first_slot:end_slot]
            data += columns.payloads[first_slot:end_slot]
    assert last_entry_id <= span.last_entry_id
    batch = _batch(span.stream, span.seqno, span.ledger_id, pa.array(entry_ids, pa.int64()),
                   pa.array(slots, pa.int32()), pa.array(txids, pa.int64()), pa.array(data, pa.binary()),
                   value_format)
    if span.txid_min > 0 or span.txid_max < 2**63 - 1:
        txid_column = batch.column("txid")
        batch = batch.filter(pc.and_(pc.greater_equal(txid_column, span.txid_min),
                                     pc.less_equal(txid_column, span.txid_max)))
    return batch


def ledger_batch(ledger_id: int, first_entry_id: int, payloads: list[bytes], value_format: str) -> pa.RecordBatch:
    """Raw ledger entries, one row each (no stream, segment, slot or txid)."""
    count = len(payloads)
    entry_ids = pa.array(range(first_entry_id, first_entry_id + count), pa.int64())
    return _batch(None, None, ledger_id, entry_ids, pa.nulls(count, pa.int32()), pa.nulls(count, pa.int64()),
                  pa.array(payloads, pa.binary()), value_format)


def _batch(stream: str | None, segment: int | None, ledger_id: int, entry_ids: pa.Array, slots: pa.Array,
           txids: pa.Array, payloads: pa.Array, value_format: str) -> pa.RecordBatch:
    count = len(entry_ids)
    if segment is None:
        segments = pa.nulls(count, pa.int64())
        positions = pc.binary_join_element_wise(pc.cast(pa.scalar(ledger_id), pa.string()),
                                                _padded(entry_ids, 12), ":") if count else pa.array([], pa.string())
    else:
        segments = pa.repeat(pa.scalar(segment, pa.int64()), count)
        positions = _positions(segments, entry_ids, slots)
    columns = [pa.repeat(pa.scalar(stream, pa.string()), count), segments,
               pa.repeat(pa.scalar(ledger_id, pa.int64()), count), entry_ids, slots, txids, positions, payloads]
    if value_format in ("utf8", "json"):
        columns.append(pc.cast(payloads, pa.string()))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(value_format))
