"""The metastore as the simulated world and its processes see it.

Two metastores offer one interface (SimMetastore's docstring lists it): SimMetastore, the memory
tree, and bksim.raftlite_metastore.RaftMetastore, three raft-lite members. Scenario.metastore_kind
picks one per seed.

SimMetastore is the world's one tree (a MemoryMetastore recording its changes) that also fires
the watches processes set on it, and expires the sessions of processes that stopped pinging.

SimMetadataStore is one process's session with either, offering bkmetastore.api's interface to
the async layers (execute, execute_watch, session_lost, session_lease_s, aclose), with the
world's faults: every command takes a drawn latency each way, fails with CONNECTION_LOSS while
the metastore is unreachable (after at most the connection timeout), and may lose its answer
after being applied. A watch is set when the metastore serves its read, so no change between
the read and the answer is missed; a read that failed returns a watch already fired.

Sessions live as long as they are heard from: the process opens its session first, then pings
every third of the session timeout, and the metastore expires a session silent for a whole
timeout (the memory tree not while it is itself down: its clocks restart when it is back, as a
new raft-lite leader or a ZooKeeper quorum restarts them). A session learns that it expired from
the next answer, as a real client does, and its lease (session_lease_s) is raft-lite's client's:
0.8 of the timeout after sending the newest ping answered alive.
"""

from __future__ import annotations

from typing import Callable

from bkcore.metaops import Children, Get, MetaCode, MetaOp, MetaResult
from bkmetastore.memory import MemoryMetastore
from bkmetastore.watches import OneShotWatch, WatchTable
from bksim.tasks import ProcessStopped

PING_FRACTION = 3              # pings per session timeout
SESSION_CHECK_INTERVAL_NS = 100_000_000
LEASE_FRACTION = 0.8           # of the session timeout, from the newest answered ping's send


class _ConnectionLost:
    """The answer of a request whose outcome the caller cannot know."""

    def __repr__(self) -> str:
        return "LOST"


LOST = _ConnectionLost()
SESSION_GONE = False        # a ping's answer, or an op's, when the session no longer exists


