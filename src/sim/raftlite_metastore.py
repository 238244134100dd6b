"""RaftMetastore: the simulated cluster's metastore as a raft-lite cluster of three members.

The members run bkmetastore.raftlite.core unchanged (driven by bksim.raftlite_members); this module
plays the part of transports/raftlite_server for the world's callers (bookies, ledger clients,
application processes), with the same rules:

- a caller talks to one member at a time; only a member that believes it leads serves it (a
  deposed leader cut off from the others still does, as a real one would). A member that does
  not lead refuses the request unprocessed: the connection drops (every watch the caller set
  there fires) and the request goes to a member that leads, as the real client takes it there.
  A member that crashes, or a leader that loses its place with the request pending, drops the
  connection too, and the request's outcome is unknown (LOST), except a read's, which is asked
  again. A request goes to a member that leads, waiting for one (as the real client waits to
  be connected) for up to a session timeout from when it was made.
- writes and session open/close/expire are proposals answered once applied; Get and Children
  are read-index reads; a watch is set when its request reaches the member and fires on the
  changes that member applies; a ping is answered once the leader's next heartbeat round
  confirms it still leads.
- sessions expire when the leader has not heard from them for the session timeout (the core's
  own rule); a new leader gives every session a fresh timeout.
- a request that gets no answer within REQUEST_TIMEOUT_NS (a leader cut off from the others
  never commits) is LOST.

Faults (draw_faults, on the nemesis tick): a member crashes and restarts from what it saved; the
leader is cut off from the other members for a while (clients still reach it); heal() ends both. The world's own metastore
faults (outages, a process cut off, lost answers) apply on the caller's side, as for the
memory metastore.
"""

from __future__ import annotations

import functools
import itertools
import random
from dataclasses import dataclass
from typing import Callable

from bkcore.metaops import Children, Get, MetaCode, MetaOp, MetaResult, op_to_list, result_from_list
from bkmetastore.raftlite.core import RaftConfig, Reply
from bkmetastore.watches import WatchTable
from bksim.metastore_client import LOST
from bksim.raftlite_members import RaftMembers

MS = 1_000_000
MEMBER_IDS = (1, 2, 3)
# The real client waits 10 s; the simulator's runs are short, so it gives up sooner (the
# outcome is the same: unknown).
REQUEST_TIMEOUT_NS = 2_000 * MS
MEMBER_CUT_OFF_MEAN_NS = 2_000 * MS
RECONNECT_NS = 100 * MS
# Members crash at this share of the rate the scenario crashes processes and bookies at (a
# metastore is the steadiest part of a deployment; at the full rate a quorum would rarely stand).
MEMBER_CRASH_SHARE = 0.2
# A member's invariants (which walk its log) are checked after every n-th input: every input
# would make the raft-lite runs a third slower.
INVARIANTS_EVERY = 50


@dataclass
class _Pending:
    caller: str
    member: int
    kind: str
    on_answer: Callable[[object], None]
    ask_again: Callable[[], None] | None = None     # a read, taken to the next leader
    timeout: object = None


