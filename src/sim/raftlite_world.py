"""RaftWorld: raft-lite nodes on the simulator's event loop, with a seeded lossy network,
partitions and crashes. Durable state is what the nodes' Save* effects wrote (a crash loses
nothing else); clients submit commands to whoever is leader and record a history.

Used by tests of the raft core (election, log conflicts, snapshots, leader failure) and by the
linearizability check of compare-and-set histories under partitions.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bkcore.metaops import Create, Get, MetaCode, SetData, op_to_list, result_from_list
from bkmetastore.raftlite.core import RaftConfig, Reply
from bksim.linearizability import check_linearizable
from bksim.loop import EventLoop
from bksim.raftlite_members import RaftMembers

MS = 1_000_000


@dataclass
class HistoryOp:
    """One client operation: kind "cas" (expected version, new data) or "get"."""
    kind: str
    args: tuple
    invoked_ns: int
    completed_ns: int | None = None
    result: tuple | None = None      # cas: (ok, new_version); get: (data, version); None: unknown


@dataclass
class RaftWorld:
    seed: int
    node_count: int = 3
    loss_probability: float = 0.0
    config: RaftConfig = field(default_factory=lambda: RaftConfig(snapshot_threshold=50))

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.loop = EventLoop()
        self.ids = list(range(1, self.node_count + 1))
        self.replies: dict[object, Reply] = {}
        self._reply_times: dict[object, int] = {}
        self.history: list[HistoryOp] = []
        self.applied_changes = 0
        self.members = RaftMembers(loop=self.loop, rng=self.rng, ids=self.ids, config=self.config,
                                   on_reply=self._on_reply, on_changed=self._on_changed,
                                   loss_probability=self.loss_probability)
        self.nodes = self.members.nodes
        self.members.start_all()

    # -- nodes ----------------------------------------------------------------------------------

    def crash(self, node_id: int) -> None:
        self.members.crash(node_id)

    def restart(self, node_id: int) -> None:
        self.members.restart(node_id)

    def partition(self, group: set[int]) -> None:
        """Cut every link between `group` and the rest (both ways)."""
        self.members.partition(group)

    def heal(self) -> None:
        self.members.heal()

    def leader(self) -> int | None:
        return self.members.leader()

    def _perform(self, node_id: int) -> None:
        self.members.perform(node_id)

    def _on_reply(self, node_id: int, reply: Reply) -> None:
        self.replies[reply.token] = reply
        self._reply_times[reply.token] = self.loop.now_ns

    def _on_changed(self, node_id: int, changes: list) -> None:
        self.applied_changes += len(changes)

    # -- driving -------------------------------------------------------------------------------

    def run_for(self, duration_ns: int) -> None:
        self.loop.run_until(self.loop.now_ns + duration_ns)

    def wait_for_leader(self, timeout_ns: int = 10_000 * MS) -> int:
        deadline = self.loop.now_ns + timeout_ns
        while self.loop.now_ns < deadline:
            leader = self.leader()
            if leader is not None and self.nodes[leader].core.term_at(self.nodes[leader].core.commit_index) \
                    == self.nodes[leader].core.term:
                return leader
            self.run_for(10 * MS)
        raise AssertionError(f"no leader within {timeout_ns / 1e9:g}s (seed {self.seed})")

    # -- clients -------------------------------------------------------------------------------

    def submit(self, command: list, *, timeout_ns: int = 2_000 * MS) -> Reply | None:
        """Propose at the current leader and wait for the answer (None: none came)."""
        leader = self.leader()
        if leader is None:
            return None
        token = ("cmd", self.rng.getrandbits(64))
        self.nodes[leader].core.propose(token, command, self.loop.now_ns)
        self._perform(leader)
        return self._await(token, timeout_ns)

    def read(self, op, *, timeout_ns: int = 2_000 * MS) -> Reply | None:
        leader = self.leader()
        if leader is None:
            return None
        token = ("read", self.rng.getrandbits(64))
        self.nodes[leader].core.read(token, op, self.loop.now_ns)
        self._perform(leader)
        return self._await(token, timeout_ns)

    def _await(self, token, timeout_ns: int) -> Reply | None:
        deadline = self.loop.now_ns + timeout_ns
        while token not in self.replies and self.loop.now_ns < deadline:
            self.run_for(MS)
        reply = self.replies.pop(token, None)
        return reply if reply is not None and not reply.error else None

    # -- a register for linearizability checks -------------------------------------------------

    REGISTER = "/register"

    def create_register(self) -> None:
        self.wait_for_leader()
        reply = self.submit(["op", 0, op_to_list(Create(self.REGISTER, b"init"))])
        assert reply is not None and result_from_list(reply.result).code is MetaCode.OK

    def start_register_op(self, kind: str, args: tuple = ()) -> None:
        """Start a cas or get at the current leader without waiting (concurrent clients)."""
        op = HistoryOp(kind, args, self.loop.now_ns)
        self.history.append(op)
        # Any node that believes it leads: a deposed leader cut off from the rest is a fair
        # target too, and must not answer with stale data.
        leaders = self.members.leaders()
        if not leaders:
            return                               # never sent: unknown outcome, harmlessly
        leader = self.rng.choice(leaders)
        token = ("register", len(self.history) - 1)
        core = self.nodes[leader].core
        if kind == "cas":
            core.propose(token, ["op", 0, op_to_list(SetData(self.REGISTER, args[1], args[0]))], self.loop.now_ns)
        else:
            core.read(token, Get(self.REGISTER), self.loop.now_ns)
        self._perform(leader)

    def collect_register_results(self) -> None:
        for index, op in enumerate(self.history):
            reply = self.replies.pop(("register", index), None)
            if reply is None or reply.error:
                continue
            result = result_from_list(reply.result)
            op.completed_ns = self._reply_times.get(("register", index), self.loop.now_ns)
            op.result = ((result.code is MetaCode.OK, result.version) if op.kind == "cas"
                         else (result.data, result.version))


def check_register_linearizable(history: list[HistoryOp], initial: tuple = (b"init", 0)) -> bool:
    """Is there an order of the operations, each placed between its invocation and its
    completion (unanswered ones: any time after invocation, or never), that one register
    with versioned compare-and-set explains? (bksim.linearizability's Wing-Gong search.)"""
    return check_linearizable([op for op in history if op.result is not None or op.kind == "cas"], initial,
                              _register_step)


def _register_step(state: tuple, op: HistoryOp) -> tuple | None:
    data, version = state
    if op.kind == "get":
        return state if op.result is None or op.result == state else None
    expected, new_data = op.args
    succeeds = expected == version
    if op.result is not None and op.result != ((True, version + 1) if succeeds else (False, version)):
        return None
    return (new_data, version + 1) if succeeds else state
