"""The table workload: the product's table service (bkcore.table) in simulated server processes,
clients that reach it over the simulated network, and a history that bksim.table_history judges.

Processes (bksim.processes; each may crash and restart, pause, or be cut off):
  ts     creates the table (a stream whose settings give its hash ranges);
  ss<i>  stream storage servers (bksim.table_server): ownership of ranges through the metastore,
         range journals and checkpoints on the bookies; the last table_late_server_count of
         them join late, at a time drawn in the run's first half, and the others hand ranges
         over to them (bkcore.table.rebalance), as they do to a server that restarts;
  tc<i>  clients: put (some with a TTL), get, delete, txn (one key: compare its version or value,
         then put or delete it, or read it in the failure branch), range and deleteRange over a
         pkey, increments of counters; each request routed as thick clients route them
         (bkcore.table.routing: the owner, else a live server; NotOwner sends it on);
  tw<i>  watchers: watch one key or a whole pkey from now on, for a while, then resume from the
         revision after the last change seen (or start afresh);
  tv     verifier: once the faults end, reads every key (the final values).
A process whose metastore session expired is restarted (an expired session is final).
"""

from __future__ import annotations

import functools

from bkcore.stream.segments import StreamSettings
from bkcore.table.commands import (
    Compare, CompareResult, CompareTarget, DeleteRange, Increment, Put, RangeRead, Txn, fold_key, pkey_end,
    unfold_key,
)
from bkcore.table.ownership import NotOwner
from bkcore.table.routing import NoServer, Routes
from bkcore.table.watch_resume import WatchResume
from bkcore.table.service import range_of
from bksim.processes import ProcessNemesis, Processes, ProcessWorkload, SimProcess
from bksim.rpc import RpcEndpoint, RpcRefused
from bksim.scenario import MS, S
from bksim.table_history import MISSING, TableHistory, TableOp, WatchLog, check_table_history
from bksim.table_server import (
    Compacted, Done, Failed, Redirect, Refused, TableRead, TableServer, TableWrite, WatchChange, WatchRequest,
    WatchStarted,
)
from bksim.workload_stream import EXPECTED, create_stream_if_missing

NAMESPACE = "sim"
TABLE = "kv"
REGISTER_PKEYS = (b"p0", b"p1", b"p2")
REGISTER_LKEYS = (b"a", b"b", b"c", b"t")     # puts to b"t" mostly carry a TTL
TTL_LKEY = b"t"
COUNTER_PKEYS = (b"n0",)
COUNTER_LKEYS = (b"x", b"y")
TTLS_MS = (100, 300, 1000)
RETRY_PAUSE_S = 0.1
OP_INTERVAL_MEAN_S = 0.01
CLIENT_TASKS_COUNT = 2             # requests a client process has in flight at once
PLANNED_RESTART_NS = 200 * MS
# Weights of the client's operations.
OPERATIONS = (("put", 30), ("get", 20), ("delete", 6), ("txn", 12), ("range", 8), ("delete-range", 3), ("incr", 15))


