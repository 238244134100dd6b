"""SimWorld: bookies, clients and the metastore as nodes of one deterministic event loop.

The world performs the effects of the pure core the way a real deployment would, with faults:
- HeldSends: the client's held sends pulled at once, or once a connection drawn busy is done;
- Send: over SimNetwork (latency, loss, duplication, reordering, partitions); a message to a
  node that is down, or that restarted since the message left, is dropped (its connection broke);
- JournalWrite: write to the bookie's SimDisk, fsync after a drawn latency, then
  answer_persisted and apply_persisted (in the order the writes were made, as one journal
  file persists them); or, for a drawn share of the writes, begin_persisted and
  apply_persisted a drawn number of records at a time, other inputs coming between the slices
  (as a server applies a large write its journal thread synced: transports/bookie_server.py);
  a full disk kills the bookie (as a journal I/O error does in BookKeeper);
- MetadataCall: submitted to the metastore (the memory tree, or three raft-lite members: see
  bksim.metastore_client) after a latency, unless it is in an outage; the answer may be lost on
  the way back (applied, but the caller hears CONNECTION_LOSS). Bookies register through it
  with sessions of their own (pinged where the metastore expires silent ones); their own reads
  (cookie at start, GC's ledger list) are linearizable reads of the applied state;
- crashes drop unsynced bytes (maybe tearing the last write), restarts replay the journal;
  pauses hold every input of a node until it resumes.
Every random choice comes from generators seeded from the run's seed, in a fixed order.
"""

from __future__ import annotations

import random
import types
from dataclasses import dataclass, field
from typing import Callable

from bkcore.bookie.bookie import BookieConfig
from bkcore.bookie.fs import DiskFullError
from bkcore.bookie.journal_files import JournalConfig, JournalStartError
from bkcore.bookie.durable_storage import StorageConfig
from bkcore.bookie.index import MemoryIndexStore
from bkcore.bookie.compaction import CompactionConfig, Compactor
from bkcore.bookie.cookie import Cookie, CookieError
from bkcore.bookie.diskmonitor import DiskUsageMonitor
from bkcore.bookie.gc import collect_garbage
from bkcore.bookie.stack import BookieStack
from bkcore.client.client import Client
from bkcore.client.config import ClientConfig
from bkcore.effects import Completed, HeldSends, JournalWrite, MetadataCall, Send
from bkcore.ledger.layout import LedgerLayout
from bkcore.metaops import Children, Create, Delete, Get, MetaCode, MetaResult
from bksim.filesystem import SimFileSystem
from bksim.loop import EventLoop, TraceHasher
from bksim.metastore_client import LOST, SESSION_GONE, SimMetastore, ignore_answer
from bksim.network import SimNetwork
from bksim.raftlite_metastore import RaftMetastore
from bksim.scenario import Scenario

# Small journal files and entry logs, and frequent checkpoints, so rolling, LastLogMark moves
# and journal deletion happen in every run; checkpoints in small parts, so crashes fall
# between two of them (some of a checkpoint's entries indexed, the rest not).
SIM_JOURNAL_MAX_SIZE = 64 * 1024
SIM_STORAGE_CONFIG = StorageConfig(entry_log_size_max=4 * 1024, checkpoint_part_size=1024)
CHECKPOINT_INTERVAL_NS = 500_000_000
GC_EVERY_CHECKPOINTS = 4
MAJOR_EVERY_GC_ROUNDS = 4
PUMP_ROUND_COUNT_MAX = 1_000
# Durable journal writes applied in slices (_persisted): what share of them, how many records
# a slice applies (one of these, drawn per write), and the most time between two slices.
APPLIED_IN_SLICES_SHARE = 0.25
SLICE_RECORD_COUNTS = (1, 2, 5)
SLICE_GAP_MAX_NS = 300_000
HEALED_RESTART_RETRY_NS = 100_000_000
HEALED_DISK_CAPACITY_SIZE = 1 << 40
METASTORE_RETRY_NS = 100_000_000


class MetastoreUnreachable(Exception):
    """A bookie cannot start: the metastore does not answer."""


