"""RaftNode: a small Raft as a pure state machine, replicating a MemoryMetastore.

Inputs: receive(source, message, now_ns), on_timer(now_ns), and for the leader propose(),
read() and keepalive(). Outputs: take_effects(), performed by the driver IN ORDER — a Save*
effect must be durable (fsync) before any later effect is performed, which is how every vote
and every acknowledgement is persisted before it is sent, and every reply follows the log it
depends on. No I/O, clock or randomness of its own: time arrives as now_ns, randomness as an
injected rng (election timeouts), so the simulator runs it unchanged.

Raft as in the paper: terms; RequestVote granted only to a candidate whose log is at least as
up to date, one vote per term; AppendEntries with the log matching check, a follower truncating
its conflicting suffix; a leader counts only entries of its own term toward commit (it appends a
no-op when elected so earlier entries commit too); snapshots of the state machine with log
truncation, and InstallSnapshot for a follower that is behind the leader's log.

A leader that has not heard from a majority within the shortest election timeout steps down
(check quorum), so the clients of a leader cut off from the others go and find its successor.

Linearizable reads use read-index: the leader notes its commit index, confirms it is still the
leader with a round of heartbeats acknowledged by a majority (each heartbeat carries a sequence
number that followers echo), waits until it has applied up to that index, and answers from its
state. A leader serves no read before it has committed an entry of its own term. No clock-based
lease is trusted for reads.

Sessions: opening one is a log command; keeping it alive is not (the leader tracks last contact
per session in memory, and answers a ping once a heartbeat round confirms it still leads). The leader commits an expire command for a session silent longer than
session_timeout_ns; a new leader first gives every session a fresh full timeout, so a leader
change never expires a live client's session early.

Commands: ["noop"], ["open"] -> session id, ["op", session, op] -> MetaResult as a list,
["close", session], ["expire", session].
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from bkcore.metaops import Children, Get, MetaCode, MetaResult, op_from_list, result_to_list
from bkcore.rng import Rng
from bkmetastore.memory import MemoryMetastore

MS = 1_000_000


class Role(Enum):
    FOLLOWER = "follower"
    CANDIDATE = "candidate"
    LEADER = "leader"


@dataclass(frozen=True)
class RaftConfig:
    election_timeout_min_ns: int = 300 * MS
    election_timeout_max_ns: int = 600 * MS
    heartbeat_interval_ns: int = 50 * MS
    session_timeout_ns: int = 10_000 * MS
    snapshot_threshold: int = 10_000          # applied entries kept in the log before a snapshot
    entries_per_append_max: int = 1000
    # A leader that has not heard from a majority within election_timeout_min_ns steps down.
    # (Off only in tests that need a deposed leader that does not know it.)
    check_quorum: bool = True


# -- effects (performed in order; Save* durable before anything after them) ------------------

@dataclass(frozen=True)
class Send:
    destination: int
    message: list


@dataclass(frozen=True)
class SaveHardState:
    term: int
    voted_for: int | None


@dataclass(frozen=True)
class SaveLog:
    """Drop every entry at or after first_index, then append `entries` ([term, command]) there."""
    first_index: int
    entries: list


@dataclass(frozen=True)
class SaveSnapshot:
    """The state machine at `index` (whose entry had `term`); entries up to it are dropped."""
    index: int
    term: int
    state: list


@dataclass(frozen=True)
class Reply:
    token: object
    result: object          # command result, or None after close
    error: str = ""          # "not leader" when leadership was lost before the answer


@dataclass(frozen=True)
class Changed:
    """Paths changed by applied commands (for watches): (path, is_membership_change)."""
    changes: list


@dataclass(frozen=True)
class _Ping:
    """A ping waiting, like a read, for a majority to confirm this node still leads."""
    session_id: int


@dataclass
class _Read:
    token: object
    op: object
    read_index: int
    seq: int


@dataclass
class PersistentState:
    term: int = 0
    voted_for: int | None = None
    snapshot_index: int = 0
    snapshot_term: int = 0
    snapshot_state: list | None = None
    log: list = field(default_factory=list)     # [term, command] for snapshot_index + 1, ...


class RaftNode:
    def __init__(self, *, node_id: int, peer_ids: list[int], rng: Rng, config: RaftConfig = RaftConfig(),
                 restored: PersistentState | None = None, now_ns: int = 0) -> None:
        self.node_id = node_id
        self.peer_ids = sorted(p for p in peer_ids if p != node_id)
        self.rng = rng
        self.config = config
        state = restored or PersistentState()
        self.term = state.term
        self.voted_for = state.voted_for
        self.snapshot_index = state.snapshot_index
        self.snapshot_term = state.snapshot_term
        self.log = list(state.log)
        self.sm = (MemoryMetastore.from_state(state.snapshot_state, is_recording_changes=True)
                   if state.snapshot_state is not None else MemoryMetastore(is_recording_changes=True))
        self._snapshot_state = state.snapshot_state
        self.commit_index = self.snapshot_index
        self.last_applied = self.snapshot_index
        self._now_ns = now_ns
        self.role = Role.FOLLOWER
        self.leader_id: int | None = None
        self._effects: list = []
        self._election_deadline_ns = 0
        self._reset_election_timer(now_ns)
        # leader state
        self._next_index: dict[int, int] = {}
        self._match_index: dict[int, int] = {}
        self._acked_seq: dict[int, int] = {}
        self._peer_heard_ns: dict[int, int] = {}       # when each peer last answered this leader
        self._seq = 0
        self._heartbeat_due_ns = 0
        self._proposals: dict[int, tuple[int, object]] = {}     # index -> (term, token)
        self._reads: list[_Read] = []
        self._session_seen: dict[int, int] = {}
        self._expiring: set[int] = set()
        self._votes: set[int] = set()

    # -- queries ------------------------------------------------------------------------------

    @property
    def last_index(self) -> int:
        return self.snapshot_index + len(self.log)

    def term_at(self, index: int) -> int:
        if index == self.snapshot_index:
            return self.snapshot_term
        if index < self.snapshot_index or index > self.last_index:
            return -1
        return self.log[index - self.snapshot_index - 1][0]

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    def take_effects(self) -> list:
        effects, self._effects = self._effects, []
        return effects

    def next_deadline_ns(self) -> int:
        return self._heartbeat_due_ns if self.is_leader else self._election_deadline_ns

    # -- timers -------------------------------------------------------------------------------

    def _reset_election_timer(self, now_ns: int) -> None:
        c = self.config
        self._election_deadline_ns = now_ns + c.election_timeout_min_ns + self.rng.randrange(
            c.election_timeout_max_ns - c.election_timeout_min_ns + 1)

    def on_timer(self, now_ns: int) -> None:
        self._now_ns = now_ns
        if self.is_leader:
            if self.config.check_quorum and not self._hears_a_majority(now_ns):
                self._step_down(self.term, now_ns)
                return
            if now_ns >= self._heartbeat_due_ns:
                self._broadcast(now_ns)
            self._expire_silent_sessions(now_ns)
        elif now_ns >= self._election_deadline_ns:
            self._start_election(now_ns)

    def _hears_a_majority(self, now_ns: int) -> bool:
        """Check quorum: whether a majority (this leader included) answered within the shortest
        election timeout. A leader cut off from the others steps down once it does not: a
        successor may be elected meanwhile, and its clients should go and find it rather than
        wait on requests it can never commit."""
        since_ns = now_ns - self.config.election_timeout_min_ns
        heard = 1 + sum(1 for at_ns in self._peer_heard_ns.values() if at_ns >= since_ns)
        return heard * 2 > len(self.peer_ids) + 1

    def _start_election(self, now_ns: int) -> None:
        self.role = Role.CANDIDATE
        self.term += 1
        self.voted_for = self.node_id
        self.leader_id = None
        self._votes = {self.node_id}
        self._effects.append(SaveHardState(self.term, self.voted_for))
        self._reset_election_timer(now_ns)
        for peer in self.peer_ids:
            self._effects.append(Send(peer, ["vote", self.term, self.node_id, self.last_index,
                                             self.term_at(self.last_index)]))
        self._maybe_win(now_ns)

    def _maybe_win(self, now_ns: int) -> None:
        if self.role is Role.CANDIDATE and len(self._votes) * 2 > len(self.peer_ids) + 1:
            self._become_leader(now_ns)

    def _become_leader(self, now_ns: int) -> None:
        self.role = Role.LEADER
        self.leader_id = self.node_id
        self._next_index = {p: self.last_index + 1 for p in self.peer_ids}
        self._match_index = {p: 0 for p in self.peer_ids}
        self._acked_seq = {p: 0 for p in self.peer_ids}
        self._session_seen = {s: now_ns for s in self.sm._sessions}     # fresh timeouts for all
        self._peer_heard_ns = {p: now_ns for p in self.peer_ids}
        self._expiring = set()
        self._append(["noop"], now_ns)

    def _step_down(self, term: int, now_ns: int) -> None:
        was_leader = self.is_leader
        if term > self.term:
            self.term = term
            self.voted_for = None
            self._effects.append(SaveHardState(self.term, None))
        self.role = Role.FOLLOWER
        self._reset_election_timer(now_ns)
        if was_leader:
            for _, token in self._proposals.values():
                self._effects.append(Reply(token, None, "not leader"))
            for read in self._reads:
                self._effects.append(Reply(read.token, None, "not leader"))
            self._proposals.clear()
            self._reads.clear()

    # -- leader: proposals, reads, sessions ----------------------------------------------------

    def propose(self, token: object, command: list, now_ns: int) -> bool:
        """Append a command; Reply(token, result) follows once it is applied. False when this
        node is not the leader (nothing happens)."""
        if not self.is_leader:
            return False
        self._now_ns = now_ns
        self._append(command, now_ns, token=token)
        return True

    def read(self, token: object, op: object, now_ns: int) -> bool:
        """A linearizable Get or Children (read-index). False when not the leader."""
        if not self.is_leader:
            return False
        if not isinstance(op, (Get, Children)):
            self._effects.append(Reply(token, result_to_list(MetaResult(MetaCode.NO_NODE)), "not a read"))
            return True
        self._seq += 1
        self._reads.append(_Read(token, op, self.commit_index, self._seq))
        self._broadcast(now_ns)
        self._serve_reads()
        return True

    def ping(self, token: object, session_id: int, now_ns: int) -> bool:
        """A client of `session_id` says it is alive. Reply(token, alive) follows once a round
        of heartbeats sent after this call is acknowledged by a majority: this node still led
        when the ping arrived, so any later leader was elected after it and gives the session a
        full timeout from then; the client may count its session alive for a timeout from when
        it sent the ping. A deposed leader that has not heard of its successor never answers
        (it would otherwise stretch a session its successor is about to expire). Answered
        like a read: after this leader has applied everything committed before it, and on the
        next heartbeat round rather than one of its own. False when
        not the leader (nothing happens)."""
        if not self.is_leader:
            return False
        self.touch(session_id, now_ns)
        # Confirmed by the next scheduled heartbeat round (within heartbeat_interval_ns): a
        # ping is not worth a round of its own, and its answer is not urgent (the client counts
        # its lease from when it sent the ping).
        self._seq += 1
        self._reads.append(_Read(token, _Ping(session_id), self.commit_index, self._seq))
        self._serve_reads()
        return True

    def touch(self, session_id: int, now_ns: int) -> None:
        """A client of `session_id` was heard from (an op of its session): its timeout starts
        again, with no answer."""
        if self.is_leader and session_id in self.sm._sessions:
            self._session_seen[session_id] = now_ns

    def session_alive(self, session_id: int) -> bool:
        return session_id in self.sm._sessions

    def _expire_silent_sessions(self, now_ns: int) -> None:
        for session_id, seen in list(self._session_seen.items()):
            if session_id not in self._expiring and now_ns - seen > self.config.session_timeout_ns:
                self._expiring.add(session_id)
                self._append(["expire", session_id], now_ns)

    def _append(self, command: list, now_ns: int, *, token: object = None) -> int:
        self.log.append([self.term, command])
        index = self.last_index
        if token is not None:
            self._proposals[index] = (self.term, token)
        self._effects.append(SaveLog(index, [[self.term, command]]))
        if not self.peer_ids:
            self._advance_commit()
        else:
            for peer in self.peer_ids:
                if self._next_index[peer] == index:     # caught up: ship it now
                    self._send_append(peer)
        return index

    def _broadcast(self, now_ns: int) -> None:
        self._heartbeat_due_ns = now_ns + self.config.heartbeat_interval_ns
        for peer in self.peer_ids:
            self._send_append(peer)
        if not self.peer_ids:
            self._serve_reads()

    def _send_append(self, peer: int) -> None:
        next_index = self._next_index[peer]
        if next_index <= self.snapshot_index:
            state = self.sm.export_state() if self.last_applied == self.snapshot_index else self._snapshot_state
            self._effects.append(Send(peer, ["snap", self.term, self.node_id, self.snapshot_index,
                                             self.snapshot_term, state, self._seq]))
            return
        prev = next_index - 1
        first = next_index - self.snapshot_index - 1
        entries = self.log[first:first + self.config.entries_per_append_max]
        self._effects.append(Send(peer, ["append", self.term, self.node_id, prev, self.term_at(prev), entries,
                                         self.commit_index, self._seq]))

    # -- messages -------------------------------------------------------------------------------

    def receive(self, source: int, message: list, now_ns: int) -> None:
        """A peer's message. One that does not have the shape of its kind is ignored whole:
        frames are checksummed and peers run this code, but a node never trusts the network."""
        self._now_ns = now_ns
        if not _is_well_formed(message):
            return
        term = message[1]
        if term > self.term:
            self._step_down(term, now_ns)
        _HANDLERS[message[0]](self, source, message, now_ns)

    def _on_vote(self, source: int, message: list, now_ns: int) -> None:
        _, term, candidate, last_index, last_term = message
        my_last_term = self.term_at(self.last_index)
        up_to_date = last_term > my_last_term or (last_term == my_last_term and last_index >= self.last_index)
        granted = (term == self.term and up_to_date and self.voted_for in (None, candidate)
                   and self.role is not Role.LEADER)
        if granted:
            self.voted_for = candidate
            self._effects.append(SaveHardState(self.term, candidate))
            self._reset_election_timer(now_ns)
        self._effects.append(Send(source, ["vote_r", self.term, granted]))

    def _on_vote_response(self, source: int, message: list, now_ns: int) -> None:
        _, term, granted = message
        if self.role is Role.CANDIDATE and term == self.term and granted:
            self._votes.add(source)
            self._maybe_win(now_ns)

    def _on_append(self, source: int, message: list, now_ns: int) -> None:
        _, term, leader, prev_index, prev_term, entries, leader_commit, seq = message
        if term < self.term:
            self._effects.append(Send(source, ["append_r", self.term, False, self.last_index, seq]))
            return
        self.role = Role.FOLLOWER
        self.leader_id = leader
        self._reset_election_timer(now_ns)
        if prev_index < self.snapshot_index:
            # Entries we hold in the snapshot: skip them (they are committed, hence identical).
            skip = self.snapshot_index - prev_index
            entries = entries[skip:]
            prev_index, prev_term = self.snapshot_index, self.snapshot_term
        if prev_index > self.last_index or self.term_at(prev_index) != prev_term:
            self._effects.append(Send(source, ["append_r", self.term, False,
                                               min(self.last_index, prev_index - 1), seq]))
            return
        for offset, entry in enumerate(entries):
            index = prev_index + 1 + offset
            if index <= self.last_index:
                if self.term_at(index) == entry[0]:
                    continue                                          # already have it
                del self.log[index - self.snapshot_index - 1:]        # a conflict: drop the suffix
            new = [list(e) for e in entries[offset:]]
            self.log.extend(new)
            self._effects.append(SaveLog(index, new))
            break
        match = prev_index + len(entries)
        if min(leader_commit, match) > self.commit_index:      # a stale append never moves it back
            self.commit_index = min(leader_commit, match)
            self._apply_committed()
        self._effects.append(Send(source, ["append_r", self.term, True, match, seq]))

    def _on_append_response(self, source: int, message: list, now_ns: int) -> None:
        _, term, success, match, seq = message
        if not self.is_leader or term != self.term:
            return
        self._peer_heard_ns[source] = now_ns
        self._acked_seq[source] = max(self._acked_seq.get(source, 0), seq)
        if success:
            if match > self._match_index[source]:
                self._match_index[source] = match
            self._next_index[source] = max(self._next_index[source], match + 1)
            self._advance_commit()
            if self._next_index[source] <= self.last_index:
                self._send_append(source)
        else:
            self._next_index[source] = max(1, min(self._next_index[source] - 1, match + 1))
            self._send_append(source)
        self._serve_reads()

    def _on_snapshot(self, source: int, message: list, now_ns: int) -> None:
        _, term, leader, index, snap_term, state, seq = message
        if term < self.term:
            return
        self.role = Role.FOLLOWER
        self.leader_id = leader
        self._reset_election_timer(now_ns)
        if index > self.commit_index:
            try:
                sm = MemoryMetastore.from_state(state, is_recording_changes=True)
            except (TypeError, ValueError, KeyError, IndexError):
                return             # not a state machine: install nothing
            keep = self.term_at(index) == snap_term
            self.log = self.log[index - self.snapshot_index:] if keep else []
            self.snapshot_index, self.snapshot_term = index, snap_term
            self._snapshot_state = state
            self.sm = sm
            self.commit_index = self.last_applied = index
            self._effects.append(SaveSnapshot(index, snap_term, state))
            if not keep:
                self._effects.append(SaveLog(index + 1, []))
        self._effects.append(Send(source, ["append_r", self.term, True, max(index, self.commit_index), seq]))

    # -- commit and apply -------------------------------------------------------------------

    def _advance_commit(self) -> None:
        majority = (len(self.peer_ids) + 1) // 2 + 1
        for index in range(self.last_index, self.commit_index, -1):
            if self.term_at(index) != self.term:
                break          # only entries of the current term are committed by counting
            if 1 + sum(1 for m in self._match_index.values() if m >= index) >= majority:
                self.commit_index = index
                self._apply_committed()
                break

    def _apply_committed(self) -> None:
        while self.last_applied < self.commit_index:
            self.last_applied += 1
            term, command = self.log[self.last_applied - self.snapshot_index - 1]
            result = self._apply(command)
            changes = self.sm.take_changes()
            if changes:
                self._effects.append(Changed(changes))
            proposal = self._proposals.pop(self.last_applied, None)
            if proposal is not None:
                proposal_term, token = proposal
                self._effects.append(Reply(token, result) if proposal_term == term
                                     else Reply(token, None, "not leader"))
        self._serve_reads()
        if self.last_applied - self.snapshot_index > self.config.snapshot_threshold:
            self._take_snapshot()

    def _apply(self, command: list):
        kind = command[0]
        if kind == "op":
            try:
                op = op_from_list(command[2])
            except ValueError:
                return result_to_list(MetaResult(MetaCode.NO_NODE))
            return result_to_list(self.sm.apply(op, session_id=command[1]))
        if kind == "open":
            session_id = self.sm.open_session()
            if self.is_leader:
                self._session_seen[session_id] = self._now_ns
            return session_id
        if kind in ("close", "expire"):
            self.sm.close_session(command[1])
            self._session_seen.pop(command[1], None)
            self._expiring.discard(command[1])
            return None
        return None      # noop

    def _serve_reads(self) -> None:
        if not self._reads or not self.is_leader or self.term_at(self.commit_index) != self.term:
            return
        majority = (len(self.peer_ids) + 1) // 2 + 1
        waiting = []
        for read in self._reads:
            confirmed = 1 + sum(1 for s in self._acked_seq.values() if s >= read.seq) >= majority
            if confirmed and self.last_applied >= read.read_index:
                if isinstance(read.op, _Ping):
                    self._effects.append(Reply(read.token, read.op.session_id in self.sm._sessions))
                else:
                    self._effects.append(Reply(read.token, result_to_list(self.sm.apply(read.op))))
            else:
                waiting.append(read)
        self._reads = waiting

    def _take_snapshot(self) -> None:
        index, term = self.last_applied, self.term_at(self.last_applied)
        state = self.sm.export_state()
        self.log = self.log[index - self.snapshot_index:]
        self.snapshot_index, self.snapshot_term = index, term
        self._snapshot_state = state
        self._effects.append(SaveSnapshot(index, term, state))

    # -- checks -----------------------------------------------------------------------------

    def invariants(self) -> None:
        assert self.snapshot_index <= self.last_applied <= self.commit_index <= self.last_index
        for i in range(1, len(self.log)):
            assert self.log[i][0] >= self.log[i - 1][0], "terms in a log never decrease"
        if self.is_leader:
            assert self.voted_for == self.node_id


def _ints(*values) -> bool:
    return all(type(v) is int for v in values)


def _are_entries(entries: object, prev_term: int, term: int) -> bool:
    """[[term, command], ...] with terms that never go back, from prev_term up to the sender's."""
    if type(entries) is not list:
        return False
    last = prev_term
    for entry in entries:
        if (type(entry) is not list or len(entry) != 2 or type(entry[0]) is not int or type(entry[1]) is not list
                or not entry[1] or not last <= entry[0] <= term):
            return False
        last = entry[0]
    return True


def _is_well_formed(m: object) -> bool:
    if type(m) is not list or len(m) < 2 or type(m[0]) is not str or type(m[1]) is not int or m[1] < 0:
        return False
    kind = m[0]
    if kind == "vote":
        return len(m) == 5 and _ints(*m[2:]) and min(m[3:]) >= 0
    if kind == "vote_r":
        return len(m) == 3 and type(m[2]) is bool
    if kind == "append":
        return (len(m) == 8 and _ints(m[2], m[3], m[4], m[6], m[7]) and m[3] >= 0 and m[4] >= 0
                and _are_entries(m[5], m[4], m[1]))
    if kind == "append_r":
        return len(m) == 5 and type(m[2]) is bool and _ints(m[3], m[4])
    if kind == "snap":
        return len(m) == 7 and _ints(m[2], m[3], m[4], m[6]) and m[3] >= 0 and type(m[5]) is list
    return False


_HANDLERS = {
    "vote": RaftNode._on_vote,
    "vote_r": RaftNode._on_vote_response,
    "append": RaftNode._on_append,
    "append_r": RaftNode._on_append_response,
    "snap": RaftNode._on_snapshot,
}
