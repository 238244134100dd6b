"""RaftMembers: raft-lite nodes (bkmetastore.raftlite.core, unchanged) driven on an event loop.

The driver does what transports/raftlite_server does for a real member, with the simulator's
faults: effects are performed in order; Save* effects are durable at once (a crash loses
nothing else, as fsync before the next effect gives); a Send reaches its peer after a delay
drawn from the rng, unless the link is blocked or the draw loses it, or the peer restarted since
(its connection broke). Replies and watch changes go to the owner's callbacks:

    on_reply(member_id, reply)        a Reply effect (the token is the owner's)
    on_changed(member_id, changes)    a Changed effect: paths the member's applied commands touched

Used by the register tests of the raft core (bksim.raftlite_world) and by the simulated cluster's
raft-lite metastore (bksim.raftlite_metastore).
"""

from __future__ import annotations

import copy
import random

import msgpack
from dataclasses import dataclass
from typing import Callable

from bkmetastore.raftlite.core import (
    Changed, PersistentState, RaftConfig, RaftNode, Reply, SaveHardState, SaveLog, SaveSnapshot, Send,
)
from bksim.loop import EventLoop

MS = 1_000_000


@dataclass
class RaftMember:
    durable: PersistentState
    core: RaftNode | None = None
    incarnation: int = 0
    timer_handle: object = None
    timer_at_ns: int | None = None