class TableWorkload(ProcessWorkload):
    def __init__(self, *, world, history: TableHistory, processes: Processes | None = None) -> None:
        """processes: those of a workload this one runs beside (bksim.workload_mixed)."""
        self.world = world
        self.history = history
        self.scenario = scenario = world.scenario
        self.rng = world.workload_rng
        self.processes = processes or Processes(world=world, rng=self.rng)
        self.settings = StreamSettings(
            ensemble_size=scenario.ensemble_size, write_quorum_size=scenario.write_quorum_size,
            ack_quorum_size=scenario.ack_quorum_size, table_ranges=scenario.table_range_count)
        history.counter_pkeys = frozenset(COUNTER_PKEYS)
        history.clock_spread_ns = 2 * scenario.clock_skew_max_ns
        self.server_roles = [f"ss{i}" for i in range(scenario.table_server_count + scenario.table_late_server_count)]
        self._servers: list[TableServer] = []      # every incarnation's, for the summary
        self.client_roles = [f"tc{i}" for i in range(scenario.table_client_count)]
        self.watcher_roles = [f"tw{i}" for i in range(scenario.table_watcher_count)]
        self.timeout_s = scenario.table_request_timeout_ns / S
        self.is_writing = True
        self.is_ready = False
        self.is_verified = False
        self.verify_failures: list[str] = []
        self._value_count = 0
        self._weights = [weight for _, weight in OPERATIONS]

    # -- the run's phases -----------------------------------------------------------------------

    def start(self) -> None:
        self.start_supervised("ts", self._setup)

    def start_nemesis(self, end_ns: int) -> None:
        ProcessNemesis(processes=self.processes, roles=self.server_roles + self.client_roles + self.watcher_roles,
                       end_ns=end_ns, cut_off_roles=self.server_roles).start()
        # One planned restart of a server (a rolling upgrade) in the middle of every run, so
        # ranges move to a new owner, which restores them from their checkpoints.
        role = self.rng.choice(self.server_roles)
        self.world.loop.call_later(int(self.rng.uniform(0.3, 0.7) * end_ns),
                                   functools.partial(self.processes.crash, role, restart_after_ns=PLANNED_RESTART_NS))

    def start_verification(self) -> None:
        self.start_supervised("tv", self._verify)

    def check(self) -> list:
        return check_table_history(self.history)

    def summary(self) -> list[str]:
        history = self.history
        ops = history.ops
        known = sum(op.result is not None for op in ops)
        kinds = {}
        for op in ops:
            kinds[op.kind] = kinds.get(op.kind, 0) + 1
        events = sum(len(w.events) for w in history.watches)
        handovers = sum(server.tables.rebalancer.handover_count for server in self._servers if server.tables)
        return [
            f"table: {len(ops)} ops ({known} answered, {len(ops) - known} unknown) {dict(sorted(kinds.items()))}; "
            f"watches {len(history.watches)} saw {events} changes; ranges handed over {handovers}; "
            f"verified: {'yes' if self.is_verified else 'no'}",
            f"keys too hard to check: {len(history.unchecked_keys)} {history.unchecked_keys[:5]}; process crashes "
            f"{self.processes.crash_count}, sessions expired {self.processes.world.metastore.expired_session_count}",
            f"errors seen: {dict(sorted(history.errors.items()))}",
        ]

    # -- processes ------------------------------------------------------------------------------

    async def _setup(self, process: SimProcess) -> None:
        streams = process.bk.streams
        while True:
            try:
                await create_stream_if_missing(streams, NAMESPACE, TABLE, self.settings)
                break
            except EXPECTED as exc:
                self.history.error(f"setup:{type(exc).__name__}")
                await process.runtime.sleep(RETRY_PAUSE_S)
        self.is_ready = True
        first_count = self.scenario.table_server_count
        for role in self.server_roles[:first_count]:
            self.start_supervised(role, self._server)
        for role in self.server_roles[first_count:]:
            join_after_ns = int(self.rng.uniform(0.1, 0.5) * self.scenario.duration_ns)
            self.world.loop.call_later(join_after_ns, functools.partial(self.start_supervised, role, self._server))
        for role in self.client_roles:
            self.start_supervised(role, self._client)
        for role in self.watcher_roles:
            self.start_supervised(role, self._watcher)

    async def _server(self, process: SimProcess) -> None:
        server = TableServer(world=self.world, process=process, namespace=NAMESPACE, stream=TABLE,
                             checkpoint_every=self.scenario.table_checkpoint_every)
        self._servers.append(server)
        await server.run()

    # -- clients --------------------------------------------------------------------------------

    async def _client(self, process: SimProcess) -> None:
        caller = TableCaller(self, process)
        async with process.runtime.open_nursery() as nursery:
            for _ in range(CLIENT_TASKS_COUNT):
                nursery.start_soon(self._operate, process, caller)

    async def _operate(self, process: SimProcess, caller: TableCaller) -> None:
        while self.is_writing:
            kind = self.rng.choices(OPERATIONS, self._weights)[0][0]
            await getattr(self, "_" + kind.replace("-", "_"))(caller)
            await process.runtime.sleep(self.rng.expovariate(1 / OP_INTERVAL_MEAN_S))

    def _new_value(self) -> bytes:
        self._value_count += 1
        return b"v%d" % self._value_count

    def _register_key(self) -> tuple[bytes, bytes]:
        return self.rng.choice(REGISTER_PKEYS), self.rng.choice(REGISTER_LKEYS)

    async def _put(self, caller: TableCaller) -> None:
        pkey, lkey = self._register_key()
        value = self._new_value()
        ttl_ms = self.rng.choice(TTLS_MS) if lkey == TTL_LKEY and self.rng.random() < 0.8 else 0
        await caller.run("put", pkey, (lkey,), (value, ttl_ms),
                         TableWrite(pkey, Put(fold_key(pkey, lkey), value, prev_kv=True, ttl_ms=ttl_ms)),
                         lambda r: (*_kv_state(r.prev_kv), r.revision))

    async def _get(self, caller: TableCaller) -> None:
        if self.rng.random() < 0.2:
            pkey, lkey = self.rng.choice(COUNTER_PKEYS), self.rng.choice(COUNTER_LKEYS)
            await caller.run("get", pkey, (lkey,), (), TableRead(pkey, lkey), lambda r: _number(r.kvs))
            return
        pkey, lkey = self._register_key()
        await caller.run("get", pkey, (lkey,), (), TableRead(pkey, lkey),
                         lambda r: _kv_state(r.kvs[0] if r.kvs else None))

    async def _delete(self, caller: TableCaller) -> None:
        pkey, lkey = self._register_key()
        await caller.run("delete", pkey, (lkey,), (), TableWrite(pkey, DeleteRange(fold_key(pkey, lkey))),
                         lambda r: (r.deleted, r.revision))

    async def _txn(self, caller: TableCaller) -> None:
        rng = self.rng
        pkey, lkey = self._register_key()
        key = fold_key(pkey, lkey)
        if rng.random() < 0.5:
            target, expected = "version", rng.choice([0, 1, 1, 2, 3])
            compare = Compare(key, CompareTarget.VERSION, CompareResult.EQUAL, expected)
        else:
            target, expected = "value", b"v%d" % rng.randint(max(1, self._value_count - 20), self._value_count + 1)
            compare = Compare(key, CompareTarget.VALUE, CompareResult.EQUAL, expected)
        new_value = None if rng.random() < 0.2 else self._new_value()
        success = DeleteRange(key) if new_value is None else Put(key, new_value)
        command = Txn((compare,), (success,), (RangeRead(key),))

        def result(r):
            if not r.succeeded:
                return False, _kv_state(r.results[0].kvs[0] if r.results[0].kvs else None), None
            changed = new_value is not None or r.results[0].deleted > 0
            return True, None, r.revision if changed else None
        await caller.run("txn", pkey, (lkey,), (target, expected, new_value), TableWrite(pkey, command), result)

    def _span(self, lkeys: tuple[bytes, ...]) -> tuple[bytes, bytes, tuple[bytes, ...]]:
        """A random lkey range of a pkey: (start, end (b"": to the pkey's end), lkeys inside)."""
        start = self.rng.choice(lkeys)
        end = self.rng.choice([b""] + [k for k in lkeys if k > start])
        return start, end, tuple(k for k in lkeys if k >= start and (not end or k < end))

    async def _range(self, caller: TableCaller) -> None:
        if self.rng.random() < 0.3:
            pkey = self.rng.choice(COUNTER_PKEYS)
            start, end, inside = self._span(COUNTER_LKEYS)
            await caller.run("range", pkey, inside, (), TableRead(pkey, start, end),
                             lambda r: tuple((unfold_key(kv.key)[1], kv.number) for kv in r.kvs))
            return
        pkey = self.rng.choice(REGISTER_PKEYS)
        start, end, inside = self._span(REGISTER_LKEYS)
        await caller.run("range", pkey, inside, (), TableRead(pkey, start, end),
                         lambda r: tuple((unfold_key(kv.key)[1], kv.value, kv.version) for kv in r.kvs))

    async def _delete_range(self, caller: TableCaller) -> None:
        pkey = self.rng.choice(REGISTER_PKEYS)
        start, end, inside = self._span(REGISTER_LKEYS)
        folded_end = pkey_end(fold_key(pkey)) if not end else fold_key(pkey, end)
        await caller.run("delete-range", pkey, inside, (),
                         TableWrite(pkey, DeleteRange(fold_key(pkey, start), folded_end)),
                         lambda r: (r.deleted, r.revision))

    async def _incr(self, caller: TableCaller) -> None:
        pkey, lkey = self.rng.choice(COUNTER_PKEYS), self.rng.choice(COUNTER_LKEYS)
        amount = self.rng.randint(1, 5)
        await caller.run("incr", pkey, (lkey,), (amount,),
                         TableWrite(pkey, Increment(fold_key(pkey, lkey), amount)), lambda r: r.total)

    # -- watchers -------------------------------------------------------------------------------

    async def _watcher(self, process: SimProcess) -> None:
        caller = TableCaller(self, process)
        rt, rng = process.runtime, self.rng
        previous: WatchLog | None = None
        resume = WatchResume()
        session = 0
        while self.is_writing:
            session += 1
            if previous is not None and rng.random() < 0.8:
                pkey, lkeys = previous.pkey, previous.lkeys
                lkey, lkey_end = (lkeys[0], None) if len(lkeys) == 1 else (b"", b"")
            else:
                previous = None
                resume = WatchResume()
                pkey = rng.choice(REGISTER_PKEYS)
                lkey, lkey_end = (rng.choice(REGISTER_LKEYS), None) if rng.random() < 0.5 else (b"", b"")
                lkeys = (lkey,) if lkey_end is None else REGISTER_LKEYS
            start_revision = resume.new_stream()
            duration_s = rng.choice([0.3, 1.0, 3.0])
            log = WatchLog(f"{process.name}/{session}", pkey, lkeys, 0, self.world.now_ns,
                           resumes=previous.name if previous is not None else None)
            is_started = await caller.watch(WatchRequest(pkey, lkey, lkey_end, start_revision, duration_s), log,
                                            resume)
            previous = log if is_started else None if is_started is None else previous
            await rt.sleep(rng.random() * RETRY_PAUSE_S)

    # -- the verifier ---------------------------------------------------------------------------

    async def _verify(self, process: SimProcess) -> None:
        caller = TableCaller(self, process, process_name="verifier")
        rt = process.runtime
        while not self.is_ready:
            await rt.sleep(RETRY_PAUSE_S)
        self.history.final_read_at_ns = self.world.now_ns
        keys = [(p, k, False) for p in REGISTER_PKEYS for k in REGISTER_LKEYS]
        keys += [(p, k, True) for p in COUNTER_PKEYS for k in COUNTER_LKEYS]
        for pkey, lkey, is_counter in keys:
            while not await caller.run(
                    "get", pkey, (lkey,), (), TableRead(pkey, lkey),
                    (lambda r: _number(r.kvs)) if is_counter else (lambda r: _kv_state(r.kvs[0] if r.kvs else None))):
                self.verify_failures.append(caller.last_failure)
                await rt.sleep(RETRY_PAUSE_S)
        self.is_verified = True


