"""Planning reads of a stream: which entries of which segment ledgers a Spark job reads.

Plain functions over plain values (no Spark, no I/O), so they are tested without a JVM or a
cluster. The driver takes a StreamView (the stream's truncation point and every segment with
how far it may be read) and turns offsets into ReadSpans, one per Spark partition.

Rules:
- A segment is never planned past what is safe to read: a completed segment to its last entry,
  an in-progress one to its LAC at planning time (the view carries it as readable_last_entry_id).
- A span holds at most max_entries entries and about max_bytes bytes (128 MiB by default, as
  Spark's file sources split files), so large segments are read by several tasks while small
  entries still make partitions large enough to be worth a Spark task.
- Ends are exclusive positions. A position inside an entry (slot > 0) is honoured by the span's
  first_slot / end_slot; streaming batches always end on entry boundaries.
- Data loss is exact: an offset names the ledger of its segment, and the planner reports which
  ledgers were truncated between an offset and the first position still readable.
- Admission control counts entries (and estimates bytes from each segment's average entry size).
"""

from __future__ import annotations

from dataclasses import dataclass

from bkcore.stream.records import DLSN, DLSN_START
from bkcore.stream.segments import SegmentMetadata, SegmentState, segment_for_txid, start_of
from bkspark.offsets import UNKNOWN_LEDGER, OffsetSpec, StreamOffset

TXID_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class SegmentExtent:
    """A segment as the planner sees it: how far it may be read and what it holds."""

    seqno: int
    ledger_id: int
    state: SegmentState
    readable_last_entry_id: int      # -1: nothing readable
    first_txid: int = -1
    last_txid: int = -1
    record_count: int = 0
    size: int = 0                    # payload bytes up to readable_last_entry_id
    ctime_s: int = 0

    @property
    def entry_count(self) -> int:
        return self.readable_last_entry_id + 1

    @property
    def entry_size_estimate(self) -> int:
        return self.size // self.entry_count if self.entry_count > 0 else 0


def extent_of(segment: SegmentMetadata, *, lac: int = -1, records_through: int = 0,
              bytes_through: int = 0) -> SegmentExtent:
    """A segment's extent: completed ones from their metadata, an in-progress one from its LAC
    and the counters of the entry at the LAC (records/bytes through it)."""
    if segment.state is SegmentState.COMPLETED:
        return SegmentExtent(segment.seqno, segment.ledger_id, segment.state, segment.last_entry_id,
                             segment.first_txid, segment.last_txid, segment.record_count, segment.size,
                             segment.ctime_s)
    if segment.state is SegmentState.TRUNCATED:
        return SegmentExtent(segment.seqno, segment.ledger_id, segment.state, -1, ctime_s=segment.ctime_s)
    return SegmentExtent(segment.seqno, segment.ledger_id, segment.state, lac, segment.first_txid, -1,
                         records_through, bytes_through, segment.ctime_s)


@dataclass(frozen=True, slots=True)
class StreamView:
    name: str                        # "namespace/stream"
    truncated_to: DLSN
    extents: tuple[SegmentExtent, ...]

    def extent(self, seqno: int) -> SegmentExtent | None:
        return next((e for e in self.extents if e.seqno == seqno), None)

    def ledger_at(self, position: DLSN) -> int:
        extent = self.extent(position.segment)
        return extent.ledger_id if extent is not None else UNKNOWN_LEDGER


@dataclass(frozen=True, slots=True)
class ReadSpan:
    """What one Spark partition reads: entries first..last of one ledger (inclusive)."""

    stream: str | None               # None: a raw ledger
    seqno: int
    ledger_id: int
    first_entry_id: int
    last_entry_id: int
    first_slot: int = 0              # records of first_entry_id before this slot are skipped
    end_slot: int = -1               # >= 0: records of last_entry_id from this slot on are skipped
    txid_min: int = 0
    txid_max: int = TXID_MAX

    @property
    def entry_count(self) -> int:
        return self.last_entry_id - self.first_entry_id + 1


# -- ends of the stream ---------------------------------------------------------------------


def earliest(view: StreamView) -> StreamOffset:
    position = start_of(list(view.extents), max(DLSN_START, view.truncated_to)) or end_of(view).position
    return StreamOffset(position, view.ledger_at(position))


