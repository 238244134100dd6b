"""One range of a table, served by the process that owns it: journal, state, checkpoints, watch.

    journal     a log stream of stamped commands (bkcore.table.commands), the source of truth
    state       bkcore.table.kv.RangeState over a KvIndex (lmdb on a server, see lmdb_kv;
                memory when none is given), rebuilt on open
    checkpoints a second log stream: the whole index now and then, one segment per checkpoint
                (the record format: bkcore.table.checkpoints)

Opening a range takes ownership: opening the journal's writer fences the previous owner (its
next write fails with WriterFenced), then the newest complete checkpoint is loaded (a torn or
unreadable one falls back to the one before, then to replaying the whole journal) and the
journal is replayed from the checkpoint's position up to this owner's first segment. Closing
gives ownership up gently (a handover to another server, a shutdown): new commands are refused,
accepted ones are journaled, applied and answered, then the journal is sealed.

A command is journaled first and applied once durable, strictly in journal order, so every
acknowledged command survives a crash of the owner and a new owner applies the same ones in the
same order. Commands commit in groups: the journal has one entry in flight at a time
(JOURNAL_ENTRIES_IN_FLIGHT_MAX), and the commands that arrive meanwhile go together, one record
each, into the next entry (one ledger add, one fsync per bookie for the group). The ranges of
one server send their entries in rounds (`journal_rounds`, bkcore.stream.send_rounds), so that
a bookie syncs theirs together. Each is answered once its entry is durable; a crash loses none of those, and of the rest only whole entries. Reads are served from the applied state: in the loop, or in another thread from a
snapshot of the index (read_in_thread). After each checkpoint the oldest kept
checkpoint bounds what must stay: both streams are truncated behind it.

Watchers get every change of their key range in revision order: first from a bounded history
of recent events (older start revisions get WatchCompacted, as etcd's compaction does), then
live. A watcher too slow to keep up is dropped with WatchTooSlow; it can resume from the next
revision it needs.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
from typing import AsyncIterator, Callable

import crc32c

from bkcore.stream.errors import NamespaceExists, PositionTruncated, StreamExists
from bkcore.stream.records import DLSN
from bkcore.stream.segments import StreamSettings
from bkcore.stream.send_rounds import SendRounds
from bkcore.table.commands import (
    COMMAND_SIZE_MAX, Command, ExpireKeys, RangeRead, RangeResult, Stamped, TableError, decode_stamped, describe,
    encode_stamped,
)
from bkcore.table.kv import EXPIRY, KvIndex, MemoryKvIndex, RangeState, WatchEvent
from bkcore.table.checkpoints import (
    CHECKPOINT_CHUNK_BYTES, CheckpointInfo, CheckpointParser, checkpoint_stream_name, chunk_groups, end_record,
    header_record,
)

logger = logging.getLogger(__name__)

TABLES_NAMESPACE = "__tables"
CHECKPOINTS_KEPT = 2
WATCH_HISTORY_EVENTS = 10_000
WATCH_BUFFER_EVENTS = 10_000
CHECKPOINT_EVERY_COMMANDS = 10_000
EXPIRY_CHECK_INTERVAL_S = 0.2
# The journal's entries hold one largest command, the checkpoints' a chunk plus one largest
# key and value (a chunk closes after the pair that takes it past CHECKPOINT_CHUNK_BYTES); the
# rest is room for the stream's record framing.
JOURNAL_ENTRY_SIZE_MAX = COMMAND_SIZE_MAX + 64 * 1024
# Group commit: while one journal entry is being added, the commands that arrive wait in the
# writer's queue and all go in the next entry. The stream writer's default (64 entries in flight)
# would send each command as an entry of its own under load: a ledger add, and an fsync on every
# bookie, per command. Latency is at most two adds; a second entry in flight would halve groups.
JOURNAL_ENTRIES_IN_FLIGHT_MAX = 1
CHECKPOINT_ENTRY_SIZE_MAX = CHECKPOINT_CHUNK_BYTES + 2 * COMMAND_SIZE_MAX
# No reader tails a range's streams closely: the next owner reads the journal after fencing it
# (to its end, whatever the LAC), and a Spark snapshot (bkspark.table_snapshot) reads to the
# LAC. So their writers push the LAC only once idle this long. Pushed as soon as the writer is
# idle, the push would follow nearly every group of commands (the next group waits for this
# one's add) and cost every bookie a WriteLac per group: as much again as the group's add.
LAC_PUSH_DELAY_NS = 10_000_000
# How long closing a range waits for its accepted commands (and a checkpoint under way) before
# it stops without sealing: a journal add that is stuck (no bookies) must not hold a shutdown
# or a handover for good.
CLOSE_DRAIN_MAX_S = 10.0


class RangeClosed(Exception):
    """The range's owner stopped serving it here."""