class TableCaller:
    """One process's requests: routed to a server (bkcore.table.routing) and sent over its RPC
    endpoint, each recorded in the history with its outcome."""

    def __init__(self, workload: TableWorkload, process: SimProcess, *, process_name: str | None = None) -> None:
        self._workload = workload
        self._history = workload.history
        self._process = process
        self._name = process_name or process.name
        self._endpoint = RpcEndpoint(world=workload.world, process=process)
        self._routes = Routes(process.store, process.bk.layout.root)
        self._range_count = workload.scenario.table_range_count
        self.last_failure = ""

    def _address(self, server: str) -> str:
        process = self._workload.processes.current.get(server)
        if process is None:
            raise RpcRefused(f"no server {server}")
        return f"{process.name}.rpc"

    async def _routed(self, pkey: bytes, send):
        index = (NAMESPACE, TABLE, range_of(pkey, self._range_count))
        return await self._routes.call(index, send)

    async def call(self, pkey: bytes, body: object) -> object:
        timeout_s = self._workload.timeout_s

        async def send(server: str) -> object:
            answer = await self._endpoint.call(self._address(server), body, timeout_s=timeout_s)
            if type(answer) is Redirect:
                raise NotOwner(answer.owner, f"{pkey!r}")
            return answer
        return await self._routed(pkey, send)

    async def run(self, kind: str, pkey: bytes, lkeys: tuple[bytes, ...], args: tuple, body: object,
                  result_of) -> bool:
        """Send one request and record it; returns whether it was answered."""
        world, history = self._workload.world, self._history
        op = history.invoke(self._name, kind, pkey, lkeys, args, world.now_ns)
        is_read = kind in ("get", "range")
        try:
            answer = await self.call(pkey, body)
        except (RpcRefused, NoServer, NotOwner) as exc:
            return self._failed(op, f"{kind}:{type(exc).__name__}", is_definite=True)
        except ConnectionError as exc:
            return self._failed(op, f"{kind}:{type(exc).__name__}", is_definite=is_read)
        if type(answer) is Done:
            history.complete(op, result_of(answer.result), world.now_ns)
            return True
        assert type(answer) in (Refused, Failed), answer
        detail = answer.reason if type(answer) is Refused else answer.error
        return self._failed(op, f"{kind}:{type(answer).__name__}:{detail[:40]}",
                            is_definite=is_read or type(answer) is Refused)

    def _failed(self, op: TableOp, error: str, *, is_definite: bool) -> bool:
        """A request without an answer: left out if it certainly did nothing (or was a read),
        else left with an unknown outcome."""
        self._history.error(error)
        self.last_failure = error
        if is_definite:
            self._history.drop(op)
        return False

    async def watch(self, request: WatchRequest, log: WatchLog, resume: WatchResume) -> bool | None:
        """Run one watch into `log` (added to the history once the server started it). Returns
        True if it started, None if its start revision was compacted (start afresh), False if
        it did not start."""
        timeout_s = self._workload.timeout_s
        streams = []
        # Whether its log went into the history (not whether it is the last one there: another
        # watcher's log may have gone in since; seed 52 of the table workload found that a
        # watch counted as not started after it advanced `resume`, and its successor then
        # resumed the one before it from too late a revision).
        is_started = False

        async def send(server: str) -> object:
            stream = self._endpoint.request(self._address(server), request)
            streams.append(stream)
            first = await stream.next(timeout_s)
            if type(first) is Redirect:
                raise NotOwner(first.owner, f"{request.pkey!r}")
            return first
        try:
            first = await self._routed(request.pkey, send)
            if type(first) is not WatchStarted:
                self._history.error(f"watch:{type(first).__name__}")
                return None if type(first) is Compacted else False
            log.start_after = first.revision
            resume.started(first.revision)
            self._history.watches.append(log)
            is_started = True
            await self._follow(streams[-1], log, request.duration_s + timeout_s, resume)
            return True
        except (ConnectionError, NotOwner) as exc:
            self._history.error(f"watch:{type(exc).__name__}")
            return is_started
        finally:
            for stream in streams:
                stream.close()

    async def _follow(self, stream, log: WatchLog, timeout_s: float, resume: WatchResume) -> None:
        world = self._workload.world
        while True:
            item = await stream.next(timeout_s)
            if type(item) is not WatchChange:
                if type(item) is Failed:
                    self._history.error(f"watch:{item.error}")
                return
            event = item.event
            if not resume.is_new(event.revision):
                continue                    # delivered by the stream this one resumes
            value = event.kv.value if event.kind == "put" else None
            log.events.append((event.revision, unfold_key(event.kv.key)[1], event.kind, value, world.now_ns))


def _kv_state(kv) -> tuple:
    return MISSING if kv is None else (kv.value, kv.version)


def _number(kvs) -> int:
    return kvs[0].number if kvs else 0
