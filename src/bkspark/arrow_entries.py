"""Spark's Arrow columns into stream entries, with no Python object per row.

A write task's rows come as Arrow batches. ArrowEntries cuts them into entries of the stream
writer's size (bkcore's EntryCutter, over the payloads' lengths) and packs each from the Arrow
buffers themselves: the txid column's int64 buffer, the payload column's int32 offsets
(rebased to start at 0) and its values, which are the three parts of the entry format
(bkcore.stream.entry_format). Rows that do not fill an entry wait for the next batch, so a
task's entries are as full as the stream writer's.
"""

from __future__ import annotations

import sys

import pyarrow as pa
import pyarrow.compute as pc

from bkcore.stream.records import EntryCutter
from bkcore.stream.writer_state import SegmentWriteState

_ARROW_IS_LITTLE_ENDIAN = sys.byteorder == "little"     # Arrow's buffers are in the machine's order


class ArrowEntries:
    """Rows (an int64 txid array and a binary payload array of one length) in, the entries of
    `state`'s segment out, in order."""

    def __init__(self, state: SegmentWriteState, *, entry_size_max: int) -> None:
        self._state = state
        self._cutter = EntryCutter(entry_size_max=entry_size_max)
        self._pending: list[tuple[pa.Array, pa.Array]] = []

    @property
    def pending_count(self) -> int:
        return self._cutter.pending_count

    def add(self, txids: pa.Array, payloads: pa.Array) -> list[bytes]:
        """The entries these rows fill (the rest wait for more rows or flush)."""
        assert len(txids) == len(payloads) and txids.type == pa.int64() and payloads.type == pa.binary()
        entries, start = [], 0
        for end in self._cutter.cut(pc.binary_length(payloads).to_pylist()):
            self._pending.append((txids.slice(start, end - start), payloads.slice(start, end - start)))
            entries.append(self._pack_pending())
            start = end
        if start < len(txids):
            self._pending.append((txids.slice(start), payloads.slice(start)))
        return entries

    def flush(self) -> list[bytes]:
        """The last entry, of the rows still waiting (none if there are none)."""
        return [self._pack_pending()] if self._cutter.flush() else []

    def _pack_pending(self) -> bytes:
        chunks = [chunk for chunk in self._pending if len(chunk[0])]
        self._pending = []
        txids = pa.concat_arrays([t for t, _ in chunks]) if len(chunks) > 1 else chunks[0][0]
        payloads = pa.concat_arrays([p for _, p in chunks]) if len(chunks) > 1 else chunks[0][1]
        first_txid, last_txid = txids[0].as_py(), txids[-1].as_py()
        if not _ARROW_IS_LITTLE_ENDIAN:
            return self._state.pack_columns(txids.to_pylist(), payloads.to_pylist())
        return self._state.pack_buffers(len(txids), *entry_parts(txids, payloads), first_txid=first_txid,
                                        last_txid=last_txid)


def entry_parts(txids: pa.Array, payloads: pa.Array) -> tuple[memoryview, memoryview, memoryview]:
    """The entry format's three parts of these rows, as views of the arrays' own buffers (the
    offsets copied only when the rows do not start at the values' first byte)."""
    count = len(txids)
    txid_view = memoryview(txids.buffers()[1])[txids.offset * 8:(txids.offset + count) * 8]
    _, offsets_buffer, values_buffer = payloads.buffers()
    offsets = pa.Array.from_buffers(pa.int32(), count + 1, [None, offsets_buffer], offset=payloads.offset)
    first, last = offsets[0].as_py(), offsets[count].as_py()
    if first:
        offsets = pc.subtract(offsets, pa.scalar(first, pa.int32()))
    offsets_view = memoryview(offsets.buffers()[1])[offsets.offset * 4:(offsets.offset + count + 1) * 4]
    values_view = memoryview(values_buffer)[first:last] if values_buffer is not None else memoryview(b"")
    return txid_view, offsets_view, values_view