class RaftMembers:
    def __init__(self, *, loop: EventLoop, rng: random.Random, ids: list[int], config: RaftConfig,
                 on_reply: Callable[[int, Reply], None], on_changed: Callable[[int, list], None] | None = None,
                 delay_ns: Callable[[], int] | None = None, loss_probability: float = 0.0,
                 invariants_every: int = 1) -> None:
        """invariants_every: check a member's invariants after every n-th input it handles (they
        walk its whole log)."""
        self.loop = loop
        self.rng = rng
        self.ids = list(ids)
        self.config = config
        self.nodes = {i: RaftMember(PersistentState()) for i in self.ids}
        # Links cut (source, destination); until when (None: until heal()).
        self.blocked: dict[tuple[int, int], int | None] = {}
        self.loss_probability = loss_probability
        self._on_reply = on_reply
        self._on_changed = on_changed
        self._delay_ns = delay_ns or (lambda: MS + self.rng.randrange(4 * MS))
        # The highest index any member has seen committed (crashed ones included).
        self.highest_commit_index = 0
        self._invariants_every = invariants_every
        self._inputs_count = 0

    # -- membership faults ----------------------------------------------------------------------

    def start_all(self) -> None:
        for i in self.ids:
            self._start(i)

    def _start(self, node_id: int) -> None:
        node = self.nodes[node_id]
        node.incarnation += 1
        node.core = RaftNode(node_id=node_id, peer_ids=self.ids, rng=random.Random(self.rng.getrandbits(32)),
                             config=self.config, restored=copy.deepcopy(node.durable), now_ns=self.loop.now_ns)
        self._arm(node_id)

    def crash(self, node_id: int) -> None:
        node = self.nodes[node_id]
        node.core = None
        node.incarnation += 1
        if node.timer_handle is not None:
            self.loop.cancel(node.timer_handle)
            node.timer_handle = node.timer_at_ns = None

    def restart(self, node_id: int) -> None:
        if self.nodes[node_id].core is None:
            self._start(node_id)

    def is_up(self, node_id: int) -> bool:
        return self.nodes[node_id].core is not None

    def partition(self, group: set[int], *, until_ns: int | None = None) -> None:
        """Cut every link between `group` and the rest (both ways)."""
        for a in self.ids:
            for b in self.ids:
                if (a in group) != (b in group):
                    self.blocked[a, b] = until_ns

    def heal(self) -> None:
        self.blocked.clear()

    def is_blocked(self, source: int, destination: int) -> bool:
        if (source, destination) not in self.blocked:
            return False
        until_ns = self.blocked[source, destination]
        if until_ns is not None and until_ns <= self.loop.now_ns:
            del self.blocked[source, destination]
            return False
        return True

    # -- who leads ------------------------------------------------------------------------------

    def leaders(self) -> list[int]:
        """Every member that believes it leads (a deposed one cut off from the rest included)."""
        return [i for i, n in self.nodes.items() if n.core is not None and n.core.is_leader]

    def leader(self) -> int | None:
        """The leader of the highest term, if any member leads."""
        leaders = self.leaders()
        return max(leaders, key=lambda i: self.nodes[i].core.term) if leaders else None

    def core(self, node_id: int) -> RaftNode | None:
        return self.nodes[node_id].core

    def up_to_date(self) -> RaftNode | None:
        """A live member that has applied every command any member saw committed, so every
        acknowledged one (None: no live member has); the one that applied the most."""
        cores = [n.core for n in self.nodes.values()
                 if n.core is not None and n.core.last_applied >= self.highest_commit_index]
        return max(cores, key=lambda c: c.last_applied) if cores else None

    # -- driving -------------------------------------------------------------------------------

    def perform(self, node_id: int) -> None:
        """Perform the effects a member has after an input (call after propose, read...)."""
        node = self.nodes[node_id]
        incarnation = node.incarnation
        for effect in node.core.take_effects():
            kind = type(effect)
            if kind is Send:
                if self.is_blocked(node_id, effect.destination) or (
                        self.loss_probability and self.rng.random() < self.loss_probability):
                    continue
                target = self.nodes[effect.destination]
                self.loop.call_at(self.loop.now_ns + self._delay_ns(), self._deliver, effect.destination,
                                  target.incarnation, node_id, message_over_the_wire(effect.message))
            elif kind is SaveHardState:
                node.durable.term, node.durable.voted_for = effect.term, effect.voted_for
            elif kind is SaveLog:
                # In place: a member appends one entry at a time to a log of hundreds.
                log = node.durable.log
                del log[max(0, effect.first_index - node.durable.snapshot_index - 1):]
                log.extend(over_the_wire(effect.entries))
            elif kind is SaveSnapshot:
                durable = node.durable
                drop = effect.index - durable.snapshot_index
                durable.log = durable.log[drop:] if drop <= len(durable.log) else []
                durable.snapshot_index, durable.snapshot_term = effect.index, effect.term
                durable.snapshot_state = copy.deepcopy(effect.state)
            elif kind is Reply:
                self._on_reply(node_id, effect)
            elif kind is Changed:
                if self._on_changed is not None:
                    self._on_changed(node_id, effect.changes)
            if node.core is None or node.incarnation != incarnation:
                return                  # a callback crashed it: the rest never happens
        self._inputs_count += 1
        if self._inputs_count % self._invariants_every == 0:
            node.core.invariants()
        if node.core.commit_index > self.highest_commit_index:
            self.highest_commit_index = node.core.commit_index
        self._arm(node_id)

    def _arm(self, node_id: int) -> None:
        """One timer per member, at or before the core's next deadline. A deadline that moves
        later (a follower hearing its leader) leaves the timer where it is: when it fires early
        it is set again for the new deadline, which costs less than moving it on every message."""
        node = self.nodes[node_id]
        at_ns = max(node.core.next_deadline_ns(), self.loop.now_ns)
        if node.timer_handle is not None:
            if node.timer_at_ns <= at_ns:
                return
            self.loop.cancel(node.timer_handle)
        node.timer_at_ns = at_ns
        node.timer_handle = self.loop.call_at(at_ns, self._timer, node_id, node.incarnation)

    def _timer(self, node_id: int, incarnation: int) -> None:
        node = self.nodes[node_id]
        if node.core is None or node.incarnation != incarnation:
            return
        node.timer_handle = node.timer_at_ns = None
        if node.core.next_deadline_ns() > self.loop.now_ns:
            self._arm(node_id)                  # early: the deadline moved on meanwhile
            return
        node.core.on_timer(self.loop.now_ns)
        self.perform(node_id)

    def _deliver(self, node_id: int, incarnation: int, source: int, message: list) -> None:
        node = self.nodes[node_id]
        if node.core is None or node.incarnation != incarnation or self.is_blocked(source, node_id):
            return
        node.core.receive(source, message, self.loop.now_ns)
        self.perform(node_id)


# One packer for every message (msgpack.packb makes a new one per call, which costs as much as
# packing a heartbeat).
_PACKER = msgpack.Packer(use_bin_type=True)


def over_the_wire(value: list) -> list:
    """A copy of `value` as a peer decodes it (msgpack, as bkmetastore.raftlite.connection
    frames it): nothing of the sender's lists is shared."""
    return msgpack.unpackb(_PACKER.pack(value), raw=False, strict_map_key=False)


def message_over_the_wire(message: list) -> list:
    """over_the_wire for a message a member sends. One of plain ints, bools and strings (votes,
    answers, heartbeats: most of them) decodes to itself, and the core never touches a message
    it sent, so it goes as it is."""
    kind = message[0]
    if kind in _FLAT_KINDS or kind == "append" and not message[5]:
        return message
    return over_the_wire(message)


_FLAT_KINDS = frozenset(("append_r", "vote", "vote_r"))
