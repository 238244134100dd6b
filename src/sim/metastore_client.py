"""The metastore as simulated processes see it.

SimMetastore is the world's one tree (a MemoryMetastore recording its changes) that also fires
the watches processes set on it, and expires the sessions of processes that stopped pinging.

SimMetadataStore is one process's session with it, offering metastore.api's interface to the
async layers (execute, execute_watch, session_lost, session_lease_s, aclose), with the world's
faults: every op takes a drawn latency each way, fails with CONNECTION_LOSS while the metastore
is down (after at most the connection timeout), and may lose its answer after being applied.
A watch is set at the instant its read is applied, as a server sets it, so no change between
the read and the answer is missed; a read that failed returns a watch already fired.

Sessions live as long as they are heard from: the process pings every third of the session
timeout, and the tree expires a session silent for a whole timeout (not while the metastore
itself is down: its clocks restart when it is back, as a new raft-lite leader or a ZooKeeper
quorum restarts them). A session learns that it expired from the next answer, as a real client
does, and its lease (session_lease_s) is raft-lite's: 0.8 of the timeout after sending the
newest ping that was answered.
"""

from __future__ import annotations

from bkcore.metaops import Children, Get, MetaCode, MetaOp, MetaResult
from metastore.memory import MemoryMetastore
from metastore.watches import OneShotWatch, WatchTable
from sim.tasks import ProcessStopped

PING_FRACTION = 3              # pings per session timeout
LEASE_FRACTION = 0.8           # of the session timeout, from the newest answered ping's send


class SimMetastore(MemoryMetastore):
    """The world's tree: ops apply atomically, and the watches of every process's session fire
    on the changes they make, whoever made them (a bookie registering, a client's CAS)."""

    def __init__(self) -> None:
        super().__init__(is_recording_changes=True)
        self._watch_tables: list[WatchTable] = []
        # Sessions of processes, and when each was last heard from.
        self.last_heard_ns: dict[int, int] = {}

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

    def add_watch_table(self, table: WatchTable) -> None:
        self._watch_tables.append(table)

    def remove_watch_table(self, table: WatchTable) -> None:
        self._watch_tables.remove(table)

    def expire_silent_sessions(self, *, now_ns: int, timeout_ns: int, is_reachable: bool) -> list[int]:
        """Expire the process sessions not heard from for timeout_ns; while the metastore is
        unreachable nobody expires, and every clock starts again. Returns the expired ids."""
        if not is_reachable:
            for session_id in self.last_heard_ns:
                self.last_heard_ns[session_id] = now_ns
            return []
        expired = [s for s, heard_ns in self.last_heard_ns.items() if now_ns - heard_ns > timeout_ns]
        for session_id in expired:
            self.expire_session(session_id)
        return expired


class SimMetadataStore:
    """One process's metastore session (metastore.api's interface, over the world's faults)."""

    def __init__(self, *, world, runtime, name: str) -> None:
        self._world = world
        self._name = name
        self._rt = runtime
        self._tree: SimMetastore = world.metastore
        self.session_id = self._tree.open_session()
        self._tree.last_heard_ns[self.session_id] = world.loop.now_ns
        self._watches = WatchTable(lambda: OneShotWatch(runtime.Event()))
        self._tree.add_watch_table(self._watches)
        # Send time of the newest answered op or ping: the lease counts from it.
        self._lease_base_ns = world.loop.now_ns
        self._is_lost = False
        self._is_closed = False

    # -- metastore.api ------------------------------------------------------------------------

    async def execute(self, op: MetaOp) -> MetaResult:
        return await self._call(op, None)

    async def execute_watch(self, op: Get | Children) -> tuple[MetaResult, OneShotWatch]:
        if not isinstance(op, (Get, Children)):
            raise TypeError(f"only Get and Children can be watched, not {type(op).__name__}")
        watches = []
        result = await self._call(op, lambda: watches.append(
            self._watches.add(op.path, is_children=isinstance(op, Children))))
        if not watches:
            watch = OneShotWatch(self._rt.Event())
            watch.fire("connection lost")
            return result, watch
        return result, watches[0]

    @property
    def session_lost(self) -> bool:
        return self._is_lost or self._is_closed

    def session_lease_s(self) -> float:
        if self.session_lost:
            return 0.0
        timeout_ns = self._world.scenario.metastore.session_timeout_ns
        left_ns = self._lease_base_ns + int(timeout_ns * LEASE_FRACTION) - self._world.loop.now_ns
        return max(0.0, left_ns / 1e9)

    async def aclose(self) -> None:
        if not self._is_closed:
            self._is_closed = True
            self._tree.close_session(self.session_id)
            self.abandon()

    # -- the process's side -------------------------------------------------------------------

    async def keep_alive(self) -> None:
        """Ping while the session lives (a task of the process)."""
        interval_s = self._world.scenario.metastore.session_timeout_ns / PING_FRACTION / 1e9
        while not self.session_lost:
            await self._rt.sleep(interval_s)
            await self._call(None, None)

    def abandon(self) -> None:
        """The process is gone: its watches will never be waited for again."""
        if self._watches is not None:
            self._tree.remove_watch_table(self._watches)
            self._watches = WatchTable(lambda: OneShotWatch(self._rt.Event()))

    async def _call(self, op: MetaOp | None, on_applied) -> MetaResult:
        """op, or a ping when None: there and back with the world's latency and faults."""
        world, rt = self._world, self._rt
        if rt.is_stopped:
            # Code of a crashed process that still runs (an async generator finalized by the
            # collector, say) must not reach the world, nor draw from its generators.
            raise ProcessStopped(f"{rt.name} is stopped")
        if self.session_lost:
            return MetaResult(MetaCode.SESSION_EXPIRED)
        options = world.scenario.metastore
        sent_ns = world.loop.now_ns
        if self._unreachable_until_ns() > sent_ns:
            await rt.sleep(min(self._unreachable_until_ns() - sent_ns, options.connection_timeout_ns) / 1e9)
            return MetaResult(MetaCode.CONNECTION_LOSS)
        await rt.sleep(world.metastore_latency_ns() / 1e9)
        if self._unreachable_until_ns() > world.loop.now_ns:
            return MetaResult(MetaCode.CONNECTION_LOSS)
        tree = self._tree
        if not tree.is_session_alive(self.session_id):
            self._lose_session()
            return MetaResult(MetaCode.SESSION_EXPIRED)
        tree.last_heard_ns[self.session_id] = world.loop.now_ns
        result = tree.apply(op, session_id=self.session_id) if op is not None else MetaResult(MetaCode.OK)
        if on_applied is not None:
            on_applied()
        is_answer_lost = world.draw_metastore_answer_lost()
        await rt.sleep(world.metastore_latency_ns() / 1e9)
        if is_answer_lost:
            return MetaResult(MetaCode.CONNECTION_LOSS)
        self._lease_base_ns = max(self._lease_base_ns, sent_ns)
        return result

    def _unreachable_until_ns(self) -> int:
        """Until when this process cannot reach the metastore: the metastore's own outage, or
        a partition between this process alone and it."""
        world = self._world
        return max(world.metastore_down_until_ns, world.metastore_cut_off_until_ns.get(self._name, 0))

    def _lose_session(self) -> None:
        if not self._is_lost:
            self._is_lost = True
            self._watches.fire_all("session expired")