@dataclass(slots=True)
class _Node:
    """A bookie or a client process. One class for both (the fields of the other kind stay at
    their defaults) so that the hot paths, which handle both, see a single type: CPython
    specializes an attribute access to the one type it sees and falls back to a slower generic
    lookup where two alternate."""
    name: str
    core: object = None
    is_up: bool = True
    incarnation: int = 0
    paused_until_ns: int = 0
    timer_handle: object = None
    timer_at_ns: int | None = None
    # Bookies only.
    fs: SimFileSystem | None = None
    index: MemoryIndexStore | None = None      # committed on write: survives crashes
    stack: BookieStack | None = None
    monitor: DiskUsageMonitor | None = None    # like the disk, it outlives a crash
    session_id: int | None = None
    crash_count: int = 0
    start_failure_count: int = 0
    # When the latest journal write in flight becomes durable: writes persist in the order they
    # were made (the core expects that), so a later one never completes before it.
    journal_durable_at_ns: int = 0
    # Journal writes durable while the node was paused or was applying an earlier one in
    # slices, oldest first, told to the core when it resumes (or is done); later ones queue
    # behind them, so the core still hears of them in order.
    persisted_backlog: list[int] = field(default_factory=list)
    # Clients only.
    on_completed: Callable[[str, Completed, int], None] | None = None
    # The world's handlers for this kind of node: its own copies of _deliver, _pump and
    # _on_timer (see _own_copy), bound. Set when the node is added. (Callers read one into a
    # local before calling it: node.pump(node) would be a method lookup that CPython cannot
    # specialize for an attribute that holds a bound method.)
    deliver: Callable | None = None
    pump: Callable | None = None
    on_timer: Callable | None = None
    # core.take_effects and core.next_deadline_ns, bound when core is set (None while it is
    # None): the pump calls them after every input. Invariant: core changes only through
    # set_core, which keeps these two in step with it.
    take_effects: Callable | None = None
    next_deadline_ns: Callable | None = None

    def set_core(self, core: object) -> None:
        self.core = core
        self.take_effects = None if core is None else core.take_effects
        self.next_deadline_ns = None if core is None else core.next_deadline_ns


_BookieNode = _ClientNode = _Node


def _own_copy(function: Callable) -> Callable:
    """`function` with a code object of its own. CPython 3.11 specializes each instruction of a
    code object to the types it meets, and an instruction that meets two types in turn (a Bookie
    core and a Client core) falls back to a slower generic path; the world's handlers for
    inputs therefore run as one copy per kind of node, each seeing one kind. Same behaviour."""
    return types.FunctionType(function.__code__.replace(), function.__globals__, function.__name__,
                              function.__defaults__, function.__closure__)


@dataclass(slots=True)
class _Copies:
    """The copies of one duplicated message that have arrived so far (see _deliver_copy)."""
    arrived_count: int = 0


@dataclass(slots=True)
class WorldCounts:
    messages_sent: int = 0
    messages_dropped_down: int = 0
    journal_writes: int = 0
    metadata_calls: int = 0
    metadata_connection_losses: int = 0
    crashes: int = 0
    restarts: int = 0
    pauses: int = 0
    disk_full_kills: int = 0
    journal_tails_repaired: int = 0
    restart_refusals: int = 0
    checkpoints: int = 0
    ledgers_collected: int = 0
    readonly_transitions: int = 0
    checkpoints_refused_full: int = 0
    log_bytes_reclaimed: int = 0
    entries_compacted: int = 0