class WatchCompacted(Exception):
    """The watch's start revision is older than the history this range still keeps."""


class WatchTooSlow(Exception):
    """The watcher fell too far behind and was dropped; watch again from the next revision."""


def journal_stream_name(table: str, range_id: int) -> str:
    return f"{table.replace('/', '~')}~{range_id}"


class _Slot:
    """A command between the journal and the state machine: its journal record (`journaled`,
    the writer's pending write: its position is set once durable), then its result or its
    failure; `done` is set, and notify(slot) called (if given), once it has one of them."""

    __slots__ = ("stamped", "journaled", "result", "failure", "done", "notify")

    def __init__(self, stamped: Stamped, done, notify: Callable[["_Slot"], None] | None) -> None:
        self.stamped = stamped
        self.journaled = None
        self.result: object = None
        self.failure: BaseException | None = None
        self.done = done
        self.notify = notify

    @property
    def position(self) -> DLSN | None:
        return None if self.journaled is None else self.journaled.position

    def settle(self) -> None:
        self.done.set()
        if self.notify is not None:
            self.notify(self)


class _Watcher:
    def __init__(self, runtime, start: bytes, end: bytes | None,
                 deliver: Callable[[WatchEvent], bool] | None) -> None:
        self.start, self.end = start, end
        self.send, self.receive = runtime.open_memory_channel(WATCH_BUFFER_EVENTS)
        self.deliver = deliver
        self.dropped = False

    def wants(self, event: WatchEvent) -> bool:
        key = event.kv.key
        return key == self.start if self.end is None else self.start <= key < self.end