def end_of(view: StreamView) -> StreamOffset:
    """Just after the last readable entry (where a tail would go on)."""
    live = [e for e in view.extents if e.state is not SegmentState.TRUNCATED]
    if not live:
        next_seqno = view.extents[-1].seqno + 1 if view.extents else 1
        return StreamOffset(DLSN(next_seqno, 0, 0))
    last = live[-1]
    if last.state is SegmentState.COMPLETED:
        return StreamOffset(DLSN(last.seqno + 1, 0, 0))
    return StreamOffset(DLSN(last.seqno, last.readable_last_entry_id + 1, 0), last.ledger_id)


def resolve_start(view: StreamView, spec: OffsetSpec) -> tuple[StreamOffset, int]:
    """(offset to start at, smallest txid to keep) for a startingOffsets spec."""
    if spec.kind == "earliest":
        return earliest(view), 0
    if spec.kind == "latest":
        return end_of(view), 0
    if spec.kind == "position":
        return StreamOffset(spec.position, view.ledger_at(spec.position)), 0
    if spec.kind == "txid":
        segment = segment_for_txid(list(view.extents), spec.value)
        if segment is None:
            return end_of(view), spec.value
        position = max(DLSN(segment.seqno, 0, 0), view.truncated_to)
        return StreamOffset(position, view.ledger_at(position)), spec.value
    assert spec.kind == "timestamp"
    time_s = spec.value // 1000
    created = [e for e in view.extents if e.state is not SegmentState.TRUNCATED and e.ctime_s <= time_s]
    if created:
        return StreamOffset(DLSN(created[-1].seqno, 0, 0), created[-1].ledger_id), 0
    return earliest(view), 0


def resolve_end(view: StreamView, spec: OffsetSpec) -> tuple[DLSN, int]:
    """(exclusive end position, largest txid to keep) for an endingOffsets spec."""
    if spec.kind in ("latest", "earliest"):
        return (end_of(view) if spec.kind == "latest" else earliest(view)).position, TXID_MAX
    if spec.kind == "position":
        return spec.position, TXID_MAX
    if spec.kind == "txid":
        return end_of(view).position, spec.value - 1
    time_s = spec.value // 1000
    after = [e for e in view.extents if e.ctime_s > time_s]
    return (DLSN(after[0].seqno, 0, 0) if after else end_of(view).position), TXID_MAX


# -- data loss ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DataLoss:
    lost_ledger_ids: tuple[int, ...]
    resume: StreamOffset             # the first position still readable

    def describe(self, view: StreamView, start: StreamOffset) -> str:
        ledgers = ", ".join(map(str, self.lost_ledger_ids)) or "none whole (truncated inside a segment)"
        return (f"stream {view.name}: records from {start.position} to {self.resume.position} were truncated "
                f"before they were read (lost ledgers: {ledgers})")


def find_data_loss(view: StreamView, start: StreamOffset) -> DataLoss | None:
    """None if reading can go on at `start`; otherwise what was lost and where to resume."""
    extent = view.extent(start.position.segment)
    if extent is not None and start.ledger_id != UNKNOWN_LEDGER and extent.ledger_id != start.ledger_id:
        # The segment now holds another ledger (the stream was deleted and made again).
        return DataLoss((start.ledger_id,), earliest(view))
    segment_gone = extent is not None and extent.state is SegmentState.TRUNCATED
    if not segment_gone and start.position >= view.truncated_to:
        return None
    resume_at = start_of(list(view.extents), max(start.position, view.truncated_to))
    resume = StreamOffset(resume_at, view.ledger_at(resume_at)) if resume_at else end_of(view)
    lost = tuple(e.ledger_id for e in view.extents
                 if start.position.segment <= e.seqno < resume.position.segment and e.state is SegmentState.TRUNCATED)
    return DataLoss(lost, resume)


# -- spans ----------------------------------------------------------------------------------