class SimWorld:
    def __init__(self, *, scenario: Scenario, bookie_config: BookieConfig = BookieConfig(),
                 client_config: ClientConfig = ClientConfig(), layout: LedgerLayout = LedgerLayout()) -> None:
        self.scenario = scenario
        self.loop = EventLoop()
        self.trace = TraceHasher()
        seeds = random.Random(scenario.seed)
        # Sub-seeds in a fixed order: adding a component later must not shift the others.
        self.rng = random.Random(seeds.getrandbits(64))
        self.network = SimNetwork(rng=random.Random(seeds.getrandbits(64)), options=scenario.network)
        self._metastore_rng = random.Random(seeds.getrandbits(64))
        self._disk_seed = seeds.getrandbits(64)
        self._client_seed = seeds.getrandbits(64)
        self.workload_rng = random.Random(seeds.getrandbits(64))
        self.metastore_down_until_ns = 0
        # Processes cut off from the metastore alone (by node name), until when.
        self.metastore_cut_off_until_ns: dict[str, int] = {}
        self.layout = layout
        self.bookie_config = bookie_config
        self.journal_config = JournalConfig(journal_max_size=SIM_JOURNAL_MAX_SIZE,
                                            journal_prealloc_size=scenario.journal_prealloc_size)
        self.client_config = client_config
        self.bookies: dict[str, _BookieNode] = {}
        self.clients: dict[str, _ClientNode] = {}
        self.nodes: dict[str, _Node] = {}     # bookies and clients by name
        self.counts = WorldCounts()
        self.faults_enabled = True
        self._checkpoint_round = 0
        # (client, bookie) -> until when that connection is busy writing (_pull_sends).
        self._write_busy_until_ns: dict[tuple[str, str], int] = {}
        # Scenario tests drop chosen messages: filter(source, destination, message) -> deliver?
        self.message_filter: Callable[[str, str, object], bool] | None = None
        # What every pump with sends calls, bound once (a method looked up is a new object).
        self._post_at = self.loop.post_at
        self._fates_ns = self.network.fate_ns
        self.metastore = self._new_metastore(random.Random(seeds.getrandbits(64)))
        # Which durable writes are applied in slices, and how (_persisted).
        self._slice_rng = random.Random(seeds.getrandbits(64))
        if self.metastore.needs_keepalive:
            self.loop.call_later(self._ping_interval_ns(), self._keep_bookie_sessions_alive)

    @property
    def now_ns(self) -> int:
        return self.loop.now_ns

    def _new_metastore(self, rng: random.Random):
        if self.scenario.metastore_kind == "raftlite":
            return RaftMetastore(world=self, rng=rng)
        return SimMetastore(world=self)

    # -- building the cluster -------------------------------------------------------------

    def add_bookie(self, bookie_id: str) -> None:
        disk_rng = random.Random(self._disk_seed ^ (len(self.bookies) + 1) * 0x9E3779B97F4A7C15)
        node = _BookieNode(name=bookie_id, fs=SimFileSystem(rng=disk_rng, options=self.scenario.disk,
                                                            capacity_size=self.scenario.disk_capacity_size),
                           index=MemoryIndexStore(), monitor=DiskUsageMonitor())
        node.deliver, node.pump, node.on_timer = self._deliver_to_bookie, self._pump_bookie, self._on_bookie_timer
        self.bookies[bookie_id] = node
        self.nodes[bookie_id] = node
        self._start_bookie(node)

    def add_client(self, client_id: str, on_completed: Callable[[str, Completed, int], None]) -> Client:
        rng = random.Random(self._client_seed ^ (len(self.clients) + 1) * 0x9E3779B97F4A7C15)
        client = Client(client_id=client_id, rng=rng, config=self.client_config, layout=self.layout)
        node = _ClientNode(name=client_id, on_completed=on_completed, deliver=self._deliver_to_client,
                           pump=self._pump_client, on_timer=self._on_client_timer)
        node.set_core(client)
        self.clients[client_id] = self.nodes[client_id] = node
        return client

    def add_endpoint(self, name: str, core: object) -> None:
        """A node of an application process besides its ledger client (bksim.rpc's endpoint):
        listed with the clients, so the network, partitions, pauses and stop_client reach it as
        they reach them. `core` has receive, on_timer, on_send_failed, take_effects and
        next_deadline_ns."""
        node = _ClientNode(name=name, deliver=self._deliver_to_endpoint, pump=self._pump_endpoint,
                           on_timer=self._on_endpoint_timer)
        node.set_core(core)
        self.clients[name] = self.nodes[name] = node

    def stop_client(self, client_id: str) -> None:
        """The client's process is gone: nothing reaches it or leaves it any more."""
        node = self.clients[client_id]
        node.is_up = False
        node.incarnation += 1
        node.set_core(None)
        self._cancel_timer(node)
        self.trace.record(self.now_ns, "stop", client_id)

    def client_did_something(self, client_id: str) -> None:
        """The workload called into a client directly: perform what it asked for."""
        node = self.clients[client_id]
        pump = node.pump
        pump(node)

    # -- bookie lifecycle -----------------------------------------------------------------

    def _start_bookie(self, node: _BookieNode) -> None:
        try:
            stack = BookieStack(bookie_id=node.name, fs=node.fs, index=node.index,
                                bookie_config=self.bookie_config, journal_config=self.journal_config,
                                storage_config=SIM_STORAGE_CONFIG)
            registered = self._registered_cookie(node.name)
            replay = stack.start(now_ms=self.loop.now_ns // 1_000_000,
                                 new_instance_id=f"{node.name}-{self.rng.getrandbits(32):08x}",
                                 registered_cookie=registered)
            if registered is None:
                self.metastore.submit(node.name, ["op", None, Create(self.layout.cookie_path(node.name),
                                                                     stack.cookie.to_text().encode())], ignore_answer)
        except (JournalStartError, CookieError, MetastoreUnreachable):
            # A bookie refuses to start on a journal it cannot trust; an operator would look.
            # The faults the sim injects are read errors, so it tries again later.
            self.counts.restart_refusals += 1
            node.start_failure_count += 1
            retry_ns = self.scenario.restart_delay_mean_ns if self.faults_enabled else HEALED_RESTART_RETRY_NS
            self.loop.call_later(retry_ns, self._restart_bookie, node.name)
            return
        except DiskFullError:
            self.counts.disk_full_kills += 1
            self.loop.call_later(self.scenario.restart_delay_mean_ns, self._restart_bookie, node.name)
            return
        self.counts.journal_tails_repaired += len(replay.tail_problems)
        node.set_core(stack.core)
        node.stack = stack
        node.is_up = True
        node.incarnation += 1
        if node.session_id is not None:
            self.metastore.submit(node.name, ["expire", node.session_id], ignore_answer)
            node.session_id = None
        stack.core.set_readonly(node.monitor.is_readonly)
        self._open_bookie_session(node)
        self.trace.record(self.loop.now_ns, "start", node.name, node.incarnation)

    def _open_bookie_session(self, node: _BookieNode) -> None:
        """Open the bookie's session, then register with it (again later if the answer is lost)."""
        incarnation = node.incarnation

        def on_open(answer: object) -> None:
            if not node.is_up or node.incarnation != incarnation:
                return
            if answer is LOST:
                self.loop.call_later(METASTORE_RETRY_NS, self._open_bookie_session_again, node, incarnation)
                return
            node.session_id = answer
            self._register(node)

        self.metastore.submit(node.name, ["open", False], on_open)

    def _open_bookie_session_again(self, node: _BookieNode, incarnation: int) -> None:
        if node.is_up and node.incarnation == incarnation and node.session_id is None:
            self._open_bookie_session(node)

    def _ping_interval_ns(self) -> int:
        return self.scenario.metastore.session_timeout_ns // 3

    def _keep_bookie_sessions_alive(self) -> None:
        """Ping every live bookie's session, as its metastore client does; a bookie told that its
        session is gone opens a new one and registers again. A bookie whose registration is
        gone while its session lives registers again too, as a real one does when the watch on
        its own registration fires (bktransports.bookie_server._registration_loop): a delete
        queued by an earlier registration can land after a newer one, since raft-lite applies
        a write that was pending when its session expired (bk sim run --workload mixed --seed
        182 --duration 3 --liveness lost two bookies that way)."""
        if self.metastore_down_until_ns <= self.loop.now_ns:
            for name in sorted(self.bookies):
                node = self.bookies[name]
                if node.is_up and node.session_id is not None:
                    self.metastore.submit(name, ["ping", node.session_id],
                                          self._on_bookie_ping(node, node.incarnation, node.session_id))
                    path = self.layout.bookie_path(name, is_readonly=node.monitor.is_readonly)
                    if self.metastore.read_applied(Get(path)).code is MetaCode.NO_NODE:
                        self._register(node)
        self.loop.call_later(self._ping_interval_ns(), self._keep_bookie_sessions_alive)

    def _on_bookie_ping(self, node: _BookieNode, incarnation: int, session_id: int) -> Callable[[object], None]:
        def on_answer(answer: object) -> None:
            if answer is SESSION_GONE and node.is_up and node.incarnation == incarnation \
                    and node.session_id == session_id:
                node.session_id = None
                self.trace.record(self.loop.now_ns, "bookie-session-expired", node.name)
                self._open_bookie_session(node)
        return on_answer

    def _registered_cookie(self, bookie_id: str) -> Cookie | None:
        """The metastore copy of a bookie's cookie. (The simulated bookie reads the store
        directly; a real one goes through its metastore client.)"""
        result = self.metastore.read_applied(Get(self.layout.cookie_path(bookie_id)))
        if result.code is MetaCode.NO_NODE:
            return None
        if result.code is not MetaCode.OK:
            raise MetastoreUnreachable(f"{bookie_id}: cannot read its cookie ({result.code.name})")
        return Cookie.from_text(result.data.decode("utf-8", "replace"), path=self.layout.cookie_path(bookie_id))

    def _register(self, node: _BookieNode) -> None:
        """Register the bookie as writable or readonly (ephemeral, tied to its session; again
        later if the answer is lost). A bookie whose session is still opening registers once
        it is open."""
        session_id, incarnation = node.session_id, node.incarnation
        if session_id is None:
            return
        is_readonly = node.monitor.is_readonly
        stale = self.layout.bookie_path(node.name, is_readonly=not is_readonly)

        path = self.layout.bookie_path(node.name, is_readonly=is_readonly)
        create = ["op", session_id, Create(path, is_ephemeral=True)]

        def on_created(answer: object) -> None:
            if not (node.is_up and node.incarnation == incarnation and node.session_id == session_id):
                return
            if answer is LOST:
                self.loop.call_later(METASTORE_RETRY_NS, self._register_again, node, incarnation, session_id)
            elif answer.code is MetaCode.NODE_EXISTS:
                # A registration of this bookie's previous session that has not expired yet:
                # take it over, as bktransports.bookie_server does (it would vanish at expiry).
                self.metastore.submit(node.name, ["op", None, Delete(path)], ignore_answer)
                self.metastore.submit(node.name, create, on_created)

        if self.metastore.read_applied(Get(stale)).code is MetaCode.OK:
            self.metastore.submit(node.name, ["op", None, Delete(stale)], ignore_answer)
        self.metastore.submit(node.name, create, on_created)

    def _register_again(self, node: _BookieNode, incarnation: int, session_id: int) -> None:
        if node.is_up and node.incarnation == incarnation and node.session_id == session_id:
            self._register(node)

    def _monitor_disk(self, node: _BookieNode) -> None:
        used_size, total_size = node.fs.usage()
        change = node.monitor.observe(used_size=used_size, total_size=total_size)
        if change is not None:
            node.core.set_readonly(change)
            self._register(node)
            self.counts.readonly_transitions += 1
            self.trace.record(self.loop.now_ns, "readonly" if change else "writable", node.name)

    def start_checkpoints(self) -> None:
        self.loop.call_later(CHECKPOINT_INTERVAL_NS, self._checkpoint_all)

    def _checkpoint_all(self) -> None:
        self._checkpoint_round += 1
        for name in sorted(self.bookies):
            node = self.bookies[name]
            if node.is_up and node.core is not None and node.paused_until_ns <= self.loop.now_ns:
                if self._checkpoint_round % GC_EVERY_CHECKPOINTS == 0:
                    self.collect_garbage(node)
                self.checkpoint(node)
                if node.core is not None:
                    self._monitor_disk(node)
        self.loop.call_later(CHECKPOINT_INTERVAL_NS, self._checkpoint_all)

    def collect_garbage(self, node: _BookieNode) -> None:
        """One GC round on a bookie. (The simulated bookie reads the metastore directly here;
        the real one goes through its metastore client.)"""
        def list_children(path: str):
            result = self.metastore.read_applied(Children(path))
            return list(result.children) if result.code is MetaCode.OK else None

        report = collect_garbage(node.stack.storage, self.layout, list_children)
        self.counts.ledgers_collected += len(report.deleted_ledger_ids)
        if report.deleted_ledger_ids:
            self.trace.record(self.loop.now_ns, "gc", node.name, *report.deleted_ledger_ids)
            self.checkpoint(node)   # make the deletions durable before compacting around them
        config = CompactionConfig()
        is_major = self._checkpoint_round % (GC_EVERY_CHECKPOINTS * MAJOR_EVERY_GC_ROUNDS) == 0
        threshold = config.major_compaction_threshold if is_major else config.minor_compaction_threshold
        try:
            compaction = Compactor(storage=node.stack.storage, config=config).run(threshold=threshold)
        except DiskFullError:
            self._on_ledger_disk_full(node)
            return
        self.counts.log_bytes_reclaimed += compaction.bytes_reclaimed
        self.counts.entries_compacted += compaction.entries_moved_count
        if compaction.bytes_reclaimed:
            self.trace.record(self.loop.now_ns, "compacted", node.name, compaction.bytes_reclaimed)

    def checkpoint(self, node: _BookieNode) -> None:
        try:
            mark = node.stack.checkpoint()
        except DiskFullError:
            self._on_ledger_disk_full(node)
            return
        self.counts.checkpoints += 1
        self.trace.record_plain((self.loop.now_ns, "checkpoint", node.name, mark.journal_id, mark.position))

    def _on_ledger_disk_full(self, node: _BookieNode) -> None:
        """A full ledger disk turns the bookie readonly (entries stay in the write cache and the
        journal; the next checkpoint tries again); only the journal failing is fatal."""
        self.counts.checkpoints_refused_full += 1
        if node.monitor.on_disk_full():
            node.core.set_readonly(True)
            self._register(node)
            self.counts.readonly_transitions += 1

    def crash_bookie(self, bookie_id: str, *, restart_after_ns: int | None) -> None:
        node = self.bookies[bookie_id]
        if not node.is_up:
            return
        node.is_up = False
        node.set_core(None)
        node.incarnation += 1
        node.crash_count += 1
        self.counts.crashes += 1
        self._cancel_timer(node)
        node.stack = None
        node.persisted_backlog = []
        node.journal_durable_at_ns = 0
        node.fs.crash()
        session_id = node.session_id
        self.loop.call_later(self.scenario.metastore.session_timeout_ns, self._expire_session, node.name, session_id)
        self.trace.record(self.now_ns, "crash", bookie_id)
        if restart_after_ns is not None:
            self.loop.call_later(restart_after_ns, self._restart_bookie, bookie_id)

    def _expire_session(self, bookie_id: str, session_id: int | None) -> None:
        node = self.bookies[bookie_id]
        if session_id is not None and node.session_id == session_id:
            self.metastore.submit(bookie_id, ["expire", session_id], ignore_answer)
            node.session_id = None

    def _restart_bookie(self, bookie_id: str) -> None:
        node = self.bookies[bookie_id]
        if node.is_up and node.core is not None:
            return
        self.counts.restarts += 1
        self._start_bookie(node)

    def pause_node(self, name: str, duration_ns: int) -> None:
        node = self.nodes[name]
        node.paused_until_ns = max(node.paused_until_ns, self.now_ns + duration_ns)
        self.counts.pauses += 1
        self.trace.record(self.now_ns, "pause", name, duration_ns)

    def heal(self) -> None:
        """End every fault: partitions heal, the metastore comes back, disks stop misbehaving,
        dead bookies restart."""
        self.faults_enabled = False
        self.network.heal(end_random_faults=True)
        self.metastore_down_until_ns = 0
        self.metastore_cut_off_until_ns.clear()
        self.metastore.heal()
        for name in sorted(self.bookies):
            node = self.bookies[name]
            node.fs.heal()
            # An operator replaces a small disk with a large one; the monitor notices at its next
            # reading. (A bookie whose journal keeps filling a small disk cannot checkpoint, so its
            # LastLogMark cannot move and its journals cannot be deleted: no progress without space.)
            node.fs.capacity_size = max(node.fs.capacity_size, HEALED_DISK_CAPACITY_SIZE)
            node.paused_until_ns = 0
            if not node.is_up:
                self._restart_bookie(name)

    # -- inputs ---------------------------------------------------------------------------

    def _deliver(self, node: _Node, source: str, message: object, incarnation: int) -> None:
        """`message` from `source` arrives at `node` (the node itself, not its name: no lookup),
        sent to its incarnation `incarnation`."""
        now_ns = self.loop.now_ns
        if not node.is_up or node.incarnation != incarnation:
            # The connection to a dead or restarted process is refused or reset: a client hears
            # of it (TCP tells it); a bookie's answer to a client that is gone is just lost.
            self.counts.messages_dropped_down += 1
            sender = self.clients.get(source)
            if sender is not None and sender.is_up and sender.paused_until_ns <= now_ns:
                self.trace.record(now_ns, "refused", source, node.name)
                sender.core.on_send_failed(message, destination=node.name, now_ns=now_ns)
                pump = sender.pump
                pump(sender)
            return
        if node.paused_until_ns > now_ns:
            self.loop.call_at(node.paused_until_ns, node.deliver, node, source, message, incarnation)
            return
        try:
            request_id = message.request_id
        except AttributeError:              # (an ErrorResponse has none; getattr would cost a call)
            request_id = 0
        self.trace.record_plain((now_ns, "recv", node.name, source, message.TAG, request_id))
        node.core.receive(message, source=source, now_ns=now_ns)
        pump = node.pump
        pump(node)

    def _on_persisted(self, node: _BookieNode, token: int, incarnation: int) -> None:
        """The journal write `token` of `node` (the node itself: no lookup) is durable."""
        if not node.is_up or node.incarnation != incarnation:
            return
        now_ns = self.loop.now_ns
        backlog = node.persisted_backlog
        if node.paused_until_ns > now_ns or backlog or node.core.is_applying:
            if not backlog and not node.core.is_applying:
                self.loop.call_at(node.paused_until_ns, self._on_persisted_backlog, node, incarnation)
            backlog.append(token)       # (a write applied in slices drains it once done)
            return
        self._persisted(node, token, now_ns, incarnation)
        pump = node.pump
        pump(node)

    def _on_persisted_backlog(self, node: _BookieNode, incarnation: int) -> None:
        """A paused node resumed: the writes that became durable meanwhile, in order."""
        if not node.is_up or node.incarnation != incarnation:
            return
        now_ns = self.loop.now_ns
        if node.paused_until_ns > now_ns:        # paused again meanwhile
            self.loop.call_at(node.paused_until_ns, self._on_persisted_backlog, node, incarnation)
            return
        self._persist_backlog(node, now_ns, incarnation)
        pump = node.pump
        pump(node)

    def _persist_backlog(self, node: _BookieNode, now_ns: int, incarnation: int) -> None:
        """Tell the core of the writes waiting in the backlog, in order, until one of them is
        applied in slices (the rest wait for it)."""
        backlog = node.persisted_backlog
        while backlog and not node.core.is_applying:
            self._persisted(node, backlog.pop(0), now_ns, incarnation)

    def _persisted(self, node: _BookieNode, token: int, now_ns: int, incarnation: int) -> None:
        """Mostly in two inputs, as a server does for a group it syncs itself: the first gives
        the adds' answers, the second applies the records. The caller's pump then sends the
        early answers first, in the order the server writes them before the apply (a message
        posted here reaches nobody sooner for being posted between the two). A drawn share
        of the writes is applied in slices instead (_apply_slice)."""
        node.stack.sync_journal(token)
        self.trace.record_plain((now_ns, "synced", node.name, token))
        core = node.core
        rng = self._slice_rng
        if rng.random() >= APPLIED_IN_SLICES_SHARE:
            core.answer_persisted(token, now_ns)
            core.apply_persisted(now_ns)
            return
        core.begin_persisted(token)
        self._apply_slice(node, incarnation, rng.choice(SLICE_RECORD_COUNTS))

    def _apply_slice(self, node: _BookieNode, incarnation: int, record_count_max: int) -> None:
        """Apply the next record_count_max records of the write being applied in slices; the
        next slice comes a drawn moment later (inputs that arrive meanwhile come first), and
        once the write is applied, the writes durable meanwhile."""
        if not node.is_up or node.incarnation != incarnation:
            return
        now_ns = self.loop.now_ns
        if node.paused_until_ns > now_ns:
            self.loop.call_at(node.paused_until_ns, self._apply_slice_step, node, incarnation, record_count_max)
            return
        core = node.core
        core.apply_persisted(now_ns, record_count_max=record_count_max)
        if core.is_applying:
            gap_ns = self._slice_rng.randrange(SLICE_GAP_MAX_NS + 1)
            self.loop.call_at(now_ns + gap_ns, self._apply_slice_step, node, incarnation, record_count_max)
        else:
            self._persist_backlog(node, now_ns, incarnation)

    def _apply_slice_step(self, node: _BookieNode, incarnation: int, record_count_max: int) -> None:
        """A later slice (_apply_slice), then what it asked for."""
        self._apply_slice(node, incarnation, record_count_max)
        if node.is_up and node.incarnation == incarnation:
            pump = node.pump
            pump(node)

    def _on_timer(self, node: _Node, incarnation: int) -> None:
        node.timer_handle = None
        node.timer_at_ns = None
        if not node.is_up or node.incarnation != incarnation:
            return
        now_ns = self.loop.now_ns
        if node.paused_until_ns > now_ns:
            self._arm_timer_at(node, node.paused_until_ns)
            return
        node.core.on_timer(now_ns)
        pump = node.pump
        pump(node)

    def _metadata_result(self, client_id: str, token: int, result: MetaResult) -> None:
        node = self.clients[client_id]
        if not node.is_up:
            return
        if node.paused_until_ns > self.loop.now_ns:
            self.loop.call_at(node.paused_until_ns, self._metadata_result, client_id, token, result)
            return
        self.trace.record_plain((self.loop.now_ns, "meta", client_id, token, int(result.code)))
        node.core.on_metadata_result(token, result, now_ns=self.loop.now_ns)
        pump = node.pump
        pump(node)

    # -- effects --------------------------------------------------------------------------

    def _pump(self, node: _Node) -> None:
        """Perform what the node's core asked for until it asks nothing more, then arm its timer.

        Runs after every input, so it is written for speed: sends (nearly every effect) are
        performed here without a call per effect; the rest go through _perform. Only _perform
        can call back into a core (a Completed effect runs workload code), so after a round of
        sends alone the core has nothing new to say and is not asked again. What every round
        needs is looked up once per pump, and only by a pump that has effects (most inputs of a
        bookie leave it none)."""
        if node.core is None:
            return
        take_effects = node.take_effects
        effects = take_effects()
        if effects:
            now_ns = self.loop.now_ns
            name = node.name
            nodes = self.nodes
            fates_ns = self._fates_ns
            post_at = self._post_at
            counts = self.counts
            round_count = 0
            while True:
                round_count += 1
                if round_count > PUMP_ROUND_COUNT_MAX:
                    raise AssertionError(f"{name}: effects kept coming after {PUMP_ROUND_COUNT_MAX} rounds")
                counts.messages_sent += len(effects)      # less those that turn out not to be sends
                message_filter = self.message_filter
                is_sends_only = True
                for effect in effects:
                    if type(effect) is Send:
                        destination = effect.destination
                        target = nodes.get(destination)
                        if target is None:
                            continue
                        message = effect.message
                        if message_filter is not None and not message_filter(name, destination, message):
                            continue
                        fate_ns = fates_ns(name, destination, now_ns)
                        if type(fate_ns) is int:        # one copy: nearly always
                            post_at(now_ns + fate_ns, target.deliver, target, name, message, target.incarnation)
                        elif fate_ns is not None:       # duplicated
                            self._post_copies(fate_ns, target, name, message)
                    else:
                        counts.messages_sent -= 1
                        is_sends_only = False
                        self._perform(node, effect)
                        message_filter = self.message_filter      # _perform ran code that may set it
                if is_sends_only or node.core is None:
                    break
                take_effects = node.take_effects
                effects = take_effects()
                if not effects:
                    break
            if node.core is None:
                return
        # Keep the node's timer at the core's next deadline.
        next_deadline_ns = node.next_deadline_ns
        deadline_ns = next_deadline_ns()
        if deadline_ns is None:
            if node.timer_handle is not None:
                self._cancel_timer(node)
        elif deadline_ns != node.timer_at_ns:
            self._arm_timer_at(node, deadline_ns)

    def _post_copies(self, delays_ns: list[int], target: _Node, source: str, message: object) -> None:
        """The copies of a duplicated message, each after its own delay (see _deliver_copy)."""
        copies = _Copies()
        now_ns = self.loop.now_ns
        for delay_ns in delays_ns:
            self._post_at(now_ns + delay_ns, self._deliver_copy, copies, target, source, message, target.incarnation)

    def _deliver_copy(self, copies: "_Copies", node: _Node, source: str, message: object, incarnation: int) -> None:
        """One copy of a duplicated message. The first to arrive is delivered, or refused, as any
        message is. A later one is delivered if its node is still up, and otherwise dropped
        without a word: TCP never refuses a retransmission of what has already arrived, and
        whether the first copy was taken or refused, the sender has heard all it will (the
        sim's RPC took a refused duplicate of a request that had been carried out for a request
        never delivered: the table workload's seed 288 recorded a put as certainly not done,
        and then read its value)."""
        copies.arrived_count += 1
        if copies.arrived_count > 1 and (not node.is_up or node.incarnation != incarnation):
            self.counts.messages_dropped_down += 1
            return
        node.deliver(node, source, message, incarnation)

    _deliver_to_bookie = _own_copy(_deliver)
    _deliver_to_client = _own_copy(_deliver)
    _on_bookie_timer = _own_copy(_on_timer)
    _on_client_timer = _own_copy(_on_timer)
    _pump_bookie = _own_copy(_pump)
    _pump_client = _own_copy(_pump)
    _deliver_to_endpoint = _own_copy(_deliver)
    _on_endpoint_timer = _own_copy(_on_timer)
    _pump_endpoint = _own_copy(_pump)

    def _perform(self, node: _Node, effect: object) -> None:
        now_ns = self.loop.now_ns
        kind = type(effect)
        if kind is Send:
            self.counts.messages_sent += 1
            target = self.nodes.get(effect.destination)
            if target is None:
                return
            if self.message_filter is not None and not self.message_filter(node.name, effect.destination, effect.message):
                return
            delays_ns = self.network.delivery_delays_ns(source=node.name, destination=effect.destination,
                                                        now_ns=now_ns)
            if len(delays_ns) > 1:
                self._post_copies(delays_ns, target, node.name, effect.message)
            elif delays_ns:
                self.loop.post_at(now_ns + delays_ns[0], target.deliver, target, node.name, effect.message,
                                  target.incarnation)
        elif kind is JournalWrite:
            self.counts.journal_writes += 1
            try:
                node.stack.write_journal(effect, now_ms=now_ns // 1_000_000)
            except DiskFullError:
                self.counts.disk_full_kills += 1
                self.crash_bookie(node.name, restart_after_ns=self.scenario.restart_delay_mean_ns)
                return
            durable_at_ns = now_ns + self.scenario.disk.write_latency_ns + node.fs.sync_latency_ns()
            if durable_at_ns < node.journal_durable_at_ns:
                durable_at_ns = node.journal_durable_at_ns
            node.journal_durable_at_ns = durable_at_ns
            self.loop.post_at(durable_at_ns, self._on_persisted, node, effect.token, node.incarnation)
        elif kind is MetadataCall:
            self._call_metastore(node.name, effect)
        elif kind is Completed:
            on_completed = node.on_completed
            on_completed(node.name, effect, now_ns)
        elif kind is HeldSends:
            self._pull_sends(node, effect.destinations)
        else:
            raise AssertionError(f"unknown effect {effect!r}")

    def _pull_sends(self, node: _ClientNode, destinations: list[str]) -> None:
        """A client core holds sends for these bookies: pull them now, as the real driver does
        for a connection that can write, except where the connection is still busy writing
        what it was last given (scenario.client_write_busy_ns): those are pulled once it is
        done, with whatever the core held for them meanwhile."""
        now_ns = self.loop.now_ns
        busy_ns = self.scenario.client_write_busy_ns
        if not busy_ns:
            node.core.pull_sends(destinations, now_ns=now_ns)
            return
        busy_until_ns = self._write_busy_until_ns
        ready = []
        for destination in destinations:
            until_ns = busy_until_ns.get((node.name, destination), 0)
            if until_ns > now_ns:
                self.loop.call_at(until_ns, self._pull_when_written, node, destination)
            else:
                busy_until_ns[node.name, destination] = now_ns + busy_ns
                ready.append(destination)
        if ready:
            node.core.pull_sends(ready, now_ns=now_ns)

    def _pull_when_written(self, node: _ClientNode, destination: str) -> None:
        if not node.is_up:           # its process stopped meanwhile
            return
        now_ns = self.loop.now_ns
        if node.paused_until_ns > now_ns:
            self.loop.call_at(node.paused_until_ns, self._pull_when_written, node, destination)
            return
        self._write_busy_until_ns[node.name, destination] = now_ns + self.scenario.client_write_busy_ns
        node.core.pull_sends([destination], now_ns=now_ns)
        pump = node.pump
        pump(node)

    def draw_metastore_answer_lost(self) -> bool:
        """Whether the answer to an applied op is lost on its way back."""
        return self.faults_enabled and self._metastore_rng.random() < self.scenario.metastore.response_loss_probability

    def metastore_latency_ns(self) -> int:
        options = self.scenario.metastore
        extra = options.latency_mean_ns - options.latency_min_ns
        return options.latency_min_ns + (int(self._metastore_rng.expovariate(1 / extra)) if extra > 0 else 0)

    def _call_metastore(self, client_id: str, call: MetadataCall) -> None:
        self.counts.metadata_calls += 1
        if self.metastore_down_until_ns > self.loop.now_ns:
            self._answer_lost(client_id, call.token, min(self.metastore_down_until_ns - self.loop.now_ns,
                                                         self.scenario.metastore.connection_timeout_ns))
            return
        self.loop.call_later(self.metastore_latency_ns(), self._apply_metadata, client_id, call)

    def _apply_metadata(self, client_id: str, call: MetadataCall) -> None:
        if self.metastore_down_until_ns > self.loop.now_ns:
            self._answer_lost(client_id, call.token, 0)
            return
        self.metastore.submit(client_id, ["op", None, call.op],
                              lambda answer: self._metadata_answered(client_id, call, answer))

    def _metadata_answered(self, client_id: str, call: MetadataCall, result: object) -> None:
        if result is LOST:
            self._answer_lost(client_id, call.token, self.metastore_latency_ns())
            return
        if self.draw_metastore_answer_lost():
            self._answer_lost(client_id, call.token, self.metastore_latency_ns())
            return
        self.loop.call_later(self.metastore_latency_ns(), self._metadata_result, client_id, call.token, result)

    def _answer_lost(self, client_id: str, token: int, delay_ns: int) -> None:
        self.counts.metadata_connection_losses += 1
        self.loop.call_later(max(delay_ns, self.scenario.metastore.latency_min_ns), self._metadata_result,
                             client_id, token, MetaResult(MetaCode.CONNECTION_LOSS))

    # -- timers ---------------------------------------------------------------------------

    def _arm_timer_at(self, node: _Node, at_ns: int) -> None:
        loop = self.loop
        if node.timer_handle is not None:
            loop.cancel(node.timer_handle)
        node.timer_at_ns = at_ns
        node.timer_handle = loop.call_at(at_ns if at_ns > loop.now_ns else loop.now_ns, node.on_timer, node,
                                         node.incarnation)

    def _cancel_timer(self, node: _Node) -> None:
        if node.timer_handle is not None:
            self.loop.cancel(node.timer_handle)
        node.timer_handle = None
        node.timer_at_ns = None
