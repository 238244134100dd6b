"""Entries to Arrow: the rows the Spark source yields, one pyarrow.RecordBatch per entry read.

Stream entries are decoded with bkcore.stream.entry_format.unpack_buffers (the one definition
of the format): an entry's txids, payload offsets and payloads become Arrow arrays over the
entry's own buffers, with no Python object per record. Raw ledger entries become one row each.
Other columns are built whole with pyarrow compute, never row by row in Python.

A plain entry's arrays are views of the bytes the client returned, so a batch's entries stay
alive until take_batch. Copying each entry into Arrow's memory pool at once, so that it could
be freed, was measured and cost more user and system time, not less (bench/README.md). A
compressed entry is decompressed straight into Arrow's pool.

The `position` column is the record's DLSN zero-padded (segment 10 digits, entry 12, slot 5),
so that comparing positions as strings orders them as positions: a filter such as
`position >= "0000000003:000000000010:00000"` then means what it says, whether Spark or the
source evaluates it. Other code accepts either form (DLSN.parse ignores leading zeros).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from bkcore.stream.entry_format import unpack_buffers
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
    """format_position of each row: the plain form, for values of any size."""
    return pc.binary_join_element_wise(_padded(segments, 10), _padded(entry_ids, 12), _padded(slots, 5), ":")


def _ledger_positions(ledger_id: int, entry_ids: pa.Array) -> pa.Array:
    """"ledger:entry" of each row, the entry id padded to 12 digits."""
    return pc.binary_join_element_wise(pc.cast(pa.scalar(ledger_id), pa.string()), _padded(entry_ids, 12), ":")


# The fast forms below print the padded numbers as the digits after the leading 1 of
# 10**width + number (one cast for the entry and slot together), and put the text before them
# and the separator between them with binary_replace_slice: four passes over the rows where the
# plain stream form takes seven (about 70 against 190 ns a row). They hold while every number
# fits its width (true of any real stream); past that the plain form runs.
# tests/bkspark_unit/test_arrow_rows.py checks each against its plain form.
_ENTRY_DIGITS, _SLOT_DIGITS = 12, 5


def _fast_positions(segment: int, entry_ids: pa.Array, slots: pa.Array, *, entry_id_max: int,
                    slot_max: int) -> pa.Array:
    if not (0 <= segment < 10**10 and entry_id_max < 10**_ENTRY_DIGITS and slot_max < 10**_SLOT_DIGITS):
        return _positions(pa.repeat(pa.scalar(segment, pa.int64()), len(entry_ids)), entry_ids, slots)
    numbers = pc.add(pc.add(pc.multiply(entry_ids, 10**_SLOT_DIGITS), pc.cast(slots, pa.int64())),
                     10**(_ENTRY_DIGITS + _SLOT_DIGITS))
    prefix = f"{segment:010d}:"
    text = pc.binary_replace_slice(pc.cast(numbers, pa.string()), start=0, stop=1, replacement=prefix)
    slot_at = len(prefix) + _ENTRY_DIGITS
    return pc.binary_replace_slice(text, start=slot_at, stop=slot_at, replacement=":")


def _fast_ledger_positions(ledger_id: int, entry_ids: pa.Array, *, entry_id_max: int) -> pa.Array:
    if entry_id_max >= 10**_ENTRY_DIGITS:
        return _ledger_positions(ledger_id, entry_ids)
    text = pc.cast(pc.add(entry_ids, 10**_ENTRY_DIGITS), pa.string())
    return pc.binary_replace_slice(text, start=0, stop=1, replacement=f"{ledger_id}:")


def row_numbers(count: int, first: int, arrow_type: pa.DataType) -> pa.Array:
    """first, first + 1, ... (count of them), made in C."""
    return pc.cumulative_sum(pa.repeat(pa.scalar(1, arrow_type), count), start=first - 1)


def _runs(run_ends: list[int], values: list[int], arrow_type: pa.DataType) -> pa.Array:
    """values[i] repeated from row run_ends[i - 1] (0 for the first) up to run_ends[i]."""
    encoded = pa.RunEndEncodedArray.from_arrays(pa.array(run_ends, pa.int32()), pa.array(values, arrow_type))
    return pc.run_end_decode(encoded)


class StreamRows:
    """The records of consecutive entries of one span's segment, within the span's slot bounds,
    gathered an entry at a time (add) and handed out as one record batch (take_batch).

    Per entry it keeps its txids and payloads as Arrow arrays over the entry's buffers, and one
    run: the entry id, where its rows end, and the slot of its first row less that row's number
    (so a row's slot is its row number plus its run's shift)."""

    def __init__(self, span: ReadSpan) -> None:
        self.span = span
        self._clear()

    def _clear(self) -> None:
        self.row_count = 0
        self._payload_chunks: list[pa.Array] = []
        self._txid_chunks: list[pa.Array] = []
        self._entry_ids: list[int] = []
        self._run_ends: list[int] = []
        self._slot_shifts: list[int] = []
        self._slot_max = 0

    def add(self, first_entry_id: int, payloads: list[bytes]) -> None:
        """Decode the consecutive entries that start at `first_entry_id`."""
        span = self.span
        assert first_entry_id + len(payloads) - 1 <= span.last_entry_id
        for entry_id, payload in enumerate(payloads, first_entry_id):
            parts = unpack_buffers(payload, allocate=pa.allocate_buffer)
            count = parts.count
            first_slot = span.first_slot if entry_id == span.first_entry_id else 0
            end_slot = span.end_slot if entry_id == span.last_entry_id and span.end_slot >= 0 else count
            end_slot = min(end_slot, count)
            if first_slot >= end_slot:
                continue
            txids = pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(parts.txids)])
            data = pa.Array.from_buffers(pa.binary(), count,
                                         [None, pa.py_buffer(parts.offsets), pa.py_buffer(parts.values)])
            if first_slot > 0 or end_slot < count:
                txids, data = txids.slice(first_slot, end_slot - first_slot), data.slice(first_slot, end_slot - first_slot)
            self._txid_chunks.append(txids)
            self._payload_chunks.append(data)
            self._entry_ids.append(entry_id)
            self._slot_shifts.append(first_slot - self.row_count)
            self.row_count += end_slot - first_slot
            self._run_ends.append(self.row_count)
            self._slot_max = max(self._slot_max, end_slot - 1)

    def take_batch(self, value_format: str) -> pa.RecordBatch:
        """The rows gathered so far (then none), less those outside the span's txid bounds."""
        span, count = self.span, self.row_count
        entry_ids = _runs(self._run_ends, self._entry_ids, pa.int64())
        slots = pc.add(row_numbers(count, 0, pa.int32()), _runs(self._run_ends, self._slot_shifts, pa.int32()))
        positions = _fast_positions(span.seqno, entry_ids, slots, entry_id_max=max(self._entry_ids, default=0),
                                    slot_max=self._slot_max)
        payloads = pa.concat_arrays(self._payload_chunks) if self._payload_chunks else pa.array([], pa.binary())
        txids = pa.concat_arrays(self._txid_chunks) if self._txid_chunks else pa.array([], pa.int64())
        batch = _batch(span.stream, pa.repeat(pa.scalar(span.seqno, pa.int64()), count), span.ledger_id, entry_ids,
                       slots, txids, positions, payloads, value_format)
        self._clear()
        if span.txid_min > 0 or span.txid_max < 2**63 - 1:
            txid_column = batch.column("txid")
            batch = batch.filter(pc.and_(pc.greater_equal(txid_column, span.txid_min),
                                         pc.less_equal(txid_column, span.txid_max)))
        return batch