class SimMetastore(MemoryMetastore):
    """The memory metastore: one tree; ops apply atomically at the instant they arrive, and the
    watches of every process's session fire on the changes they make, whoever made them (a
    bookie registering, a client's CAS). A session opened to be kept alive (a process's) expires
    when silent for a whole timeout, checked every SESSION_CHECK_INTERVAL_NS.

    The interface every simulated metastore offers the world and its processes:
        submit(caller, command, on_answer, on_received=None)
            ["open", is_kept_alive] -> session id;  ["ping", session] -> alive?
            ["op", session or None, op] -> MetaResult, or SESSION_GONE for a session that
            is gone (on_received: called at the instant a read is served, to set its watch);
            ["close", session], ["expire", session] -> None.
            LOST when the outcome is unknown. Here every answer comes at once.
        read_applied(op)          a read of the newest applied state (the world's own checks)
        attach_watches(caller, table) / detach_watches(caller, table)
        needs_keepalive           whether bookie sessions must be pinged to live
        draw_faults(nemesis), heal(), expired_session_count, describe()
    """

    needs_keepalive = False

    def __init__(self, *, world) -> None:
        super().__init__(is_recording_changes=True)
        self._world = world
        self._watch_tables: list[WatchTable] = []
        # Sessions kept alive by pings, and when each was last heard from.
        self.last_heard_ns: dict[int, int] = {}
        self.expired_session_count = 0
        self._is_expiry_started = False

    def submit(self, caller: str, command: list, on_answer: Callable[[object], None],
               on_received: Callable[[], None] | None = None) -> None:
        on_answer(self._answer(command, on_received))

    def _answer(self, command: list, on_received) -> object:
        kind = command[0]
        if kind == "op":
            session_id, op = command[1], command[2]
            if session_id is not None:
                if not self.is_session_alive(session_id):
                    return SESSION_GONE
                if session_id in self.last_heard_ns:
                    self.last_heard_ns[session_id] = self._world.now_ns
            result = self.apply(op, session_id=session_id)
            if on_received is not None:
                on_received()
            return result
        if kind == "ping":
            if not self.is_session_alive(command[1]):
                return SESSION_GONE
            self.last_heard_ns[command[1]] = self._world.now_ns
            return True
        if kind == "open":
            session_id = self.open_session()
            if command[1]:
                self.last_heard_ns[session_id] = self._world.now_ns
                self._start_expiry()
            return session_id
        if kind == "close":
            self.close_session(command[1])
        elif kind == "expire":
            self.expire_session(command[1])
        else:
            raise AssertionError(f"unknown metastore command {command!r}")
        return None

    def read_applied(self, op: MetaOp) -> MetaResult:
        return self.apply(op)

    def apply(self, op: MetaOp, *, session_id: int | None = None) -> MetaResult:
        result = super().apply(op, session_id=session_id)
        self._fire_changes()
        return result

    def close_session(self, session_id: int) -> None:
        super().close_session(session_id)
        self.last_heard_ns.pop(session_id, None)
        self._fire_changes()

    def expire_session(self, session_id: int) -> None:
        super().expire_session(session_id)
        self.last_heard_ns.pop(session_id, None)
        self._fire_changes()

    def _fire_changes(self) -> None:
        changes = self.take_changes()
        if changes:
            for table in self._watch_tables:
                table.fire_changes(changes)

    def attach_watches(self, caller: str, table: WatchTable) -> None:
        self._watch_tables.append(table)

    def detach_watches(self, caller: str, table: WatchTable) -> None:
        self._watch_tables.remove(table)

    def draw_faults(self, nemesis) -> None:
        """The memory metastore's faults are the world's (outages, lost answers)."""

    def heal(self) -> None:
        pass

    def describe(self) -> str:
        return "memory"

    def _start_expiry(self) -> None:
        if not self._is_expiry_started:
            self._is_expiry_started = True
            self._world.loop.call_later(SESSION_CHECK_INTERVAL_NS, self._expire_silent_sessions)

    def _expire_silent_sessions(self) -> None:
        """Expire the sessions not heard from for a whole timeout; while the metastore is
        unreachable nobody expires, and every clock starts again."""
        world = self._world
        now_ns = world.now_ns
        if world.metastore_down_until_ns > now_ns:
            for session_id in self.last_heard_ns:
                self.last_heard_ns[session_id] = now_ns
        else:
            timeout_ns = world.scenario.metastore.session_timeout_ns
            expired = [s for s, heard_ns in self.last_heard_ns.items() if now_ns - heard_ns > timeout_ns]
            for session_id in expired:
                self.expire_session(session_id)
            if expired:
                self.expired_session_count += len(expired)
                world.trace.record(now_ns, "sessions-expired", *expired)
        world.loop.call_later(SESSION_CHECK_INTERVAL_NS, self._expire_silent_sessions)


