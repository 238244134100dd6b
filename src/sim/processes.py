"""SimProcess: an application process in the simulator, where the stream and table layers run.

A process has a SimRuntime (its tasks), a ledger client (a client node of the world, driving
bkcore's Client as bktransports.client_driver does in a real process) and a metastore session
(bksim.metastore_client). It is the driver that bkcore.client.handles expects, so `process.bk`
is the same BookKeeperClient, with the same streams, that a library user gets from connect().

Like the real driver, a pipelined add (start_add) is pumped once the task that started it
yields, so adds started in a row leave in one batch per bookie.

Processes: starts processes by role, crashes and restarts them (a restarted process is a new
one, its nodes named <role>.<incarnation>; a crash closes every task and stops the client node;
the metastore session is left to expire, by the metastore's own rule). ProcessNemesis crashes processes at the scenario's rate while faults are on; pauses and
partitions reach them through the world's nemesis, since a process's tasks pause with its
client node.
"""

from __future__ import annotations

import functools
import itertools
import random
from typing import Awaitable, Callable

from bkcore.client.handles import BookKeeperClient
from bkcore.effects import Completed
from bksim.metastore_client import SimMetadataStore
from bksim.scenario import MS
from bksim.tasks import ProcessStopped, SimRuntime

NEMESIS_TICK_NS = 100 * MS
SESSION_CHECK_INTERVAL_S = 0.1
SESSION_RESTART_DELAY_NS = 100 * MS


class _Call:
    __slots__ = ("done", "result", "error")

    def __init__(self, done) -> None:
        self.done = done
        self.result: object = None
        self.error: BaseException | None = None


class SimProcess:
    def __init__(self, *, world, role: str, incarnation: int, seed: int, clock_offset_ns: int) -> None:
        self.role = role
        self.incarnation = incarnation
        self.name = f"{role}.{incarnation}"
        self._world = world
        self.client = world.add_client(self.name, self._on_completed)
        self.runtime = SimRuntime(loop=world.loop, rng=random.Random(seed), name=self.name,
                                  clock_offset_ns=clock_offset_ns, pause_source=world.clients[self.name])
        self.store = SimMetadataStore(world=world, runtime=self.runtime, name=self.name)
        self.layout = world.layout
        self.is_up = True
        self._op_ids = itertools.count(1)
        self._calls: dict[int, _Call] = {}
        self._on_done: dict[int, Callable[[object, BaseException | None], None]] = {}
        self._is_pump_posted = False
        # What else of the process stops with it (its RPC endpoint: bksim.rpc).
        self.on_crash: list[Callable[[], None]] = []
        self.bk = BookKeeperClient(self)
        self.runtime.spawn_system_task(self.store.keep_alive)

    # -- the driver of bkcore.client.handles ----------------------------------------------------

    async def call(self, start: Callable[[int, int], None]) -> object:
        self._check_up()
        op_id = next(self._op_ids)
        call = self._calls[op_id] = _Call(self.runtime.Event())
        start(op_id, self._world.now_ns)
        self._world.client_did_something(self.name)
        await call.done.wait()
        if call.error is not None:
            raise call.error
        return call.result

    def start_add(self, writer, payload: bytes, on_done: Callable[[object, BaseException | None], None], *,
                  alone: bool = False) -> None:
        """(alone changes nothing here: the simulated client's effects always wait for the
        caller to yield, which in simulated time costs nothing.)"""
        self._check_up()
        op_id = next(self._op_ids)
        self._on_done[op_id] = on_done
        writer.add(op_id, payload, now_ns=self._world.now_ns)
        if not self._is_pump_posted:
            self._is_pump_posted = True
            loop = self._world.loop
            loop.post_at(loop.now_ns, self._pump)

    def _pump(self) -> None:
        self._is_pump_posted = False
        if self.is_up:
            self._world.client_did_something(self.name)

    def _on_completed(self, client_id: str, completed: Completed, now_ns: int) -> None:
        on_done = self._on_done.pop(completed.op_id, None)
        if on_done is not None:
            on_done(completed.result, completed.error)
            return
        call = self._calls.pop(completed.op_id, None)
        if call is not None:
            call.result, call.error = completed.result, completed.error
            call.done.set()

    def _check_up(self) -> None:
        if not self.is_up:
            raise ProcessStopped(f"{self.name} has stopped")

    # -- lifecycle ----------------------------------------------------------------------------

    def crash(self) -> None:
        if not self.is_up:
            return
        self.is_up = False
        self._world.stop_client(self.name)
        for stop in self.on_crash:
            stop()
        self.runtime.stop()
        self.store.abandon()
        self._calls.clear()
        self._on_done.clear()