class RaftMetastore:
    needs_keepalive = True

    def __init__(self, *, world, rng: random.Random) -> None:
        self._world = world
        self._loop = world.loop
        self._rng = rng
        options = world.scenario.metastore
        config = RaftConfig(session_timeout_ns=options.session_timeout_ns, snapshot_threshold=500,
                            check_quorum=world.scenario.metastore_check_quorum)
        self.members = RaftMembers(loop=world.loop, rng=rng, ids=list(MEMBER_IDS), config=config,
                                   on_reply=self._on_reply, on_changed=self._on_changed,
                                   delay_ns=lambda: MS // 2 + rng.randrange(MS), invariants_every=INVARIANTS_EVERY)
        self._connected: dict[str, int] = {}
        self._tables: dict[str, list[WatchTable]] = {}
        self._pending: dict[int, _Pending] = {}
        self._tokens = itertools.count(1)
        self._opened_sessions: set[int] = set()
        self._closed_sessions: set[int] = set()
        self.members.start_all()

    @property
    def expired_session_count(self) -> int:
        """Sessions opened and gone without being closed."""
        core = self.members.up_to_date()
        gone = self._opened_sessions - self._closed_sessions
        return sum(1 for s in gone if core is None or not core.sm.is_session_alive(s))

    def describe(self) -> str:
        return f"raft-lite ({len(MEMBER_IDS)} members)"

    # -- requests ------------------------------------------------------------------------------

    def submit(self, caller: str, command: list, on_answer: Callable[[object], None],
               on_received: Callable[[], None] | None = None, *, wait_until_ns: int | None = None) -> None:
        now_ns = self._loop.now_ns
        if wait_until_ns is None:
            wait_until_ns = now_ns + self._world.scenario.metastore.session_timeout_ns
        member = self._connected.get(caller)
        if member is None:
            # Not connected: as the real client, wait for a member that leads (trying again
            # every RECONNECT_NS) for up to a session timeout, then give up.
            leaders = self.members.leaders()
            if not leaders:
                if now_ns >= wait_until_ns:
                    self._answer(on_answer, LOST)
                else:
                    self._loop.call_later(RECONNECT_NS, self._submit_again, caller, command, on_answer,
                                          on_received, wait_until_ns)
                return
            member = self._connected[caller] = self._rng.choice(leaders)
        core = self.members.core(member)
        if core is None:
            self._drop_connection(caller)       # a broken connection
            self._answer(on_answer, LOST)
            return
        ask_again = functools.partial(self._ask_again, caller, command, on_answer, on_received, wait_until_ns)
        if not core.is_leader:
            self._drop_connection(caller)       # "not leader": refused, so taken to the leader
            self._loop.post_at(now_ns, ask_again)
            return
        kind = command[0]
        token = next(self._tokens)
        is_read = kind == "op" and isinstance(command[2], (Get, Children))
        pending = self._pending[token] = _Pending(caller, member, kind, on_answer, ask_again if is_read else None)
        if kind == "ping":
            core.ping(token, command[1], now_ns)
        elif kind == "op":
            session_id, op = command[1], command[2]
            if session_id:
                core.touch(session_id, now_ns)
            if isinstance(op, (Get, Children)):
                if on_received is not None:
                    on_received()
                core.read(token, op, now_ns)
            else:
                core.propose(token, ["op", session_id or 0, op_to_list(op)], now_ns)
        elif kind == "open":
            core.propose(token, ["open"], now_ns)
        elif kind in ("close", "expire"):
            if kind == "close":
                self._closed_sessions.add(command[1])
            core.propose(token, [kind, command[1]], now_ns)
        else:
            raise AssertionError(f"unknown metastore command {command!r}")
        pending.timeout = self._loop.call_later(REQUEST_TIMEOUT_NS, self._time_out, token)
        self.members.perform(member)

    def _submit_again(self, caller: str, command: list, on_answer: Callable[[object], None],
                      on_received: Callable[[], None] | None, wait_until_ns: int) -> None:
        self.submit(caller, command, on_answer, on_received, wait_until_ns=wait_until_ns)

    def _ask_again(self, caller: str, command: list, on_answer: Callable[[object], None],
                   on_received: Callable[[], None] | None, wait_until_ns: int) -> None:
        """A request refused unprocessed (or a read whose leader was lost): the real client
        takes it to the leader while its time lasts."""
        if self._loop.now_ns >= wait_until_ns:
            self._answer(on_answer, LOST)
        else:
            self.submit(caller, command, on_answer, on_received, wait_until_ns=wait_until_ns)

    def _on_reply(self, member: int, reply: Reply) -> None:
        pending = self._pending.pop(reply.token, None)
        if pending is None:
            return
        self._loop.cancel(pending.timeout)
        if reply.error:                          # "leadership lost": the others pending there
            self._drop_connection(pending.caller, lose_pending=False)     # are answered the same
            if pending.ask_again is not None:
                self._loop.post_at(self._loop.now_ns, pending.ask_again)
            else:
                self._answer(pending.on_answer, LOST)
        elif pending.kind == "op":
            self._answer(pending.on_answer, result_from_list(reply.result))
        else:
            if pending.kind == "open":
                self._opened_sessions.add(reply.result)
            self._answer(pending.on_answer, reply.result)

    def _time_out(self, token: int) -> None:
        pending = self._pending.pop(token, None)
        if pending is not None:
            self._drop_connection(pending.caller)
            self._answer(pending.on_answer, LOST)

    def _answer(self, on_answer: Callable[[object], None], answer: object) -> None:
        """Answers are posted, never given inside a member's effects (the caller's next request
        would run the core re-entrantly)."""
        self._loop.post_at(self._loop.now_ns, on_answer, answer)

    def read_applied(self, op: MetaOp) -> MetaResult:
        """A linearizable read: of a state that holds every acknowledged change
        (CONNECTION_LOSS while no live member has applied them all)."""
        core = self.members.up_to_date()
        return core.sm.apply(op) if core is not None else MetaResult(MetaCode.CONNECTION_LOSS)

    # -- watches -------------------------------------------------------------------------------

    def attach_watches(self, caller: str, table: WatchTable) -> None:
        self._tables.setdefault(caller, []).append(table)

    def detach_watches(self, caller: str, table: WatchTable) -> None:
        tables = self._tables.get(caller, [])
        if table in tables:
            tables.remove(table)

    def _on_changed(self, member: int, changes: list) -> None:
        for caller, tables in self._tables.items():
            if self._connected.get(caller) == member:
                for table in tables:
                    table.fire_changes(changes)

    def _drop_connection(self, caller: str, *, lose_pending: bool = True) -> None:
        """The caller's connection broke: its watches fire; in-flight requests there are LOST
        (unless the member has answered, or is answering, each of them itself)."""
        member = self._connected.pop(caller, None)
        for table in self._tables.get(caller, ()):
            table.fire_all("connection lost")
        if not lose_pending:
            return
        for token, pending in list(self._pending.items()):
            if pending.caller == caller and pending.member == member:
                del self._pending[token]
                self._loop.cancel(pending.timeout)
                self._answer(pending.on_answer, LOST)

    # -- faults --------------------------------------------------------------------------------

    def draw_faults(self, nemesis) -> None:
        """One nemesis tick: each member may crash (and restart); the leader, the member whose
        faults matter most, may be cut off from the others for a while."""
        world, scenario = self._world, self._world.scenario
        for member in MEMBER_IDS:
            if self.members.is_up(member) and nemesis.chance(scenario.crash_probability_per_second
                                                             * MEMBER_CRASH_SHARE):
                self.crash_member(member, restart_after_ns=int(
                    nemesis.rng.expovariate(1 / scenario.restart_delay_mean_ns)))
        leader = self.members.leader()
        if leader is not None and nemesis.chance(scenario.metastore_leader_cut_off_per_second):
            duration_ns = int(nemesis.rng.expovariate(1 / MEMBER_CUT_OFF_MEAN_NS))
            self.members.partition({leader}, until_ns=world.now_ns + duration_ns)
            world.trace.record(world.now_ns, "metastore-leader-cut-off", leader, duration_ns)

    def crash_member(self, member: int, *, restart_after_ns: int | None) -> None:
        world = self._world
        self.members.crash(member)
        world.trace.record(world.now_ns, "metastore-member-crash", member)
        for caller in [c for c, m in self._connected.items() if m == member]:
            self._drop_connection(caller)
        if restart_after_ns is not None:
            self._loop.call_later(restart_after_ns, self.members.restart, member)

    def heal(self) -> None:
        self.members.heal()
        for member in MEMBER_IDS:
            self.members.restart(member)
