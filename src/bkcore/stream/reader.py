"""Readers of a log stream: from a position, a txid, the start or the tail; tailing across
segments as the writer rolls them, with a bounded read-ahead.

    async with streams.open_reader("ns", "events", start="earliest") as reader:
        async for record in reader:            # PositionedRecord(dlsn, txid, payload)
            ...

A background task reads entries ahead into a channel of `read_ahead_entries` (so memory stays
bounded whatever the reader's pace): completed segments are read to their last entry, the
in-progress one is tailed with long-poll LAC reads until its writer seals it, and then the next
segment is awaited through a watch on the segment list. A position that truncation or retention
removed raises PositionTruncated, whether asked for at the start or overtaken while reading.
The iteration ends at an end-of-stream marker.
"""

from __future__ import annotations

import math

from bkcore.errors import BKException, NoSuchEntry, NoSuchLedger
from bkcore.stream.errors import PositionTruncated, StreamException
from bkcore.stream.entry_format import unpack_entry
from bkcore.stream.records import DLSN, DLSN_START, PositionedRecord, positioned
from bkcore.stream.segments import SegmentMetadata, SegmentState, segment_for_txid, start_of
from bkcore.stream.catalog import StreamCatalog
from bkcore.stream.writer import STREAM_LEDGER_PASSWORD

READ_AHEAD_ENTRIES = 64
_END = object()     # the read-ahead saw the end-of-stream marker


