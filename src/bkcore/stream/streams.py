"""Log streams for library users: `bk.streams` on a connected client.

    streams = bk.streams
    await streams.create_namespace("events", StreamSettings(ensemble_size=3, retention_s=86400))
    await streams.create_stream("events", "clicks")             # inherits the namespace's settings
    async with streams.open_writer("events", "clicks") as writer:
        position = await writer.write(b"...")
    async with streams.open_reader("events", "clicks", start="earliest") as reader:
        async for record in reader:
            await streams.commit_cursor("events", "clicks", "billing", record.dlsn)
    await streams.truncate("events", "clicks", position)

Truncation and retention delete whole segments (their ledgers), oldest first: the stream's
truncation point is raised first (so readers asking for what goes get PositionTruncated), each
segment is marked truncated, then its ledger is deleted. Retention runs after every segment roll
and on demand (apply_retention); with retention_keeps_unconsumed it spares segments that a
cursor has not read past.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import AsyncIterator

from bkcore.errors import NoSuchLedger
from bkcore.stream.errors import CursorNotFound, StreamMetadataConflict
from bkcore.stream.records import DLSN
from bkcore.stream.segments import (
    SegmentMetadata, SegmentState, StreamLayout, StreamSettings, segments_before, segments_past_retention,
)
from bkcore.stream.catalog import StreamCatalog
from bkcore.stream.reader import READ_AHEAD_ENTRIES, StreamReader
from bkcore.stream.writer import StreamWriter

DEFAULT_NAMESPACE = "default"
CAS_ATTEMPTS = 20


class Streams:
    def __init__(self, bk) -> None:
        self._bk = bk
        self._rt = self.runtime = bk.runtime
        self.catalog = StreamCatalog(bk.store, StreamLayout(bk.layout.root), runtime=bk.runtime)

    # -- namespaces and streams ---------------------------------------------------------------

    async def create_namespace(self, namespace: str, settings: StreamSettings = StreamSettings()) -> None:
        await self.catalog.create_namespace(namespace, settings)

    async def list_namespaces(self) -> list[str]:
        return await self.catalog.list_namespaces()

    async def delete_namespace(self, namespace: str) -> None:
        await self.catalog.delete_namespace(namespace)

    async def create_stream(self, namespace: str, stream: str, settings: StreamSettings | None = None) -> None:
        """A new empty stream; without `settings` it takes its namespace's."""
        await self.catalog.create_stream(namespace, stream, settings)

    async def list_streams(self, namespace: str) -> list[str]:
        return await self.catalog.list_streams(namespace)

    async def stream_info(self, namespace: str, stream: str) -> dict:
        metadata = await self.catalog.get_stream(namespace, stream)
        segments = await self.catalog.segments(namespace, stream)
        cursors = {name: str(await self.catalog.cursor(namespace, stream, name))
                   for name in await self.catalog.list_cursors(namespace, stream)}
        return {"stream": f"{namespace}/{stream}", "settings": dataclasses.asdict(metadata.settings),
                "truncated_to": str(metadata.truncated_to), "cursors": cursors,
                "segments": [_segment_summary(s) for s in segments]}

    async def delete_stream(self, namespace: str, stream: str) -> None:
        """Delete every segment's ledger, then the stream's metadata."""
        for segment in await self.catalog.segments(namespace, stream):
            await _delete_ledger(self._bk, segment.ledger_id)
        await self.catalog.delete_stream_nodes(namespace, stream)

    # -- writers and readers ------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def open_writer(self, namespace: str, stream: str, **options) -> AsyncIterator[StreamWriter]:
        """The stream's writer (fencing any previous one). Options: entry_size_max,
        entries_in_flight_max, pending_bytes_max, lac_push_delay_ns (see create_ledger),
        compression ("none" or "lz4": each entry's records compressed, as DistributedLog's
        compressionType). Leaving the block writes what is queued and seals the segment."""
        writer = await self._open_writer(namespace, stream, options)
        async with self._rt.open_nursery() as nursery:
            await nursery.start(writer.run)
            try:
                yield writer
                await writer.aclose()
            finally:
                nursery.cancel_scope.cancel()

    async def start_writer(self, nursery, namespace: str, stream: str, **options) -> StreamWriter:
        """open_writer() for owners of a longer-lived nursery: the writer's flusher runs there
        until `await writer.aclose()`."""
        writer = await self._open_writer(namespace, stream, options)
        await nursery.start(writer.run)
        return writer

    async def _open_writer(self, namespace: str, stream: str, options: dict) -> StreamWriter:
        writer = StreamWriter(self._bk, self.catalog, namespace, stream,
                              after_roll=lambda: self._retention_after_roll(namespace, stream), **options)
        await writer.open()
        return writer

    @contextlib.asynccontextmanager
    async def open_reader(self, namespace: str, stream: str, start: DLSN | str | None = None, *,
                          txid: int | None = None, cursor: str | None = None, end: DLSN | None = None,
                          read_ahead_entries: int = READ_AHEAD_ENTRIES) -> AsyncIterator[StreamReader]:
        """A reader from `start` (a DLSN or its text, "earliest" (default) or "latest"), from
        the first record with txid >= `txid`, or just after `cursor`'s committed position
        (falling back to `start` when the cursor does not exist yet). With `end` the reader
        stops before that position instead of tailing."""
        reader = StreamReader(self._bk, self.catalog, namespace, stream, read_ahead_entries=read_ahead_entries,
                              end=end)
        if cursor is not None:
            with contextlib.suppress(CursorNotFound):
                committed = await self.catalog.cursor(namespace, stream, cursor)
                start = DLSN(committed.segment, committed.entry_id, committed.slot + 1)
        position = await reader.resolve_start(start, txid=txid)
        async with self._rt.open_nursery() as nursery:
            await nursery.start(reader.read_ahead, position)
            try:
                yield reader
            finally:
                nursery.cancel_scope.cancel()

    # -- cursors ------------------------------------------------------------------------------

    async def commit_cursor(self, namespace: str, stream: str, cursor: str, position: DLSN) -> None:
        """Record that `cursor` has consumed everything up to and including `position`."""
        await self.catalog.commit_cursor(namespace, stream, cursor, position)

    async def cursor_position(self, namespace: str, stream: str, cursor: str) -> DLSN:
        return await self.catalog.cursor(namespace, stream, cursor)

    async def list_cursors(self, namespace: str, stream: str) -> list[str]:
        return await self.catalog.list_cursors(namespace, stream)

    async def delete_cursor(self, namespace: str, stream: str, cursor: str) -> None:
        await self.catalog.delete_cursor(namespace, stream, cursor)

    # -- batch writers ------------------------------------------------------------------------

    async def attach_segments(self, namespace: str, stream: str, *, writer_id: str, batch_id: int,
                              ledgers: list) -> "AttachOutcome":
        """Attach closed ledgers of stream entries (bkcore.stream.attach.AttachedLedger) as
        new segments, exactly once per (writer_id, batch_id); see bkcore.stream.attach."""
        from bkcore.stream.attach import attach_segments
        return await attach_segments(self._bk, self.catalog, namespace, stream, writer_id=writer_id,
                                     batch_id=batch_id, ledgers=ledgers)

    # -- truncation and retention -------------------------------------------------------------

    async def truncate(self, namespace: str, stream: str, position: DLSN) -> list[int]:
        """Drop the records before `position`: readers asking for them get PositionTruncated,
        and whole segments before it are deleted. Returns the deleted segments' seqnos."""
        segments = await self.catalog.segments(namespace, stream)
        next_seqno = segments[-1].seqno + 1 if segments else 1
        if position.segment > next_seqno or (position.segment == next_seqno and position[1:] != (0, 0)):
            raise ValueError(f"position {position} is past the end of {namespace}/{stream} "
                             f"(its next segment is {next_seqno})")
        for _ in range(CAS_ATTEMPTS):
            metadata = await self.catalog.get_stream(namespace, stream)
            if position <= metadata.truncated_to:
                break
            if await self.catalog.replace_stream(namespace, stream,
                                                 dataclasses.replace(metadata, truncated_to=position)):
                break
        else:
            raise StreamMetadataConflict(f"truncating {namespace}/{stream} lost {CAS_ATTEMPTS} races in a row")
        segments = await self.catalog.segments(namespace, stream)
        gone = segments_before(segments, position)
        # Segments a crash left marked truncated with their ledger maybe still there.
        leftovers = [s for s in segments if s.state is SegmentState.TRUNCATED and s.seqno < position.segment]
        for segment in leftovers + gone:
            await self._retire_segment(namespace, stream, segment)
        return [s.seqno for s in gone]

    async def apply_retention(self, namespace: str, stream: str, *, now_s: int | None = None) -> list[int]:
        """Delete the segments the stream's retention settings let go; returns their seqnos."""
        metadata = await self.catalog.get_stream(namespace, stream)
        segments = await self.catalog.segments(namespace, stream)
        protect_from = None
        if metadata.settings.retention_keeps_unconsumed:
            committed = [await self.catalog.cursor(namespace, stream, name)
                         for name in await self.catalog.list_cursors(namespace, stream)]
            protect_from = min(committed, default=None)
        now_s = int(self._rt.wall_time_s()) if now_s is None else now_s
        retired = segments_past_retention(segments, metadata.settings, now_s=now_s, protect_from=protect_from)
        if not retired:
            return []
        return await self.truncate(namespace, stream, DLSN(max(s.seqno for s in retired) + 1, 0, 0))

    async def _retention_after_roll(self, namespace: str, stream: str) -> None:
        await self.apply_retention(namespace, stream)

    async def _retire_segment(self, namespace: str, stream: str, segment: SegmentMetadata) -> None:
        """Mark the segment truncated, then delete its ledger (a crash in between leaves a
        truncated segment whose ledger the next truncation deletes)."""
        while segment.state is not SegmentState.TRUNCATED:
            stored = await self.catalog.replace_segment(namespace, stream,
                                                        dataclasses.replace(segment, state=SegmentState.TRUNCATED))
            if stored is not None:
                segment = stored
                break
            current = {s.seqno: s for s in await self.catalog.segments(namespace, stream)}
            if segment.seqno not in current:
                return
            segment = current[segment.seqno]
        await _delete_ledger(self._bk, segment.ledger_id)


async def _delete_ledger(bk, ledger_id: int) -> None:
    with contextlib.suppress(NoSuchLedger):
        await bk.delete_ledger(ledger_id)


def _segment_summary(segment: SegmentMetadata) -> dict:
    return {"seqno": segment.seqno, "ledger_id": segment.ledger_id, "state": segment.state.value,
            "first_txid": segment.first_txid, "last_txid": segment.last_txid,
            "last_entry_id": segment.last_entry_id, "records": segment.record_count, "bytes": segment.size,
            "ctime_s": segment.ctime_s, "end_of_stream": segment.is_end_of_stream}
