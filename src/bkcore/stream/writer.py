"""The writer of a log stream: records batched into entries of segment ledgers, rolled by size
or age, with one writer at a time.

    async with streams.open_writer("ns", "events") as writer:
        position = await writer.write(b"payload")                 # one record, durable
        positions = await writer.write_many([b"a", (42, b"b")])    # (txid, payload) or payload

Opening fences the previous writer: an in-progress last segment is recovered (its ledger fenced
and sealed, its totals read back from its last entry) and marked completed before this writer
creates the next segment; the old writer's next add fails and it gets WriterFenced. Records
queued while earlier entries are in flight are packed together into the next entry, so many
concurrent write() calls cost few entries. Every decision about records (txids, counters,
rolling) is bkcore.stream.writer_state's. With compression="lz4" (DistributedLog's
compressionType) each entry's records are LZ4-compressed; readers need no setting.
"""

from __future__ import annotations

import collections
from typing import Awaitable, Callable, Iterable

from bkcore.errors import BKException, LedgerClosed, LedgerFenced, NoSuchLedger
from bkcore.stream.errors import EndOfStream, StreamException, WriterFenced
from bkcore.stream.entry_format import codec_code, unpack_entry
from bkcore.stream.records import DLSN, Record, RecordBatcher
from bkcore.stream.segments import SegmentMetadata, SegmentState, StreamSettings, stream_last_txid
from bkcore.stream.send_rounds import SendRounds
from bkcore.stream.writer_state import SegmentWriteState, recovered_segment
from bkcore.stream.catalog import StreamCatalog

# Stream segments are ledgers with this password (streams are guarded by the metastore).
STREAM_LEDGER_PASSWORD = b"bk-stream"
ENTRY_SIZE_MAX = 512 * 1024
ENTRIES_IN_FLIGHT_MAX = 64
PENDING_BYTES_MAX = 64 * 1024 * 1024


class _Pending:
    """A record queued or in flight, and whom to tell once it is durable or has failed:
    notify(pending), once, with position or error set."""

    __slots__ = ("record", "notify", "position", "error", "is_resolved")

    def __init__(self, record: Record, notify: Callable[["_Pending"], None]) -> None:
        self.record = record
        self.notify = notify
        self.position: DLSN | None = None
        self.error: BaseException | None = None
        self.is_resolved = False