class StreamReader:
    def __init__(self, bk, catalog: StreamCatalog, namespace: str, stream: str, *,
                 read_ahead_entries: int = READ_AHEAD_ENTRIES, end: DLSN | None = None) -> None:
        self._bk = bk
        self._rt = bk.runtime
        self._catalog = catalog
        self.namespace, self.stream = namespace, stream
        self._send, self._receive = self._rt.open_memory_channel(read_ahead_entries)
        self._buffered: list[PositionedRecord] = []
        self._ended = False
        self._min_txid = -1                   # started from a txid: records below it are skipped
        self._end = end                       # the reader ends before this position (None: never)
        self.position: DLSN = DLSN_START      # of the next record this reader returns

    # -- where to start -----------------------------------------------------------------------

    async def resolve_start(self, start: DLSN | str | None = None, *, txid: int | None = None) -> DLSN:
        """The first position to read: a DLSN, "earliest", "latest" (only records written from
        now on), or the first record with a txid >= `txid`."""
        metadata = await self._catalog.get_stream(self.namespace, self.stream)
        segments = await self._catalog.segments(self.namespace, self.stream)
        if txid is not None:
            # The search is only as good as the LACs it sees: records written meanwhile that
            # are still below `txid` are filtered out as they are read.
            self._min_txid = txid
            return max(await self._position_of_txid(segments, txid), metadata.truncated_to)
        if start is None or start == "earliest":
            return max(DLSN_START, metadata.truncated_to)
        if start == "latest":
            return await self._tail_position(segments)
        if isinstance(start, str):
            start = DLSN.parse(start)
        if start < metadata.truncated_to:
            raise PositionTruncated(f"{self._name()} is truncated up to {metadata.truncated_to}; "
                                    f"position {start} is gone")
        return start

    async def _tail_position(self, segments: list[SegmentMetadata]) -> DLSN:
        live = [s for s in segments if s.state is not SegmentState.TRUNCATED]
        if not live:
            return DLSN(segments[-1].seqno + 1 if segments else 1, 0, 0)
        last = live[-1]
        if last.state is SegmentState.COMPLETED:
            return DLSN(last.seqno + 1, 0, 0)
        handle = await self._open(last)
        return DLSN(last.seqno, (handle.last_add_confirmed if handle else -1) + 1, 0)

    async def _position_of_txid(self, segments: list[SegmentMetadata], txid: int) -> DLSN:
        """Binary search: the segment (by metadata), then the entry (by reading entries, whose
        txids never decrease), then the slot."""
        segment = segment_for_txid(segments, txid)
        if segment is None:
            return await self._tail_position(segments)
        handle = await self._open(segment)
        if handle is None:
            return DLSN(segment.seqno + 1, 0, 0)
        low, high = 0, handle.last_add_confirmed + 1        # answer in [low, high]
        while low < high:
            middle = (low + high) // 2
            entry = unpack_entry((await handle.read(middle, middle))[0])
            if entry.last_txid < txid or (entry.is_end_of_stream and not entry.records):
                low = middle + 1
            else:
                high = middle
        if low > handle.last_add_confirmed:
            return DLSN(segment.seqno, low, 0)
        entry = unpack_entry((await handle.read(low, low))[0])
        slot = next(i for i, record in enumerate(entry.records) if record.txid >= txid)
        return DLSN(segment.seqno, low, slot)

    # -- reading ------------------------------------------------------------------------------

    async def read_ahead(self, position: DLSN, *, task_status) -> None:
        """The background task: entries from `position` on into the channel."""
        self.position = position
        task_status.started()
        async with self._send:
            try:
                while True:
                    segments = await self._catalog.segments(self.namespace, self.stream)
                    await self._check_not_truncated(position)
                    begin = start_of(segments, position)
                    if self._end is not None and (begin or position) >= self._end:
                        await self._send.send(_END)
                        return
                    if begin is None:
                        segments, watch = await self._catalog.segments_with_watch(self.namespace, self.stream)
                        if start_of(segments, position) is None:
                            await watch.wait()
                        continue
                    segment = next(s for s in segments if s.seqno == begin.segment)
                    position = await self._read_segment(segment, begin)
                    if position is None:
                        await self._send.send(_END)
                        return
            except (StreamException, BKException, OSError) as exc:
                # Every domain error below (a read timing out, replicas answering IO_ERROR, a
                # digest mismatch, the metastore gone) reaches the reader as itself; only bugs
                # and cancellation escape the task.
                await self._send.send(exc)

    async def _read_segment(self, segment: SegmentMetadata, position: DLSN) -> DLSN | None:
        """Send the segment's records from `position` on; returns where the next segment starts
        (None at the end of the stream)."""
        handle = await self._open(segment)
        if handle is None:
            await self._check_not_truncated(DLSN(segment.seqno + 1, 0, 0))
            return DLSN(segment.seqno + 1, 0, 0)
        try:
            async for entry_id, payload in handle.tail(position.entry_id):
                entry = unpack_entry(payload)
                records = [r for r in positioned(segment.seqno, entry_id, entry)
                           if r.dlsn >= position and r.txid >= self._min_txid]
                if self._end is not None and records and records[-1].dlsn >= self._end:
                    records = [r for r in records if r.dlsn < self._end]
                    if records:
                        await self._send.send(records)
                    return None
                if records:
                    await self._send.send(records)
                if entry.is_end_of_stream:
                    return None
        except (NoSuchLedger, NoSuchEntry):
            await self._check_not_truncated(DLSN(segment.seqno + 1, 0, 0))
            raise
        return DLSN(segment.seqno + 1, 0, 0)

    async def _open(self, segment: SegmentMetadata):
        """A reader of the segment's ledger (no recovery: its writer may still be adding);
        None if the ledger is gone."""
        try:
            return await self._bk.open_ledger(segment.ledger_id, password=STREAM_LEDGER_PASSWORD, recovery=False)
        except NoSuchLedger:
            return None

    async def _check_not_truncated(self, position: DLSN) -> None:
        truncated_to = (await self._catalog.get_stream(self.namespace, self.stream)).truncated_to
        if position < truncated_to:
            raise PositionTruncated(f"{self._name()} was truncated up to {truncated_to} while this reader "
                                    f"was at {position}; the records in between are gone")

    @property
    def is_ended(self) -> bool:
        """Whether the reader has passed the stream's end-of-stream marker (or its `end`)."""
        return self._ended and not self._buffered

    async def read_next(self, *, timeout_s: float = math.inf) -> PositionedRecord | None:
        """The next record; None at the end of the stream (see is_ended) or when `timeout_s`
        passes first."""
        if not self._buffered:
            if self._ended:
                return None
            with self._rt.move_on_after(timeout_s):
                try:
                    item = await self._receive.receive()
                except self._rt.EndOfChannel:
                    # The read-ahead stopped on something unexpected, which its nursery raises.
                    self._ended = True
                    raise StreamException(f"the reader of {self._name()} stopped reading ahead") from None
                if item is _END:
                    self._ended = True
                    return None
                if isinstance(item, BaseException):
                    self._ended = True
                    raise item
                self._buffered = list(reversed(item))
            if not self._buffered:
                return None
        record = self._buffered.pop()
        self.position = DLSN(record.dlsn.segment, record.dlsn.entry_id, record.dlsn.slot + 1)
        return record

    def __aiter__(self):
        return self

    async def __anext__(self) -> PositionedRecord:
        record = await self.read_next()
        if record is None:
            raise StopAsyncIteration
        return record

    def _name(self) -> str:
        return f"stream {self.namespace}/{self.stream}"