class TableRange:
    def __init__(self, streams, table: str, range_id: int = 0, *,
                 settings: StreamSettings = StreamSettings(),
                 checkpoint_every: int = CHECKPOINT_EVERY_COMMANDS, index: KvIndex | None = None,
                 journal_rounds: SendRounds | None = None) -> None:
        self._streams = streams
        self._rt = streams.runtime
        self.table, self.range_id = table, range_id
        self._settings = settings
        self._checkpoint_every = checkpoint_every
        self._journal_name = journal_stream_name(table, range_id)
        self._checkpoint_name = checkpoint_stream_name(self._journal_name)
        self._index = index if index is not None else MemoryKvIndex()
        self._journal_rounds = journal_rounds
        self.state = RangeState(self._index)
        self._slots: collections.deque[_Slot] = collections.deque()
        self._history: collections.deque[WatchEvent] = collections.deque(maxlen=WATCH_HISTORY_EVENTS)
        # In the order they started (a dict, not a set: a set of objects iterates in the order
        # of their addresses, which would make a simulated run depend on the allocator).
        self._watchers: dict[_Watcher, None] = {}
        self._checkpoints: list[CheckpointInfo] = []
        self._since_checkpoint = 0
        self._checkpoint_lock = self._rt.Lock()
        self._failure: BaseException | None = None
        # Set once aclose() began: what new commands are told while accepted ones drain.
        self._refusal: Exception | None = None
        self.restored_from: str = ""          # "checkpoint", "journal" (what open() used)
        # Reads from other threads (read_in_thread) hold this lock while they read the index.
        # Once the range stops serving, _is_index_shared is False: no such read is under way or
        # will start, so the index may be emptied for the next owner, or dropped.
        self._thread_reads = self._rt.thread_lock()
        self._is_index_shared = True
        self._nursery = None                  # (open's: where checkpoints run)
        self._is_checkpoint_due = False

    @property
    def is_serving(self) -> bool:
        return self._failure is None

    # -- ownership ----------------------------------------------------------------------------

    async def open(self, nursery) -> None:
        """Take ownership and rebuild the state; the journal writers run in `nursery`."""
        streams = self._streams
        self._nursery = nursery
        with contextlib.suppress(NamespaceExists):
            await streams.create_namespace(TABLES_NAMESPACE, self._settings)
        for name in (self._journal_name, self._checkpoint_name):
            with contextlib.suppress(StreamExists):
                await streams.create_stream(TABLES_NAMESPACE, name, self._settings)
        self._journal = await streams.start_writer(nursery, TABLES_NAMESPACE, self._journal_name,
                                                   entry_size_max=JOURNAL_ENTRY_SIZE_MAX,
                                                   entries_in_flight_max=JOURNAL_ENTRIES_IN_FLIGHT_MAX,
                                                   lac_push_delay_ns=LAC_PUSH_DELAY_NS, rounds=self._journal_rounds)
        self._checkpoint_writer = await streams.start_writer(nursery, TABLES_NAMESPACE, self._checkpoint_name,
                                                             entry_size_max=CHECKPOINT_ENTRY_SIZE_MAX,
                                                             lac_push_delay_ns=LAC_PUSH_DELAY_NS)
        await self._restore()

    def stop(self, error: BaseException) -> None:
        """Stop serving at once, sealing nothing: pending and later commands, reads and
        watches get `error` (the next owner recovers the journal)."""
        self._fail(error)
        self._journal.abort(error)
        self._checkpoint_writer.abort(error)

    async def aclose(self, *, refusal: Exception | None = None) -> None:
        """Stop serving, gently: commands that arrive from now on are refused with `refusal`
        (RangeClosed if None: a handover passes NotOwner(next owner)); those already accepted
        are journaled and applied and get their answers, as does a checkpoint under way; then
        reads and watches end and the journal segments are sealed, so the next owner starts
        from a clean end. If that drain takes longer than CLOSE_DRAIN_MAX_S (the journal is
        stuck), the range stops at once instead: those commands get RangeClosed, their outcome
        unknown, and the next owner recovers the journal. A range that already stopped or
        failed just lets its writers go."""
        if self._failure is not None:
            self.stop(self._failure)
            return
        closed = RangeClosed(f"{self.table} range {self.range_id} was closed by its owner")
        self._refusal = refusal or closed
        with self._rt.move_on_after(CLOSE_DRAIN_MAX_S):
            while self._slots and self._failure is None:
                await self._slots[-1].done.wait()
            async with self._checkpoint_lock:
                self._fail(closed)
        if self._failure is not closed:         # the drain ran out of time, or the range failed
            self.stop(self._failure or closed)
            return
        await self._journal.aclose()
        await self._checkpoint_writer.aclose()

    async def _restore(self) -> None:
        index = self._index
        checkpoints = await self._read_checkpoints()
        for info, items in reversed(checkpoints):
            index.replace_all(sorted(items.items()))
            self._history.clear()
            state = RangeState(index)
            try:
                await self._replay(state, info.replay_from)
            except PositionTruncated:
                continue
            self._checkpoints = [c for c, _ in checkpoints]
            self.restored_from = "checkpoint"
            break
        else:
            index.replace_all(())
            self._history.clear()
            state = RangeState(index)
            await self._replay(state, None)
            self.restored_from = "journal"
        self.state = state

    async def _replay(self, state: RangeState, start: DLSN | None) -> None:
        end = DLSN(self._journal.segment.seqno, 0, 0)
        async with self._streams.open_reader(TABLES_NAMESPACE, self._journal_name, start, end=end) as reader:
            async for record in reader:
                if state.applied_position is not None and record.dlsn <= DLSN(*state.applied_position):
                    continue
                _, events = state.apply(decode_stamped(record.payload), position=list(record.dlsn))
                self._history.extend(events)    # so watches can resume from before this owner

    # -- commands -----------------------------------------------------------------------------

    async def execute(self, command: Command) -> object:
        """Journal the command, apply it once durable (in journal order); returns its result
        or raises its TableError. Journal failures (WriterFenced: another owner took over)
        end this range's service."""
        slot = self._accept(command, None)
        await slot.done.wait()
        if slot.failure is not None:
            raise slot.failure
        if isinstance(slot.result, TableError):
            raise slot.result
        return slot.result

    def submit(self, command: Command, on_done: Callable[[object, BaseException | None], None]) -> None:
        """execute() for a caller told by a callback rather than woken as a task (a gRPC call
        crossing from another loop): on_done(result, None) once the command is durable and
        applied, or on_done(None, error) (its TableError, or the failure that ended the
        range), called from the loop. Raises at once, accepting nothing, what execute()
        raises before journaling (the range is closing or stopped, the command is too big).
        on_done must not raise."""
        def notify(slot: _Slot) -> None:
            error = slot.failure if slot.failure is not None else (
                slot.result if isinstance(slot.result, TableError) else None)
            on_done(None if error is not None else slot.result, error)
        self._accept(command, notify)

    def _accept(self, command: Command, notify: Callable[[_Slot], None] | None) -> _Slot:
        """Stamp the command and queue it in the journal; its slot is settled once it is
        applied, or fails."""
        self._check_accepting()
        slot = _Slot(Stamped(command, self._now_ms()), self._rt.Event(), notify)
        record = encode_stamped(slot.stamped)
        if len(record) > COMMAND_SIZE_MAX:
            raise TableError(f"{describe(command)} takes {len(record)} bytes; a table command is at most "
                             f"{COMMAND_SIZE_MAX} bytes (1 MiB - 8 KiB, one journal record) with its key and value")
        # In _slots first: an idle journal sends the entry from write_nowait, and a ledger that
        # fails it at once calls back (_journaled) before write_nowait returns.
        self._slots.append(slot)
        try:
            slot.journaled = self._journal.write_nowait(record, lambda position, error: self._journaled(error))
        except BaseException as exc:    # (the slot was not queued: only its caller hears of it)
            with contextlib.suppress(ValueError):
                self._slots.remove(slot)
            self._fail(exc)
            raise
        return slot

    def _journaled(self, error: BaseException | None) -> None:
        """The journal's word on a command (from the journal writer's acknowledgement): the
        commands now durable at the front are applied (the others of its entry with it)."""
        if error is not None:
            self._fail(error)
            return
        try:
            self._apply_ready()
        except Exception as exc:     # noqa: BLE001 - the index is broken: the next owner replays
            logger.error("%s range %d: applying a command failed, so the range stops: %r",
                         self.table, self.range_id, exc)
            self.stop(exc)

    async def read(self, op: RangeRead) -> RangeResult:
        """The applied state, at the time the read was asked, once every command accepted
        before it is applied. Those commands were stamped before the read's time and judge
        TTLs at their stamps; a read that judged TTLs at its own later time on a state still
        without them could see a key expired that one of them then finds alive and
        overwrites (the table workload found this: bk sim run --workload table --seed 180
        --liveness, before the fix)."""
        self._check_serving()
        now_ms = self._now_ms()
        if self._slots:
            await self._slots[-1].done.wait()
            if self._failure is not None and self._refusal is not None:
                raise self._refusal     # closed meanwhile (handed over, say): the next owner answers
            self._check_serving()
        return self.state.read(op, now_ms=now_ms)

    def read_in_thread(self, op: RangeRead) -> RangeResult | None:
        """read() for a thread other than the loop's (a gRPC handler): answered from a snapshot
        of the index, which holds whole applied commands only. None when the index has no
        snapshots or the range has stopped serving; the caller then reads through the loop."""
        with self._thread_reads:
            if not self._is_index_shared or self._slots:     # (commands in flight: see read())
                return None
            snapshot = self._index.snapshot()
            if snapshot is None:
                return None
            with snapshot:
                return RangeState(snapshot).read(op, now_ms=self._now_ms())

    def _apply_ready(self) -> None:
        """Apply the commands at the front that are durable, in journal order, as one write of
        the index (its snapshots show the group whole or not at all), and answer them.

        They are answered, and their watchers told, before the index write lands: they are in
        the journal already, and if the write fails the range stops and the next owner replays
        them from there. (The client hears a few hundred microseconds sooner: lmdb's commit
        writes its pages.) Nothing on this loop reads the index in between. They leave _slots
        only once written: a read in another thread (read_in_thread) that finds _slots empty
        finds them in the index."""
        slots = self._slots
        ready = 0
        while ready < len(slots) and slots[ready].position is not None:
            ready += 1
        if not ready:
            return
        group = list(itertools.islice(slots, ready))
        with self._index.batch():
            applied = [self.state.apply(slot.stamped, position=list(slot.position)) for slot in group]
            for slot, (result, events) in zip(group, applied):
                slot.result = result
                self._publish(events)
                slot.settle()
        for _ in group:
            slots.popleft()
        self._since_checkpoint += ready
        self._checkpoint_when_due()

    def _checkpoint_when_due(self) -> None:
        """Every checkpoint_every commands, a checkpoint in the background (the commands go on
        meanwhile; see checkpoint)."""
        if (self._since_checkpoint >= self._checkpoint_every and not self._is_checkpoint_due
                and not self._checkpoint_lock.locked() and self._refusal is None and self._nursery is not None):
            self._is_checkpoint_due = True
            self._nursery.start_soon(self._checkpoint_in_background)

    async def _checkpoint_in_background(self) -> None:
        try:
            await self.checkpoint()
        except Exception as exc:      # noqa: BLE001 - the next one tries again; a stopped range stops
            if self.is_serving:
                logger.warning("%s range %d: checkpoint failed (the next is tried after %d more commands): %r",
                               self.table, self.range_id, self._checkpoint_every, exc)
        finally:
            self._is_checkpoint_due = False

    def _fail(self, error: BaseException) -> None:
        if self._failure is None:
            self._failure = error
        with self._thread_reads:        # waits for a read in progress (one short lmdb read)
            self._is_index_shared = False
        while self._slots:
            slot = self._slots.popleft()
            if not slot.done.is_set():      # (answered already, if the index write after failed)
                slot.failure = error
                slot.settle()
        for watcher in list(self._watchers):
            self._drop(watcher)

    def _now_ms(self) -> int:
        """This owner's wall clock: commands are stamped with it, TTLs judged by it."""
        return int(self._rt.wall_time_s() * 1000)

    def _check_serving(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _check_accepting(self) -> None:
        """New commands: refused once the range is closing (see aclose)."""
        self._check_serving()
        if self._refusal is not None:
            raise self._refusal

    async def expire_keys_when_due(self) -> None:
        """Journal ExpireKeys whenever a TTL has passed (run as a task by the owner)."""
        while self.is_serving:
            await self._rt.sleep(EXPIRY_CHECK_INTERVAL_S)
            due_end = EXPIRY + (self._now_ms() + 1).to_bytes(8, "big")
            if self.is_serving and next(self.state.index.scan(EXPIRY, due_end), None) is not None:
                try:
                    await self.execute(ExpireKeys())
                except Exception:      # noqa: BLE001 - the range stopped serving; its next owner expires
                    return

    # -- watches ------------------------------------------------------------------------------

    async def watch(self, key: bytes, range_end: bytes | None = None, *, start_revision: int = 0,
                    started: Callable[[int], None] | None = None,
                    deliver: Callable[[WatchEvent], bool] | None = None) -> AsyncIterator[WatchEvent]:
        """Every change of `key` (or [key, range_end)) from `start_revision` (0: from now on),
        in order, until the caller stops iterating. Once the watch is in place, `started(r)` is
        called: every change with a revision above r will come (so a watcher that reconnects
        knows where to resume even before it has seen an event).

        With `deliver`, the changes are not yielded but handed to deliver(change) from the
        loop as they are applied, before their commands are answered (the gRPC watch sends
        them at once, with no task switch); the iteration then only waits, and raises when the
        watch ends. deliver must not block; it returns False when its consumer cannot keep up,
        which drops the watcher (WatchTooSlow)."""
        self._check_serving()
        watcher = _Watcher(self._rt, key, range_end, deliver)
        history = []
        if start_revision:
            oldest = self._history[0].revision if self._history else self.state.revision + 1
            if start_revision < oldest and start_revision <= self.state.revision:
                raise WatchCompacted(f"revision {start_revision} of {self.table} range {self.range_id} is "
                                     f"compacted (history starts at {oldest}); read the current value and "
                                     f"watch from revision {self.state.revision + 1}")
            history = [event for event in self._history if event.revision >= start_revision and watcher.wants(event)]
        self._watchers[watcher] = None
        if started is not None:
            started(start_revision - 1 if start_revision else self.state.revision)
        self._tell(watcher, history)
        try:
            async with watcher.receive:
                async for event in watcher.receive:
                    yield event
            if watcher.dropped:
                raise self._failure or WatchTooSlow(
                    f"the watcher of {key!r} fell too far behind ({WATCH_BUFFER_EVENTS} changes waiting, or its "
                    f"connection backed up) and was dropped; watch again from the revision after the last change "
                    f"it got")
        finally:
            self._watchers.pop(watcher, None)

    def _publish(self, events: list[WatchEvent]) -> None:
        self._history.extend(events)
        for watcher in list(self._watchers):
            self._tell(watcher, [event for event in events if watcher.wants(event)])

    def _tell(self, watcher: _Watcher, events: list[WatchEvent]) -> None:
        """Hand the watcher its changes (queued for its iteration, or to its deliver); one it
        cannot take drops it."""
        for event in events:
            if watcher.deliver is not None:
                try:
                    taken = watcher.deliver(event)
                except Exception as exc:      # noqa: BLE001 - a broken consumer ends its watch, not the range
                    logger.warning("%s range %d: a watcher's delivery failed, so it is dropped: %r",
                                   self.table, self.range_id, exc)
                    taken = False
            else:
                try:
                    watcher.send.send_nowait(event)
                    taken = True
                except self._rt.WouldBlock:
                    taken = False
            if not taken:
                self._drop(watcher)
                return

    def _drop(self, watcher: _Watcher) -> None:
        watcher.dropped = True
        self._watchers.pop(watcher, None)
        watcher.send.close()

    # -- checkpoints --------------------------------------------------------------------------

    async def checkpoint(self) -> CheckpointInfo:
        """Write the whole state to the checkpoint stream, then truncate both streams behind
        the oldest checkpoint kept. Commands go on being applied meanwhile: the checkpoint is
        the index's snapshot taken at the start."""
        async with self._checkpoint_lock:
            self._check_serving()
            position = self.state.applied_position
            revision = self.state.revision
            snapshot = self.state.index.items()
            self._since_checkpoint = 0
            writer = self._checkpoint_writer
            header = await writer.write(header_record(position, revision))
            chunk_count, checksum = 0, 0
            for group in chunk_groups(snapshot):
                for chunk in group:
                    checksum = crc32c.crc32c(chunk, checksum)
                chunk_count += len(group)
                await writer.write_many(group)
            await writer.write(end_record(checksum, chunk_count))
            await writer.roll()
            info = CheckpointInfo(header, DLSN(*position) if position else None, revision)
            self._checkpoints.append(info)
            del self._checkpoints[:-CHECKPOINTS_KEPT]
            oldest = self._checkpoints[0]
            await self._journal.roll()
            await self._streams.truncate(TABLES_NAMESPACE, self._checkpoint_name, oldest.header)
            if oldest.journal_position is not None:
                await self._streams.truncate(TABLES_NAMESPACE, self._journal_name, oldest.journal_position)
            return info

    async def _read_checkpoints(self) -> list[tuple[CheckpointInfo, dict[bytes, bytes]]]:
        """Every complete, intact checkpoint in the checkpoint stream, oldest first."""
        found = []
        parser = CheckpointParser()
        end = DLSN(self._checkpoint_writer.segment.seqno, 0, 0)
        async with self._streams.open_reader(TABLES_NAMESPACE, self._checkpoint_name, end=end) as reader:
            async for record in reader:
                checkpoint = parser.feed(record.dlsn, record.payload)
                if checkpoint is not None:
                    found.append(checkpoint)
        return found