class StreamWriter:
    def __init__(self, bk, catalog: StreamCatalog, namespace: str, stream: str, *,
                 after_roll: Callable[[], Awaitable[None]] | None = None,
                 entry_size_max: int = ENTRY_SIZE_MAX, entries_in_flight_max: int = ENTRIES_IN_FLIGHT_MAX,
                 pending_bytes_max: int = PENDING_BYTES_MAX, lac_push_delay_ns: int | None = None,
                 rounds: SendRounds | None = None, compression: str = "none") -> None:
        codec_code(compression)         # refused here, before anything is opened
        self._bk = bk
        self._rt = bk.runtime
        self._catalog = catalog
        self.namespace, self.stream = namespace, stream
        self._after_roll = after_roll
        self._batcher = RecordBatcher(entry_size_max=entry_size_max)
        self._compression = compression
        self._entries_in_flight_max = entries_in_flight_max
        self._pending_bytes_max = pending_bytes_max
        self._lac_push_delay_ns = lac_push_delay_ns      # for its ledgers (create_ledger)
        # Shared with other writers: entries go in their rounds (bkcore.stream.send_rounds).
        self._rounds = rounds
        self._queue: collections.deque[_Pending] = collections.deque()
        self._queued_bytes = 0
        self._in_flight = 0
        self._changed = self._rt.Event()   # set on any progress: queue, acks, failure, close
        self._ledger = None
        self._state: SegmentWriteState | None = None
        self._settings: StreamSettings | None = None
        self._failure: BaseException | None = None
        self._closing = False
        self._roll_requested = False
        self._is_end_of_stream = False
        self.last_position: DLSN | None = None

    @property
    def segment(self) -> SegmentMetadata:
        return self._state.segment

    @property
    def last_txid(self) -> int:
        return self._state.assigned_txid

    # -- lifecycle ----------------------------------------------------------------------------

    async def open(self) -> None:
        metadata = await self._catalog.get_stream(self.namespace, self.stream)
        self._settings = metadata.settings
        segments = await self._catalog.segments(self.namespace, self.stream)
        if segments and segments[-1].state is SegmentState.IN_PROGRESS:
            segments[-1] = await recover_segment(self._bk, self._catalog, self.namespace, self.stream, segments[-1])
        if segments and segments[-1].is_end_of_stream:
            raise EndOfStream(f"stream {self.namespace}/{self.stream} ended (end-of-stream marker); "
                              f"it takes no more records")
        await self._start_segment(segments[-1].seqno + 1 if segments else 1, stream_last_txid(segments))

    async def run(self, *, task_status) -> None:
        """The flusher: sends queued records as entries, rolls segments. Runs until aclose()."""
        task_status.started()
        try:
            await self._flush_loop()
        except self._rt.Cancelled:
            raise
        except BaseException as exc:     # noqa: BLE001 - every failure ends the writer and its waiters
            self._fail(exc)

    async def aclose(self) -> None:
        """Write what is queued, then seal the segment (a reader sees the stream go on after
        it once another writer opens). A failed or fenced writer just stops."""
        self._closing = True
        self._signal()
        while (self._queue or self._in_flight) and self._failure is None:
            await self._wait_for_change()
        if self._failure is None and self._ledger is not None and not self._is_end_of_stream:
            await self._complete_segment()
        if self._rounds is not None:
            self._rounds.leave(self)

    def abort(self, error: BaseException) -> None:
        """Stop without sealing anything (the owner gave the stream up): waiting and later
        writes get `error`, the flusher ends. The next writer recovers the segment."""
        self._fail(error)
        self._closing = True
        self._signal()

    async def roll(self) -> None:
        """Seal the current segment once its entries in flight are acknowledged, and go on in
        a new one (records not sent yet go there; an empty segment is left as it is).
        Truncation frees whole segments, so a caller that truncates at known points rolls
        there."""
        self._check_usable()
        self._roll_requested = True
        self._signal()
        while self._roll_requested and self._failure is None:
            await self._wait_for_change()
        self._raise_failure()

    async def mark_end_of_stream(self) -> DLSN:
        """Seal the stream: wait for queued records, write the end-of-stream marker and mark the
        segment completed. Returns the marker's position; later writes raise EndOfStream."""
        self._check_usable()
        self._is_end_of_stream = True
        while (self._queue or self._in_flight) and self._failure is None:
            await self._wait_for_change()
        self._raise_failure()
        entry_id = await self._ledger.add(self._state.pack_end_of_stream())
        await self._complete_segment(is_end_of_stream=True)
        self._fail(EndOfStream(f"stream {self.namespace}/{self.stream} ended (end-of-stream marker)"))
        return DLSN(self._state.segment.seqno, entry_id, 0)

    # -- writing ------------------------------------------------------------------------------

    async def write(self, payload: bytes, *, txid: int | None = None) -> DLSN:
        """Append one record (txid: the previous one + 1 unless given); returns its position
        once it is durable."""
        return (await self.write_many([payload if txid is None else (txid, payload)]))[0]

    async def write_many(self, items: Iterable[bytes | tuple[int, bytes]]) -> list[DLSN]:
        """Append records in order; returns their positions once all are durable. Txids are
        checked before anything is queued: one that goes backwards refuses the whole call."""
        self._check_usable()
        records = self._records_of(items)
        size = sum(len(r.payload) for r in records)
        while self._queued_bytes and self._queued_bytes + size > self._pending_bytes_max and self._failure is None:
            await self._wait_for_change()
        self._check_usable()
        all_done = self._rt.Event()
        unresolved = [len(records)]

        def notify(_: _Pending) -> None:
            unresolved[0] -= 1
            if not unresolved[0]:
                all_done.set()
        pendings = [_Pending(record, notify) for record in records]
        self._enqueue(pendings, size)
        await all_done.wait()
        for pending in pendings:
            if pending.error is not None:
                raise pending.error
        return [pending.position for pending in pendings]

    def write_nowait(self, payload: bytes, on_done: Callable[[DLSN | None, BaseException | None], None]) -> _Pending:
        """write() for a caller that is told by a callback rather than woken as a task: queues
        one record and returns its pending write, whose `position` is set once it is durable;
        on_done(position, None) follows, or on_done(None, error), called from whatever settles
        it (an acknowledgement, a failure). The records of one entry all have their positions
        before the first of them is told. Raises at once, queuing nothing, what write() would
        raise before queuing. It does not wait for room under pending_bytes_max: the caller
        bounds what it queues (a table range queues one record per request in flight)."""
        self._check_usable()
        [record] = self._records_of([payload])
        pending = _Pending(record, lambda pending: on_done(pending.position, pending.error))
        self._enqueue([pending], len(payload))
        return pending

    def _enqueue(self, pendings: list[_Pending], size: int) -> None:
        """Queue records. A writer with nothing in flight sends the first entry at once, from
        the caller (an idle table range's command reaches the bookies without a task switch to
        the flusher); while entries are in flight, an acknowledgement sends what is queued
        (_send_next_entry_now), so the flusher is woken only when it has room to send."""
        self._queue.extend(pendings)
        self._queued_bytes += size
        if not self._in_flight:
            self._send_next_entry_now()
        if (self._queue and self._in_flight < self._entries_in_flight_max
                and not (self._rounds is not None and self._rounds.is_waiting(self))):
            self._signal()

    def _records_of(self, items) -> list[Record]:
        state = self._state
        before = state.assigned_txid
        records = []
        try:
            for item in items:
                txid, payload = item if isinstance(item, tuple) else (None, item)
                if not isinstance(payload, (bytes, bytearray, memoryview)):
                    raise TypeError(f"a record's payload is bytes, not {type(payload).__name__}")
                record = Record(state.assign_txid(txid), bytes(payload))
                self._batcher.check(record)
                records.append(record)
        except BaseException:
            state.assigned_txid = before
            raise
        return records

    # -- the flusher --------------------------------------------------------------------------

    async def _flush_loop(self) -> None:
        while True:
            while not self._queue and not self._roll_requested:
                if self._closing:
                    return
                await self._wait_for_change()
            if self._roll_requested or self._state.should_roll(int(self._rt.wall_time_s())):
                self._roll_requested = True     # (until it is done: no entry leaves meanwhile)
                while self._in_flight:
                    await self._wait_for_change()
                self._raise_failure()
                if self._state.record_count:
                    await self._roll()
                self._roll_requested = False
                self._signal()
                continue
            while self._in_flight >= self._entries_in_flight_max:
                await self._wait_for_change()
            self._raise_failure()
            if not self._queue:     # (an acknowledgement may have sent it meanwhile)
                continue
            if self._is_admitted():
                self._send_entry()
            else:                   # (the round's end sends it: _on_round_open)
                await self._wait_for_change()

    def _send_entry(self) -> None:
        """Pack as many queued records as fit one entry and start adding it."""
        taken: list[_Pending] = []
        batcher = self._batcher
        while self._queue and batcher.fits(self._queue[0].record):
            pending = self._queue.popleft()
            batcher.add(pending.record)
            taken.append(pending)
        self._queued_bytes -= sum(len(p.record.payload) for p in taken)
        payload = self._state.pack(batcher.flush())
        seqno = self._state.segment.seqno
        self._in_flight += 1
        rounds = self._rounds
        if rounds is not None:
            rounds.started(self)

        def on_done(entry_id: int | None, error: BKException | None) -> None:
            self._in_flight -= 1
            if error is not None:
                self._fail(_as_writer_error(error, self))
                _settle(taken, error=self._failure)
                self._signal()
            else:
                self.last_position = DLSN(seqno, entry_id, len(taken) - 1)
                # The next entry leaves before the records' owners are told: it waits on nothing
                # of theirs. In rounds, it leaves when the round ends (now, if this ended it).
                if rounds is None:
                    self._send_next_entry_now()
                else:
                    rounds.finished(self, self._on_round_open if self._queue else None)
                _settle(taken, positions=[DLSN(seqno, entry_id, slot) for slot in range(len(taken))])
                if self._queue or self._closing or self._roll_requested or self._is_end_of_stream:
                    # (Otherwise nobody waits for an acknowledgement: the flusher waits for
                    # records, and waking it for nothing is a task switch per entry.)
                    self._signal()

        # Alone: no other entry follows in a row (nothing left, or no room), so the ledger
        # sends it now rather than once the caller yields.
        self._ledger.start_add(payload, on_done,
                               alone=not self._queue or self._in_flight >= self._entries_in_flight_max)

    def _send_next_entry_now(self) -> None:
        """On an entry's acknowledgement: the records queued meanwhile leave at once, from the
        callback, not a task switch later from the flusher. The next group starts a hop sooner,
        and the ledger does not look idle between the two entries (an idle ledger may push its
        LAC to every bookie). The flusher keeps what needs waiting: rolls, closing."""
        if (self._queue and self._failure is None and not self._roll_requested
                and self._in_flight < self._entries_in_flight_max
                and not self._state.should_roll(int(self._rt.wall_time_s()))
                and self._is_admitted()):
            self._send_entry()

    def _is_admitted(self) -> bool:
        """Whether the next entry may leave now: always, unless the writer sends in rounds and
        one is in flight (the round's end then calls _on_round_open)."""
        return self._rounds is None or self._rounds.admit(self, self._on_round_open)

    def _on_round_open(self) -> None:
        """The round this writer waited for ended: its next entry leaves, or the flusher sees
        to what keeps it (a roll that is due)."""
        self._send_next_entry_now()
        if self._queue and self._in_flight < self._entries_in_flight_max:
            self._signal()

    async def _roll(self) -> None:
        await self._complete_segment()
        await self._start_segment(self._state.segment.seqno + 1, self._state.packed_txid)
        if self._after_roll is not None:
            await self._after_roll()

    async def _complete_segment(self, *, is_end_of_stream: bool = False) -> None:
        try:
            closed = await self._ledger.close()
        except (LedgerFenced, LedgerClosed) as exc:
            raise _as_writer_error(exc, self) from None
        done = self._state.completed(closed.last_entry_id, is_end_of_stream=is_end_of_stream)
        stored = await self._catalog.replace_segment(self.namespace, self.stream, done)
        if stored is None:
            raise WriterFenced(f"segment {done.seqno} of {self.namespace}/{self.stream} was recovered by "
                               f"another writer")
        self._ledger = None
        self._state.segment = stored

    async def _start_segment(self, seqno: int, last_txid: int) -> None:
        settings = self._settings
        ledger = await self._bk.create_ledger(
            ensemble=settings.ensemble_size, write_quorum=settings.write_quorum_size,
            ack_quorum=settings.ack_quorum_size, password=STREAM_LEDGER_PASSWORD,
            custom_metadata={"stream": f"{self.namespace}/{self.stream}".encode(), "segment": str(seqno).encode()},
            lac_push_delay_ns=self._lac_push_delay_ns)
        segment = SegmentMetadata(seqno, ledger.ledger_id, ctime_s=int(self._rt.wall_time_s()))
        stored = await self._catalog.create_segment(self.namespace, self.stream, segment)
        if stored is None:
            await _delete_quietly(self._bk, ledger.ledger_id)
            raise WriterFenced(f"another writer opened {self.namespace}/{self.stream} and created segment {seqno}")
        previous = self._state
        self._ledger = ledger
        self._state = SegmentWriteState(stored, settings, last_txid=last_txid, compression=self._compression)
        if previous is not None:
            # write() goes on while a segment rolls: the txids handed out meanwhile (by the old
            # state, up to now, not up to when the roll began) stay taken. (The simulator's
            # stream workload found two records with one txid when this was read before the
            # awaits above.)
            self._state.assigned_txid = max(previous.assigned_txid, last_txid)

    # -- state --------------------------------------------------------------------------------

    def _signal(self) -> None:
        """Wake every task waiting for a change (each re-checks what it waits for)."""
        self._changed.set()
        self._changed = self._rt.Event()

    async def _wait_for_change(self) -> None:
        await self._changed.wait()

    def _fail(self, error: BaseException) -> None:
        if self._failure is None:
            self._failure = error
        if self._rounds is not None:
            self._rounds.leave(self)
        failed, self._queue = list(self._queue), collections.deque()
        _settle(failed, error=self._failure)
        self._queued_bytes = 0
        self._signal()

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _check_usable(self) -> None:
        self._raise_failure()
        if self._closing or self._is_end_of_stream:
            raise StreamException(f"the writer of {self.namespace}/{self.stream} is closed")