class SimMetadataStore:
    """One process's metastore session (bkmetastore.api's interface, over the world's faults)."""

    def __init__(self, *, world, runtime, name: str) -> None:
        self._world = world
        self._name = name
        self._rt = runtime
        self._service = world.metastore
        self.session_id: int | None = None
        self._opened = runtime.Event()
        self._watches = self._new_watch_table()
        # Send time of the newest ping answered alive (or of the open): the lease counts from it.
        self._lease_base_ns = world.loop.now_ns
        self._is_lost = False
        self._is_closed = False

    # -- bkmetastore.api ------------------------------------------------------------------------

    async def execute(self, op: MetaOp) -> MetaResult:
        return await self._execute(op, None)

    async def execute_watch(self, op: Get | Children) -> tuple[MetaResult, OneShotWatch]:
        if not isinstance(op, (Get, Children)):
            raise TypeError(f"only Get and Children can be watched, not {type(op).__name__}")
        watches = []
        result = await self._execute(op, lambda: watches.append(
            self._watches.add(op.path, is_children=isinstance(op, Children))))
        if not watches or result.code is MetaCode.CONNECTION_LOSS:
            watch = watches[0] if watches else OneShotWatch(self._rt.Event())
            watch.fire("connection lost")
            return result, watch
        return result, watches[0]

    @property
    def session_lost(self) -> bool:
        return self._is_lost or self._is_closed

    def session_lease_s(self) -> float:
        if self.session_lost or self.session_id is None:
            return 0.0
        timeout_ns = self._world.scenario.metastore.session_timeout_ns
        left_ns = self._lease_base_ns + int(timeout_ns * LEASE_FRACTION) - self._world.loop.now_ns
        return max(0.0, left_ns / 1e9)

    async def aclose(self) -> None:
        if not self._is_closed:
            self._is_closed = True
            self._opened.set()
            if self.session_id is not None:
                self._service.submit(self._name, ["close", self.session_id], ignore_answer)
            self.abandon()

    # -- the process's side -------------------------------------------------------------------

    async def keep_alive(self) -> None:
        """Open the session, then ping while it lives (a task of the process)."""
        interval_s = self._world.scenario.metastore.session_timeout_ns / PING_FRACTION / 1e9
        while self.session_id is None and not self._is_closed:
            sent_ns = self._world.loop.now_ns
            answer = await self._call(["open", True])
            if answer is LOST:
                await self._rt.sleep(interval_s)
            else:
                self.session_id = answer
                self._lease_base_ns = sent_ns
                self._opened.set()
        while not self.session_lost:
            await self._rt.sleep(interval_s)
            sent_ns = self._world.loop.now_ns
            answer = await self._call(["ping", self.session_id])
            if answer is not LOST and self._check_alive(answer):
                # The leader heard this ping after it was sent: it cannot expire the session
                # sooner than a timeout after sent_ns. (Other answers say nothing of the
                # session: raft-lite serves an op of a session it has expired.)
                self._lease_base_ns = max(self._lease_base_ns, sent_ns)

    def abandon(self) -> None:
        """The process is gone: its watches will never be waited for again."""
        if self._watches is not None:
            self._service.detach_watches(self._name, self._watches)
            self._watches = self._new_watch_table()

    def _new_watch_table(self) -> WatchTable:
        table = WatchTable(lambda: OneShotWatch(self._rt.Event()))
        self._service.attach_watches(self._name, table)
        return table

    async def _execute(self, op: MetaOp, on_received) -> MetaResult:
        if not self.session_lost and self.session_id is None:
            await self._opened.wait()
        if self.session_lost:
            return MetaResult(MetaCode.SESSION_EXPIRED)
        answer = await self._call(["op", self.session_id, op], on_received)
        if answer is LOST:
            return MetaResult(MetaCode.CONNECTION_LOSS)
        if not self._check_alive(answer):
            return MetaResult(MetaCode.SESSION_EXPIRED)
        return answer

    def _check_alive(self, answer: object) -> bool:
        """False when the answer says the session is gone (which loses it)."""
        if answer is SESSION_GONE:
            if not self._is_lost:
                self._is_lost = True
                self._watches.fire_all("session expired")
            return False
        return True

    async def _call(self, command: list, on_received=None) -> object:
        """A command there and back with the world's latency and faults: the service's answer,
        or LOST."""
        world, rt = self._world, self._rt
        if rt.is_stopped:
            # Code of a crashed process that still runs (an async generator finalized by the
            # collector, say) must not reach the world, nor draw from its generators.
            raise ProcessStopped(f"{rt.name} is stopped")
        options = world.scenario.metastore
        sent_ns = world.loop.now_ns
        if self._unreachable_until_ns() > sent_ns:
            await rt.sleep(min(self._unreachable_until_ns() - sent_ns, options.connection_timeout_ns) / 1e9)
            return LOST
        await rt.sleep(world.metastore_latency_ns() / 1e9)
        if self._unreachable_until_ns() > world.loop.now_ns:
            return LOST
        answered = rt.Event()
        answers = []

        def on_answer(answer: object) -> None:
            answers.append(answer)
            answered.set()

        self._service.submit(self._name, command, on_answer, on_received)
        await answered.wait()
        answer = answers[0]
        if answer is LOST:
            return LOST
        is_answer_lost = world.draw_metastore_answer_lost()
        await rt.sleep(world.metastore_latency_ns() / 1e9)
        return LOST if is_answer_lost else answer

    def _unreachable_until_ns(self) -> int:
        """Until when this process cannot reach the metastore: the metastore's own outage, or
        a partition between this process alone and it."""
        world = self._world
        return max(world.metastore_down_until_ns, world.metastore_cut_off_until_ns.get(self._name, 0))


def ignore_answer(answer: object) -> None:
    """For a command whose answer nobody waits for."""
