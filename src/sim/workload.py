"""The ledger workload: writers append, readers tail, recoverers fence, a verifier reads back.

Processes (each a Client in the world):
  w<i>  writer: creates a ledger, adds entries (up to adds_in_flight_max pipelined), closes it
        after entries_per_ledger_max entries or on any error, sometimes deletes it, repeats;
  t<i>  tailing reader: opens the newest ledger without recovery, long-polls the LAC and reads
        every entry up to it, until the ledger is closed;
  c<i>  recoverer: now and then opens a ledger that is still open with recovery, fencing its
        writer (sometimes two recoverers race on the same ledger);
  v     verifier: after the faults end, recovers every ledger and reads every entry back.
Everything seen goes into the History; the workload never judges, the checker does.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from math import log1p as _log1p
from typing import Callable

from bkcore.client.client import Client, LedgerSpec
from bkcore.client.writer import WriterState
from bkcore.effects import Completed
from bkcore.errors import NoSuchEntry, NoSuchLedger
from bksim.history import History
from bksim.scenario import MS
from bksim.world import SimWorld

RETRY_DELAY_NS = 200 * MS
READ_CHUNK_COUNT = 64
LONG_POLL_TIMEOUT_NS = 1_000 * MS
IDLE_POLLS_BEFORE_METADATA_REFRESH = 2
# Looked up once (an enum member read off its class is slow in CPython 3.11): every add checks it.
_WRITER_OPEN = WriterState.OPEN


@dataclass(slots=True)
class LedgerInfo:
    ledger_id: int
    password: bytes
    writer: str
    is_closed_seen: bool = False
    is_deleted: bool = False


class LedgerWorkload:
    def __init__(self, *, world: SimWorld, history: History) -> None:
        self.world = world
        self.rng = world.workload_rng
        self.history = history
        self.scenario = world.scenario
        self.ledgers: dict[int, LedgerInfo] = {}
        self.is_writing = True
        self._callbacks: dict[tuple[str, int], Callable[[Completed, int], None]] = {}
        self._next_op_id = 1
        self.clients: dict[str, Client] = {}
        self.spec = LedgerSpec(ensemble_size=self.scenario.ensemble_size,
                               write_quorum_size=self.scenario.write_quorum_size,
                               ack_quorum_size=self.scenario.ack_quorum_size)
        self.writers = [_Writer(self, f"w{i}") for i in range(self.scenario.writer_count)]
        self.tailers = [_TailingReader(self, f"t{i}") for i in range(self.scenario.tailing_reader_count)]
        self.recoverers = [_Recoverer(self, f"c{i}") for i in range(self.scenario.recoverer_count)]
        self.verifier = _Verifier(self, "v")

    # -- plumbing -------------------------------------------------------------------------

    def client(self, client_id: str) -> Client:
        if client_id not in self.clients:
            self.clients[client_id] = self.world.add_client(client_id, self._on_completed)
        return self.clients[client_id]

    def call(self, client_id: str, start: Callable[[int], object],
             on_done: Callable[[Completed, int], None]) -> object:
        """Start an operation on a client; `on_done` gets its Completed effect."""
        value = start(self.new_op(client_id, on_done))
        self.world.client_did_something(client_id)
        return value

    def new_op(self, client_id: str, on_done: Callable[[Completed, int], None]) -> int:
        """The op id for an operation the caller starts on the client itself (then it tells the
        world: client_did_something); `on_done` gets its Completed effect."""
        op_id = self._next_op_id
        self._next_op_id += 1
        self._callbacks[client_id, op_id] = on_done
        return op_id

    def _on_completed(self, client_id: str, completed: Completed, now_ns: int) -> None:
        callback = self._callbacks.pop((client_id, completed.op_id))
        callback(completed, now_ns)

    def later(self, delay_ns: int, action: Callable[[], None]) -> None:
        # Never cancelled: post_at (no handle to allocate), in the same order as call_later.
        loop = self.world.loop
        loop.post_at(loop.now_ns + delay_ns, action)

    @property
    def now_ns(self) -> int:
        return self.world.loop.now_ns      # (not world.now_ns: one property call, not two)

    def pending_operation_count(self) -> int:
        return len(self._callbacks)

    # -- phases ---------------------------------------------------------------------------

    def start(self) -> None:
        for process in (*self.writers, *self.tailers, *self.recoverers):
            process.start()

    def stop_writing(self) -> None:
        self.is_writing = False

    def start_verification(self) -> None:
        self.verifier.start()

    @property
    def is_verified(self) -> bool:
        return self.verifier.is_done


class _Writer:
    def __init__(self, workload: LedgerWorkload, name: str) -> None:
        self.w = workload
        self.name = name
        self.writer = None
        self.in_flight_count = 0
        self.added_count = 0
        self.is_finishing = False
        self.entries_max = 0
        self._add_tick = self._add      # bound once: every tick schedules the next
        # What a tick reads, looked up once: the mean interval's reciprocal as the draw divides
        # by it (the same float every time), the workload's uniform draw and the clock.
        self._add_rate = 1 / workload.scenario.add_interval_mean_ns
        self._adds_in_flight_max = workload.scenario.adds_in_flight_max
        self._random = workload.rng.random
        self._loop = workload.world.loop

    def start(self) -> None:
        if not self.w.is_writing:
            return
        client = self.w.client(self.name)
        password = b"pw-" + self.name.encode()
        self.w.call(self.name, lambda op: client.create_ledger(op, password=password, spec=self.w.spec,
                                                               now_ns=self.w.now_ns),
                    lambda c, now: self._on_created(c, password))

    def _on_created(self, completed: Completed, password: bytes) -> None:
        if completed.error is not None:
            self.w.later(RETRY_DELAY_NS, self.start)
            return
        self.writer = completed.result
        self.w.ledgers[self.writer.ledger_id] = LedgerInfo(self.writer.ledger_id, password, self.name)
        self.in_flight_count = 0
        self.added_count = 0
        self.is_finishing = False
        self.entries_max = self.w.rng.randint(1, self.w.scenario.entries_per_ledger_max)
        self._schedule_add()

    def _schedule_add(self) -> None:
        # An exponential draw with mean add_interval_mean_ns from one uniform draw, as
        # Random.expovariate makes it, without the call: this runs for every add (-log1p(-u)
        # for its -log(1 - u): see bksim.disk.draw_sync_latency_ns).
        w = self.w
        delay_ns = int(-_log1p(-w.rng.random()) / (1 / w.scenario.add_interval_mean_ns))
        loop = w.world.loop
        loop.post_at(loop.now_ns + delay_ns, self._add_tick, self.writer)     # later(), spelled out

    def _add(self, writer) -> None:
        if writer is not self.writer or self.is_finishing:
            return
        w = self.w
        if not w.is_writing or writer.state is not _WRITER_OPEN or self.added_count >= self.entries_max:
            self._finish()
            return
        if self.in_flight_count < self._adds_in_flight_max:
            self._add_now(writer)
        # _schedule_add, spelled out: most ticks of a writer find as many adds in flight as
        # allowed and do only this.
        loop = self._loop
        random = self._random       # (read, then called: a method lookup would not specialize)
        loop.post_at(loop.now_ns + int(-_log1p(-random()) / self._add_rate), self._add_tick, self.writer)

    def _add_now(self, writer) -> None:
        w = self.w
        self.added_count += 1
        self.in_flight_count += 1
        payload = f"{self.name}/{writer.ledger_id}/{self.added_count}/".encode() + b"x" * w.rng.randrange(64)
        record: list[int] = []
        now_ns = w.world.loop.now_ns
        # call(), spelled out without a lambda to start the add: this runs for every add.
        entry_id = writer.add(w.new_op(self.name, partial(self._on_added, writer, record)), payload, now_ns=now_ns)
        w.world.client_did_something(self.name)
        if entry_id is not None:
            record.append(w.history.add_invoked(process=self.name, ledger_id=writer.ledger_id,
                                                entry_id=entry_id, payload=payload, now_ns=now_ns))

    def _on_added(self, writer, record: list[int], completed: Completed, now_ns: int) -> None:
        if record:
            if completed.error is None:
                self.w.history.add_ok(record[0], now_ns=now_ns)
            else:
                self.w.history.add_unknown(record[0], now_ns=now_ns)
        if writer is self.writer:
            self.in_flight_count -= 1
            if completed.error is not None:
                self._finish()

    def _finish(self) -> None:
        if self.is_finishing:
            return
        self.is_finishing = True
        writer = self.writer
        self.w.call(self.name, lambda op: writer.close(op, now_ns=self.w.now_ns),
                    lambda c, now: self._on_closed(writer, c, now))

    def _on_closed(self, writer, completed: Completed, now_ns: int) -> None:
        info = self.w.ledgers[writer.ledger_id]
        if completed.error is None:
            metadata = completed.result
            self.w.history.closed_seen(process=self.name, ledger_id=writer.ledger_id,
                                       last_entry_id=metadata.last_entry_id, length=metadata.length, now_ns=now_ns)
            info.is_closed_seen = True
            if self.w.rng.random() < self.w.scenario.delete_probability:
                client = self.w.client(self.name)
                self.w.history.delete_invoked(ledger_id=writer.ledger_id)
                self.w.call(self.name, lambda op: client.delete_ledger(op, writer.ledger_id, now_ns=self.w.now_ns),
                            lambda c, now: self._on_deleted(info, c))
                return
        self.w.later(RETRY_DELAY_NS, self.start)

    def _on_deleted(self, info: LedgerInfo, completed: Completed) -> None:
        if completed.error is None:
            info.is_deleted = True
        self.w.later(RETRY_DELAY_NS, self.start)


class _TailingReader:
    def __init__(self, workload: LedgerWorkload, name: str) -> None:
        self.w = workload
        self.name = name
        self.reader = None
        self.last_read_entry_id = -1
        self.idle_poll_count = 0
        self.tailed: set[int] = set()

    def start(self) -> None:
        candidates = [lid for lid, info in sorted(self.w.ledgers.items())
                      if lid not in self.tailed and not info.is_deleted]
        if not candidates or not self.w.is_writing:
            if self.w.is_writing:
                self.w.later(RETRY_DELAY_NS, self.start)
            return
        ledger_id = candidates[-1]
        self.tailed.add(ledger_id)
        info = self.w.ledgers[ledger_id]
        client = self.w.client(self.name)
        self.w.call(self.name, lambda op: client.open_ledger(op, ledger_id, password=info.password,
                                                             is_recovery=False, now_ns=self.w.now_ns),
                    self._on_opened)

    def _on_opened(self, completed: Completed, now_ns: int) -> None:
        if completed.error is not None:
            self.w.later(RETRY_DELAY_NS, self.start)
            return
        self.reader = completed.result
        self.last_read_entry_id = -1
        self.idle_poll_count = 0
        self._record_lac(now_ns)
        self._poll()

    def _record_lac(self, now_ns: int) -> None:
        self.w.history.lac_seen(process=self.name, ledger_id=self.reader.ledger_id,
                                lac=self.reader.last_add_confirmed, now_ns=now_ns)

    def _poll(self) -> None:
        reader = self.reader
        if reader.last_add_confirmed > self.last_read_entry_id:
            self._read_more()
        elif reader.is_closed:
            self.w.history.closed_seen(process=self.name, ledger_id=reader.ledger_id,
                                       last_entry_id=reader.metadata.last_entry_id,
                                       length=reader.metadata.length, now_ns=self.w.now_ns)
            self.w.later(0, self.start)
        elif not self.w.is_writing:
            return
        elif self.idle_poll_count >= IDLE_POLLS_BEFORE_METADATA_REFRESH:
            self.idle_poll_count = 0
            self.w.call(self.name, lambda op: reader.refresh_metadata(op, now_ns=self.w.now_ns),
                        lambda c, now: self._after_refresh(c))
        else:
            self.w.call(self.name, lambda op: reader.long_poll_lac(op, now_ns=self.w.now_ns,
                                                                   timeout_ns=LONG_POLL_TIMEOUT_NS),
                        self._on_polled)

    def _after_refresh(self, completed: Completed) -> None:
        if isinstance(completed.error, NoSuchLedger):
            self.w.later(0, self.start)   # deleted under us
        else:
            self.w.later(0 if completed.error is None else RETRY_DELAY_NS, self._poll)

    def _on_polled(self, completed: Completed, now_ns: int) -> None:
        if completed.error is not None:
            self.w.later(RETRY_DELAY_NS, self._poll)
            return
        self._record_lac(now_ns)
        if self.reader.last_add_confirmed <= self.last_read_entry_id:
            self.idle_poll_count += 1
        self._poll()

    def _read_more(self) -> None:
        reader = self.reader
        first = self.last_read_entry_id + 1
        last = min(reader.last_add_confirmed, first + READ_CHUNK_COUNT - 1)
        self.w.call(self.name, lambda op: reader.read(op, first, last, now_ns=self.w.now_ns),
                    lambda c, now: self._on_read(reader, first, c, now))

    def _on_read(self, reader, first: int, completed: Completed, now_ns: int) -> None:
        if reader is not self.reader:
            return
        if completed.error is not None:
            self.w.later(RETRY_DELAY_NS, self._poll)
            return
        for offset, payload in enumerate(completed.result):
            self.w.history.read_ok(process=self.name, ledger_id=reader.ledger_id, entry_id=first + offset,
                                   payload=payload, now_ns=now_ns)
        self.last_read_entry_id = first + len(completed.result) - 1
        self.idle_poll_count = 0
        self._poll()


def record_recovered(workload: LedgerWorkload, process: str, reader, now_ns: int) -> None:
    metadata = reader.metadata
    workload.history.closed_seen(process=process, ledger_id=reader.ledger_id,
                                 last_entry_id=metadata.last_entry_id, length=metadata.length, now_ns=now_ns)
    workload.ledgers[reader.ledger_id].is_closed_seen = True


class _Recoverer:
    def __init__(self, workload: LedgerWorkload, name: str) -> None:
        self.w = workload
        self.name = name

    def start(self) -> None:
        self._schedule()

    def _schedule(self) -> None:
        delay_ns = int(self.w.rng.expovariate(1 / self.w.scenario.recovery_interval_mean_ns))
        self.w.later(delay_ns, self._pick)

    def _pick(self) -> None:
        if not self.w.is_writing:
            return
        open_ledgers = [lid for lid, info in sorted(self.w.ledgers.items())
                        if not info.is_closed_seen and not info.is_deleted]
        if open_ledgers:
            ledger_id = self.w.rng.choice(open_ledgers)
            self.recover(ledger_id)
            if self.w.rng.random() < self.w.scenario.concurrent_recovery_probability:
                for other in self.w.recoverers:
                    if other is not self:
                        other.recover(ledger_id)
        self._schedule()

    def recover(self, ledger_id: int) -> None:
        info = self.w.ledgers[ledger_id]
        client = self.w.client(self.name)
        self.w.call(self.name, lambda op: client.open_ledger(op, ledger_id, password=info.password,
                                                             is_recovery=True, now_ns=self.w.now_ns),
                    self._on_recovered)

    def _on_recovered(self, completed: Completed, now_ns: int) -> None:
        if completed.error is not None:
            return
        reader = completed.result
        record_recovered(self.w, self.name, reader, now_ns)
        last = reader.metadata.last_entry_id
        if last >= 0:
            first = max(0, last - 8)
            self.w.call(self.name, lambda op: reader.read(op, first, last, now_ns=self.w.now_ns),
                        lambda c, now: _record_reads(self.w, self.name, reader.ledger_id, first, c, now))


def _record_reads(workload: LedgerWorkload, process: str, ledger_id: int, first: int,
                  completed: Completed, now_ns: int) -> None:
    if completed.error is None:
        for offset, payload in enumerate(completed.result):
            workload.history.read_ok(process=process, ledger_id=ledger_id, entry_id=first + offset,
                                     payload=payload, now_ns=now_ns)
    elif isinstance(completed.error, NoSuchEntry):
        entry_id = getattr(completed.error, "entry_id", first)
        workload.history.read_missing(process=process, ledger_id=ledger_id, entry_id=entry_id, now_ns=now_ns)


class _Verifier:
    """After healing: recover every ledger and read all of it back."""

    def __init__(self, workload: LedgerWorkload, name: str) -> None:
        self.w = workload
        self.name = name
        self.queue: list[int] = []
        self.is_done = False
        self.failures: list[str] = []

    def start(self) -> None:
        self.queue = [lid for lid, info in sorted(self.w.ledgers.items()) if not info.is_deleted]
        self._next()

    def _next(self) -> None:
        if not self.queue:
            self.is_done = True
            return
        ledger_id = self.queue[0]
        info = self.w.ledgers[ledger_id]
        client = self.w.client(self.name)
        self.w.call(self.name, lambda op: client.open_ledger(op, ledger_id, password=info.password,
                                                             is_recovery=True, now_ns=self.w.now_ns),
                    self._on_opened)

    def _on_opened(self, completed: Completed, now_ns: int) -> None:
        if completed.error is not None:
            if isinstance(completed.error, NoSuchLedger):
                self.queue.pop(0)
                self._next()
            else:
                self.failures.append(f"ledger {self.queue[0]}: {completed.error!r}")
                self.w.later(RETRY_DELAY_NS, self._next)
            return
        reader = completed.result
        record_recovered(self.w, self.name, reader, now_ns)
        self._read(reader, 0)

    def _read(self, reader, first: int) -> None:
        last_entry_id = reader.metadata.last_entry_id
        if first > last_entry_id:
            self.queue.pop(0)
            self._next()
            return
        last = min(last_entry_id, first + READ_CHUNK_COUNT - 1)
        self.w.call(self.name, lambda op: reader.read(op, first, last, now_ns=self.w.now_ns),
                    lambda c, now: self._on_read(reader, first, c, now))

    def _on_read(self, reader, first: int, completed: Completed, now_ns: int) -> None:
        _record_reads(self.w, self.name, reader.ledger_id, first, completed, now_ns)
        if completed.error is None:
            self._read(reader, first + len(completed.result))
        else:
            self.failures.append(f"ledger {reader.ledger_id} entry {first}: {completed.error!r}")
            self.w.later(RETRY_DELAY_NS, lambda: self._read(reader, first))