def _settle(pendings: list[_Pending], *, positions: list[DLSN] | None = None,
            error: BaseException | None = None) -> None:
    """Give each pending not settled yet its position (or the error), then tell them, in
    order: whoever is told of the first finds the others settled already (a table range
    applies the commands of one entry together). A notify must not raise."""
    settled = []
    for index, pending in enumerate(pendings):
        if not pending.is_resolved:
            pending.is_resolved = True
            pending.position = positions[index] if positions is not None else None
            pending.error = error
            settled.append(pending)
    for pending in settled:
        pending.notify(pending)


def _as_writer_error(error: BaseException, writer: StreamWriter) -> BaseException:
    if isinstance(error, (LedgerFenced, LedgerClosed)):
        return WriterFenced(f"another writer took over {writer.namespace}/{writer.stream} (its segment "
                            f"ledger was fenced); open a new writer to go on")
    return error


async def _delete_quietly(bk, ledger_id: int) -> None:
    try:
        await bk.delete_ledger(ledger_id)
    except NoSuchLedger:
        pass


async def fence_segment_ledger(bk, segment: SegmentMetadata):
    """The segment's ledger opened with recovery: fenced (its writer's next add fails) and
    closed at its last entry that may have been acknowledged. This fencing is what keeps two
    writers of a stream, and two owners of a table range, apart."""
    return await bk.open_ledger(segment.ledger_id, password=STREAM_LEDGER_PASSWORD, recovery=True)


async def recover_segment(bk, catalog: StreamCatalog, namespace: str, stream: str,
                          segment: SegmentMetadata) -> SegmentMetadata:
    """Seal an in-progress segment whose writer is gone (or is being replaced): recover its
    ledger (fencing the old writer), read its totals back and mark it completed."""
    while segment.state is SegmentState.IN_PROGRESS:
        try:
            handle = await fence_segment_ledger(bk, segment)
            last = handle.metadata.last_entry_id
            first_entry = unpack_entry((await handle.read(0, 0))[0]) if last >= 0 else None
            last_entry = unpack_entry((await handle.read(last, last))[0]) if last >= 0 else None
        except NoSuchLedger:
            last, first_entry, last_entry = -1, None, None
        done = recovered_segment(segment, last_entry_id=last, first_entry=first_entry, last_entry=last_entry)
        stored = await catalog.replace_segment(namespace, stream, done)
        if stored is not None:
            return stored
        current = {s.seqno: s for s in await catalog.segments(namespace, stream)}
        segment = current.get(segment.seqno, done)
    return segment