def partition_entries(entry_size: int, *, max_entries: int, max_bytes: int | None) -> int:
    """Entries per partition: as many as hold max_bytes at this entry size (unknown: 0), at most
    max_entries, at least one."""
    if max_bytes is None or entry_size <= 0:
        return max_entries
    return max(1, min(max_entries, max_bytes // entry_size))


def plan_spans(view: StreamView, start: DLSN, end: DLSN, *, max_entries: int, max_bytes: int | None = None,
               txid_min: int = 0, txid_max: int = TXID_MAX) -> list[ReadSpan]:
    """Spans covering the records in [start, end) of live segments, at most max_entries each and
    about max_bytes each (from each segment's average entry size)."""
    assert max_entries >= 1
    spans = []
    for extent in view.extents:
        if extent.state is SegmentState.TRUNCATED or not start.segment <= extent.seqno <= end.segment:
            continue
        if extent.state is SegmentState.COMPLETED and extent.record_count > 0 and \
                (extent.last_txid < txid_min or extent.first_txid > txid_max):
            continue
        first = start.entry_id if extent.seqno == start.segment else 0
        last = extent.readable_last_entry_id
        end_slot = -1
        if extent.seqno == end.segment:
            if end.slot > 0 and end.entry_id <= last:
                last, end_slot = end.entry_id, end.slot
            else:
                last = min(last, end.entry_id - 1)
        chunk = partition_entries(extent.entry_size_estimate, max_entries=max_entries, max_bytes=max_bytes)
        for chunk_first in range(first, last + 1, chunk):
            chunk_last = min(last, chunk_first + chunk - 1)
            spans.append(ReadSpan(view.name, extent.seqno, extent.ledger_id, chunk_first, chunk_last,
                                  first_slot=start.slot if (extent.seqno, chunk_first) == start[:2] else 0,
                                  end_slot=end_slot if chunk_last == last else -1,
                                  txid_min=txid_min, txid_max=txid_max))
    return spans


def ledger_spans(ledgers: list[tuple[int, int, int]], *, max_entries: int, max_bytes: int | None = None) -> list[ReadSpan]:
    """Spans over raw ledgers, given (ledger id, last readable entry id, average entry size or 0
    if unknown) each."""
    spans = []
    for ledger_id, last, entry_size in ledgers:
        chunk = partition_entries(entry_size, max_entries=max_entries, max_bytes=max_bytes)
        spans += [ReadSpan(None, 0, ledger_id, first, min(last, first + chunk - 1)) for first in range(0, last + 1, chunk)]
    return spans


# -- admission control ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Backlog:
    entry_count: int
    size_estimate: int


def backlog(view: StreamView, start: DLSN, end: DLSN) -> Backlog:
    """Entries (and estimated bytes) between two entry-boundary positions."""
    entries = size = 0
    for span in plan_spans(view, start, end, max_entries=2**62):
        extent = view.extent(span.seqno)
        entries += span.entry_count
        size += span.entry_count * extent.entry_size_estimate
    return Backlog(entries, size)


def limit_end(view: StreamView, start: DLSN, end: DLSN, *, entry_count_max: int | None = None,
              size_max: int | None = None) -> DLSN:
    """The furthest entry boundary at or before `end` that keeps [start, result) within the
    limits (always at least one entry, so a batch makes progress)."""
    entry_budget = entry_count_max if entry_count_max is not None else 2**62
    size_budget = size_max if size_max is not None else 2**62
    taken = 0
    for span in plan_spans(view, start, end, max_entries=2**62):
        per_entry = max(1, view.extent(span.seqno).entry_size_estimate)
        count = min(span.entry_count, entry_budget, size_budget // per_entry)
        if count == 0 and taken == 0:
            count = 1
        if count < span.entry_count:
            return DLSN(span.seqno, span.first_entry_id + count, 0)
        taken += count
        entry_budget -= count
        size_budget -= count * per_entry
    return end


def offset_after(view: StreamView, position: DLSN) -> StreamOffset:
    """An offset for `position`, moved to the start of the next segment when it lies past the end
    of a completed segment (so the offset names the ledger it will be read from)."""
    extent = view.extent(position.segment)
    if extent is not None and extent.state is SegmentState.COMPLETED and \
            position.entry_id > extent.readable_last_entry_id:
        following = [e for e in view.extents if e.seqno > extent.seqno]
        position = DLSN(following[0].seqno if following else extent.seqno + 1, 0, 0)
    return StreamOffset(position, view.ledger_at(position))