class Processes:
    """The application processes of a run, by role."""

    def __init__(self, *, world, rng: random.Random) -> None:
        self.world = world
        self._rng = rng
        self.current: dict[str, SimProcess] = {}
        self._mains: dict[str, Callable[[SimProcess], Awaitable[None]]] = {}
        self._incarnations: dict[str, int] = {}
        self.crash_count = 0

    def start(self, role: str, main: Callable[[SimProcess], Awaitable[None]]) -> SimProcess:
        """Start a process of `role` running main(process) (again after a crash)."""
        assert role not in self.current or not self.current[role].is_up, f"{role} runs already"
        incarnation = self._incarnations.get(role, 0) + 1
        self._incarnations[role] = incarnation
        skew_ns = self.world.scenario.clock_skew_max_ns
        process = SimProcess(world=self.world, role=role, incarnation=incarnation, seed=self._rng.getrandbits(64),
                             clock_offset_ns=self._rng.randint(-skew_ns, skew_ns) if skew_ns else 0)
        self.current[role] = process
        self._mains[role] = main
        process.runtime.spawn_system_task(main, process)
        self.world.trace.record(self.world.now_ns, "process", process.name)
        return process

    def crash(self, role: str, *, restart_after_ns: int | None) -> None:
        process = self.current.get(role)
        if process is None or not process.is_up:
            return
        process.crash()
        self.crash_count += 1
        self.world.trace.record(self.world.now_ns, "process-crash", process.name)
        if restart_after_ns is not None:
            self.world.loop.call_later(restart_after_ns, self._restart, role)

    def _restart(self, role: str) -> None:
        if not self.current[role].is_up:
            self.start(role, self._mains[role])

    def stop_all(self) -> None:
        """The run is over: close every process's tasks now, while their runtimes can still
        refuse what their finally blocks ask for (not later, whenever the collector runs)."""
        for role in sorted(self.current):
            self.current[role].crash()

    def restart_all_crashed(self) -> None:
        for role in sorted(self.current):
            self._restart(role)


class ProcessWorkload:
    """What every workload of application processes does at the run's phases (bksim.run): it
    stops writing, its crashed processes restart when the cluster heals, and the run's end
    stops them all. A subclass sets `processes` and `is_writing`.

    start_supervised(role, main) starts a process that a supervisor restarts once its metastore
    session is lost while main runs (an expired session is final, in ZooKeeper as in raft-lite:
    the library says to connect again)."""

    processes: Processes
    is_writing: bool

    def start_supervised(self, role: str, main: Callable[[SimProcess], Awaitable[None]]) -> None:
        async def run(process: SimProcess) -> None:
            async with process.runtime.open_nursery() as nursery:
                nursery.start_soon(self._restart_when_session_lost, process)
                await main(process)
                nursery.cancel_scope.cancel()      # done: nothing to restart (a setup that ran)
        self.processes.start(role, run)

    async def _restart_when_session_lost(self, process: SimProcess) -> None:
        while not process.store.session_lost:
            await process.runtime.sleep(SESSION_CHECK_INTERVAL_S)
        self.processes.world.loop.call_later(0, functools.partial(self.processes.crash, process.role,
                                                                  restart_after_ns=SESSION_RESTART_DELAY_NS))
        await process.runtime.sleep_forever()

    def stop_writing(self) -> None:
        self.is_writing = False

    def heal(self) -> None:
        self.processes.restart_all_crashed()

    def stop(self) -> None:
        self.processes.stop_all()


class ProcessNemesis:
    """Crashes application processes, and cuts them off from the metastore alone (while they go
    on reaching bookies and each other: their sessions expire, and whatever they own through
    one moves on without them knowing). The world's nemesis does bookies, pauses and network
    partitions."""

    def __init__(self, *, processes: Processes, roles: list[str], end_ns: int,
                 cut_off_roles: list[str] = ()) -> None:
        """roles: crashed now and then; cut_off_roles: cut off from the metastore now and then
        (those whose sessions hold something: owners of table ranges)."""
        self._processes = processes
        self._roles = roles
        self._cut_off_roles = set(cut_off_roles)
        self._end_ns = end_ns
        self._rng = processes.world.rng

    def start(self) -> None:
        self._processes.world.loop.call_later(NEMESIS_TICK_NS, self._tick)

    def _tick(self) -> None:
        world = self._processes.world
        scenario = world.scenario
        if world.now_ns >= self._end_ns or not world.faults_enabled:
            return
        crash_per_tick = scenario.crash_probability_per_second * NEMESIS_TICK_NS / 1e9
        cut_off_per_tick = scenario.network.partition_probability_per_second / 2 * NEMESIS_TICK_NS / 1e9
        session_timeout_ns = scenario.metastore.session_timeout_ns
        for role in self._roles:
            if crash_per_tick > 0 and self._rng.random() < crash_per_tick:
                delay_ns = int(self._rng.expovariate(1 / scenario.restart_delay_mean_ns))
                self._processes.crash(role, restart_after_ns=delay_ns)
            elif role in self._cut_off_roles and cut_off_per_tick > 0 and self._rng.random() < cut_off_per_tick:
                process = self._processes.current.get(role)
                if process is not None and process.is_up:
                    duration_ns = int(self._rng.expovariate(1 / (2 * session_timeout_ns)))
                    world.metastore_cut_off_until_ns[process.name] = world.now_ns + duration_ns
                    world.trace.record(world.now_ns, "metastore-cut-off", process.name, duration_ns)
        world.loop.call_later(NEMESIS_TICK_NS, self._tick)