def stream_batch(span: ReadSpan, first_entry_id: int, payloads: list[bytes], value_format: str) -> pa.RecordBatch:
    """The records of consecutive entries of `span`'s segment, starting at `first_entry_id`,
    within the span's slot and txid bounds."""
    rows = StreamRows(span)
    rows.add(first_entry_id, payloads)
    return rows.take_batch(value_format)


class LedgerRows:
    """Consecutive entries of a raw ledger, gathered a read at a time (add) and handed out as one
    record batch, a row each (take_batch)."""

    def __init__(self, ledger_id: int, first_entry_id: int) -> None:
        self.ledger_id = ledger_id
        self.next_entry_id = first_entry_id
        self._payloads: list[bytes] = []

    def add(self, first_entry_id: int, payloads: list[bytes]) -> None:
        assert first_entry_id == self.next_entry_id + len(self._payloads)
        self._payloads += payloads

    def take_batch(self, value_format: str) -> pa.RecordBatch:
        batch = ledger_batch(self.ledger_id, self.next_entry_id, self._payloads, value_format)
        self.next_entry_id += len(self._payloads)
        self._payloads = []
        return batch


def ledger_batch(ledger_id: int, first_entry_id: int, payloads: list[bytes] | pa.Array,
                 value_format: str) -> pa.RecordBatch:
    """Raw ledger entries, one row each (no stream, segment, slot or txid); the payloads as
    bytes, or already an Arrow binary array."""
    count = len(payloads)
    entry_ids = row_numbers(count, first_entry_id, pa.int64())
    positions = _fast_ledger_positions(ledger_id, entry_ids, entry_id_max=first_entry_id + count - 1)
    if not isinstance(payloads, pa.Array):
        payloads = pa.array(payloads, pa.binary())
    return _batch(None, pa.nulls(count, pa.int64()), ledger_id, entry_ids, pa.nulls(count, pa.int32()),
                  pa.nulls(count, pa.int64()), positions, payloads, value_format)



def _batch(stream: str | None, segments: pa.Array, ledger_id: int, entry_ids: pa.Array, slots: pa.Array,
           txids: pa.Array, positions: pa.Array, payloads: pa.Array, value_format: str) -> pa.RecordBatch:
    count = len(entry_ids)
    columns = [pa.repeat(pa.scalar(stream, pa.string()), count), segments,
               pa.repeat(pa.scalar(ledger_id, pa.int64()), count), entry_ids, slots, txids, positions, payloads]
    if value_format in ("utf8", "json"):
        columns.append(pc.cast(payloads, pa.string()))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(value_format))
