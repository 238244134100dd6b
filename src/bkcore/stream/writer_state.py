"""What a stream writer knows about the segment it is writing: txids, counters, when to roll.

The async writer (transports/streams) owns the ledger and the metastore calls; every decision
about records lives here, as plain code over plain values, so it is tested without a cluster:

- txids: a record without one gets the previous txid + 1; one below the stream's newest is
  refused (TxidOutOfOrder) before anything is written;
- entries: a batch of records is packed with the segment's counters before it, so the last
  entry of a segment alone tells a recovering writer the segment's totals, and compressed
  when the writer was opened with compression="lz4";
- rolling: a new segment once the open one holds segment_rolling_size payload bytes or has been
  open segment_rolling_interval_s seconds;
- completion: the metadata of a sealed segment, from the writer's counters or, for a segment
  whose writer vanished, from its first and last entries after ledger recovery.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator

from bkcore.stream.errors import TxidOutOfOrder
from bkcore.stream.entry_format import codec_code, new_entry_packer, pack_buffers, pack_columns, pack_entry
from bkcore.stream.records import Record, StreamEntry
from bkcore.stream.segments import SegmentMetadata, SegmentState, StreamSettings

_INT_ONLY = frozenset({int})


class SegmentWriteState:
    def __init__(self, segment: SegmentMetadata, settings: StreamSettings, *, last_txid: int,
                 compression: str = "none") -> None:
        self.segment = segment
        self.settings = settings
        self.assigned_txid = last_txid     # newest txid handed to a record (maybe not yet written)
        self.packed_txid = last_txid       # newest txid packed into an entry
        self.first_txid = -1
        self.record_count = 0
        self.size = 0
        self._packer = new_entry_packer()
        self._codec = codec_code(compression)

    def assign_txid(self, txid: int | None) -> int:
        """The txid of the next record: `txid` itself if it does not go backwards, or the
        previous one + 1 when the caller gives none."""
        if txid is None:
            txid = max(self.assigned_txid + 1, 0)
        elif type(txid) is not int or txid < 0:
            raise TxidOutOfOrder(f"a txid is a non-negative int, not {txid!r}")
        elif txid < self.assigned_txid:
            raise TxidOutOfOrder(f"txid {txid} is below {self.assigned_txid}, which the stream already has; "
                                 f"txids never decrease")
        self.assigned_txid = txid
        return txid

    def assign_txids(self, txids: list[int] | None, count: int) -> list[int]:
        """assign_txid for `count` records at once: `txids` themselves if they never go backwards
        (nor below the stream's newest), or the next `count` txids when the caller gives none.
        Refuses the whole list, assigning nothing, if one is out of order."""
        if txids is None:
            first = max(self.assigned_txid + 1, 0)
            self.assigned_txid = max(self.assigned_txid, first + count - 1)
            return list(range(first, first + count))
        if not txids:
            return txids
        if not _INT_ONLY.issuperset(map(type, txids)) or txids[0] < 0:
            bad = next(t for t in txids if type(t) is not int or t < 0)
            raise TxidOutOfOrder(f"a txid is a non-negative int, not {bad!r}")
        if txids[0] < self.assigned_txid:
            raise TxidOutOfOrder(f"txid {txids[0]} is below {self.assigned_txid}, which the stream already has; "
                                 f"txids never decrease")
        if not all(map(operator.le, txids, itertools.islice(txids, 1, None))):
            low, high = next((a, b) for a, b in zip(txids, txids[1:]) if b < a)
            raise TxidOutOfOrder(f"txid {high} follows {low}; txids never decrease")
        self.assigned_txid = txids[-1]
        return txids

    def pack(self, records: list[Record]) -> bytes:
        """The entry payload of `records` (the next entry of this segment)."""
        return self.pack_columns([r.txid for r in records], [r.payload for r in records])

    def pack_columns(self, txids: list[int], payloads: list[bytes]) -> bytes:
        """The entry payload of records given as columns (the next entry of this segment)."""
        data = pack_columns(txids, payloads, records_before=self.record_count, bytes_before=self.size,
                            last_txid=txids[-1] if txids else self.packed_txid, packer=self._packer,
                            codec=self._codec)
        self._count(len(txids), sum(map(len, payloads)), txids[0] if txids else -1, txids[-1] if txids else -1)
        return data

    def pack_buffers(self, count: int, txids, offsets, values, *, first_txid: int, last_txid: int) -> bytes:
        """The entry payload of `count` records given as entry_format's three parts (the next
        entry of this segment); the caller names their first and last txids."""
        data = pack_buffers(count, txids, offsets, values, records_before=self.record_count, bytes_before=self.size,
                            last_txid=last_txid if count else self.packed_txid, packer=self._packer,
                            codec=self._codec)
        self._count(count, memoryview(values).nbytes, first_txid, last_txid)
        return data

    def _count(self, count: int, size: int, first_txid: int, last_txid: int) -> None:
        if not count:
            return
        if self.first_txid < 0:
            self.first_txid = first_txid
        self.record_count += count
        self.size += size
        self.packed_txid = last_txid

    def pack_end_of_stream(self) -> bytes:
        return pack_entry(StreamEntry((), self.record_count, self.size, self.packed_txid, is_end_of_stream=True))

    def should_roll(self, now_s: int) -> bool:
        """Whether the next records belong in a new segment (never for an empty one)."""
        if self.record_count == 0:
            return False
        return (self.size >= self.settings.segment_rolling_size
                or now_s - self.segment.ctime_s >= self.settings.segment_rolling_interval_s)

    def completed(self, last_entry_id: int, *, is_end_of_stream: bool = False) -> SegmentMetadata:
        return dataclasses.replace(self.segment, state=SegmentState.COMPLETED, first_txid=self.first_txid,
                                   last_txid=self.packed_txid if self.record_count else -1,
                                   last_entry_id=last_entry_id, record_count=self.record_count, size=self.size,
                                   is_end_of_stream=is_end_of_stream)


def recovered_segment(segment: SegmentMetadata, *, last_entry_id: int, first_entry: StreamEntry | None,
                      last_entry: StreamEntry | None) -> SegmentMetadata:
    """The completed metadata of an in-progress segment whose ledger recovery sealed at
    `last_entry_id` (-1: empty), from its first and last entries."""
    if last_entry_id < 0 or last_entry is None:
        return dataclasses.replace(segment, state=SegmentState.COMPLETED, last_entry_id=-1, first_txid=-1,
                                   last_txid=-1, record_count=0, size=0)
    has_records = last_entry.records_through > 0
    first_txid = first_entry.records[0].txid if first_entry is not None and first_entry.records else -1
    return dataclasses.replace(segment, state=SegmentState.COMPLETED, last_entry_id=last_entry_id,
                               first_txid=first_txid, last_txid=last_entry.last_txid if has_records else -1,
                               record_count=last_entry.records_through, size=last_entry.bytes_through,
                               is_end_of_stream=last_entry.is_end_of_stream)
