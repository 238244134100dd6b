"""LedgerWriter: the single writer of an open ledger (and the rewriting half of recovery).

Owns the pending adds of one ledger, their acknowledgements, the LAC, ensemble changes and close.

Rules that never bend:
- entry e goes to the write set (e + i) % E, i < Qw, of the last ensemble; it completes only when
  Qa of those bookies acknowledged it durably AND every earlier entry has completed;
- LAC (last add confirmed) is the last completed entry; each add carries the LAC of its send
  time (piggyback), and an idle writer sends the LAC explicitly;
- adds are held per bookie until the driver pulls that bookie (ClientContext.hold: when its
  connection can write), then it gets one request per run of consecutive entries held for it
  (an AddBatchRequest, or an AddRequest for one entry), answered once for the whole run: the
  one place adds are grouped;
- a failed or timed-out bookie is replaced by an ensemble change: CAS new metadata whose last
  ensemble starts at LAC + 1, then resend every pending add to the new bookies; no add completes
  while a change is in flight;
- a FENCED answer means a reader is recovering the ledger: every pending and later add fails;
- a recovery writer never changes ensembles (see _on_bookie_failed);
- close waits for pending adds to resolve, then CASes OPEN -> CLOSED at the LAC.
"""

from __future__ import annotations

from collections import deque
from itertools import islice
from operator import itemgetter
from enum import Enum

from bkcore.client.batching import batch_fits, batch_may_grow
from bkcore.client.context import ClientContext
from bkcore.client.metadata_update import update_ledger_metadata
from bkcore.digest import Digester, master_key
from bkcore.errors import (
    BKException, BadRequest, Code, LedgerClosed, LedgerFenced, MetadataError, MetadataVersion,
    NotEnoughBookies, TooManyEnsembleChanges, TooManyRequests, Unauthorized, exception_for,
)
from bkcore.ledger.metadata import LedgerMetadata, LedgerState
from bkcore.ledger.schedule import write_set, write_sets
from bkcore.metaops import Children, MetaCode
from bkcore.wire import INVALID_ENTRY_ID, AddBatchRequest, AddRequest, ForceLedgerRequest, WriteLacRequest


# How often a writer that runs without a replacement for a failed bookie looks for one again.
DEGRADED_RETRY_INTERVAL_NS = 1_000_000_000


class WriterState(Enum):
    OPEN = "OPEN"
    CLOSING = "CLOSING"      # close() called: no new adds, waiting for pending adds to resolve
    CLOSED = "CLOSED"
    ERRORED = "ERRORED"      # fenced, unauthorized, or out of bookies: every add fails


# Looked up once: reading an enum member off its class costs about 65 ns in CPython 3.11, and
# every add and every answer to one checks these.
_OPEN, _CLOSING = WriterState.OPEN, WriterState.CLOSING
_CODE_OK = Code.OK


# An entry pushed and not yet completed: a list [entry_id, op_id, body, length, acks], indexed
# by these names; `length` is the ledger's length including the entry. A list rather than a
# slotted class: one is built for every add, and a list literal costs a quarter of a class's
# __init__.
_ENTRY_ID, _OP_ID, _BODY, _LENGTH, _ACKS = range(5)
_PendingAdd = list
_body_of = itemgetter(_BODY)
# Acknowledgements, shared by a group of consecutive pending adds that every bookie is sent in
# the same requests: a list [acked, ack_count, first_entry_id, count]. Bit p of `acked` is set
# when the bookie at position p of their write set has them durably, and ack_count counts those
# bits (they are acknowledged at Qa). An answer for exactly the group's adds (the usual case: an
# unstriped ledger's batch, sent to every bookie) updates the group once instead of each add.
# An add pushed otherwise is a group of one, and an answer for part of a group first splits it
# into groups of one (_ack_each). Invariants: the adds of a group are exactly entries
# first_entry_id .. + count - 1, all pending (a group completes whole); a group of adds that
# have not been sent yet (_held_for_all) has count 0 until they leave.
_ACKED, _ACK_COUNT, _GROUP_FIRST_ENTRY_ID, _GROUP_COUNT = range(4)


def _forget_ack(add: _PendingAdd, position: int) -> None:
    """The bookie at `position` was replaced: its ack of `add` (and of its group) no longer counts."""
    acks = add[_ACKS]
    if acks[_ACKED] >> position & 1:
        acks[_ACKED] ^= 1 << position
        acks[_ACK_COUNT] -= 1


def _runs(adds: list[_PendingAdd]) -> list[tuple[int, list[bytes]]]:
    """Adds for one bookie (entry ids rising) cut where a batch may not grow (batch_may_grow):
    (first entry id, bodies) of each run."""
    first_entry_id = adds[0][_ENTRY_ID]
    if adds[-1][_ENTRY_ID] - first_entry_id == len(adds) - 1:
        # Consecutive (the usual case): one run, unless it is too long or too large for a batch.
        bodies = list(map(_body_of, adds))
        if batch_fits(len(bodies), sum(map(len, bodies))):
            return [(first_entry_id, bodies)]
    runs = []
    start = size = 0
    previous_entry_id = adds[0][_ENTRY_ID] - 1
    for index, add in enumerate(adds):
        body_size = len(add[_BODY])
        if index > start and not batch_may_grow(index - start, size, previous_entry_id, add[_ENTRY_ID], body_size):
            runs.append((adds[start][_ENTRY_ID], [add[_BODY] for add in adds[start:index]]))
            start, size = index, 0
        size += body_size
        previous_entry_id = add[_ENTRY_ID]
    runs.append((adds[start][_ENTRY_ID], [add[_BODY] for add in adds[start:]]))
    return runs


class LedgerWriter:
    def __init__(self, *, ctx: ClientContext, metadata: LedgerMetadata, password: bytes,
                 is_recovery: bool = False, last_add_confirmed: int = INVALID_ENTRY_ID,
                 length: int = 0, complete=None) -> None:
        self.ctx = ctx
        # Where finished operations go: the application's outbox, or recovery's own bookkeeping.
        self._complete = complete or ctx.complete
        # Completes a run of adds with one call (see _complete_ready); None when a caller's own
        # `complete` takes them one by one.
        self._complete_each = ctx.complete_each if complete is None else None
        self.metadata = metadata
        self.is_recovery = is_recovery
        self.digester = Digester(ledger_id=metadata.ledger_id, digest_type=metadata.digest_type,
                                 password=password)
        self._pack_entry = self.digester.entry_packer()      # (entry_id, lac, length, payload)
        self.master_key = master_key(password)
        self.state = WriterState.OPEN
        self.error: BKException | None = None
        self.last_add_confirmed = last_add_confirmed
        self.last_add_pushed = last_add_confirmed
        self.last_add_completed = last_add_confirmed   # differs from LAC only with deferred sync
        self.length = length                           # of every pushed entry
        self.confirmed_length = length                 # of entries up to the LAC
        self._completed_length = length                # of entries up to last_add_completed
        # Entries pushed and not yet completed, in entry id order (ids are consecutive).
        self._pending: deque[_PendingAdd] = deque()
        # Bookie failures not yet handled: position -> failed bookie id.
        self._failed: dict[int, str] = {}
        self._is_changing_ensemble = False
        self.ensemble_change_count = 0
        self._close_op_ids: list[int] = []
        self._explicit_lac_sent = last_add_confirmed
        self._explicit_lac_sent_at_ns: int | None = None
        # When the writer last became idle (None while adds are pending), and whether its
        # application added again within explicit_lac_interval_ns of the last time it did.
        self._idle_since_ns: int | None = None
        self._adds_follow_at_once = False
        self._explicit_lac_timer: int | None = None
        # Set (lac_push_delay_ns) for a ledger nobody tails closely: once idle, it pushes its
        # LAC only after staying idle this long; None: the client's policy (explicit_lac_*).
        self.lac_push_delay_ns: int | None = None
        # When an explicit LAC push was held for the ensemble's bookies (None: none held); it
        # is sent when the driver pulls any of them (send_held), if the writer is still idle.
        self._lac_push_held_at_ns: int | None = None
        self._unusable_bookies: set[str] = set()
        # Adds pushed but not yet sent: position -> adds in entry id order. They leave when the
        # driver pulls that position's bookie (send_held), timed from when it was first held.
        # Invariant: the context has every position's bookie named as held (ctx.hold).
        self._held: dict[int, list[_PendingAdd]] = {}
        # The common case kept apart: adds held for every position of an unstriped ledger
        # (E == Qw) while no bookie has failed, one list for all. A position's adds to send are
        # those in _held, then these (they are later entries); before _held is added to or a
        # position is sent alone, these are spilled into it (_spill_held_for_all).
        self._held_for_all: list[_PendingAdd] = []
        self._held_for_all_acks: list = [0, 0, 0, 0]      # their group
        self._is_unstriped = metadata.ensemble_size == metadata.write_quorum_size
        # Read for every add: a ledger's E and Qw never change, nor the client's limits.
        self._write_sets = write_sets(metadata.ensemble_size, metadata.write_quorum_size)
        self._pending_adds_count_max = ctx.config.pending_adds_count_max
        self._entry_size_max = ctx.config.entry_size_max
        self._explicit_lac_interval_ns = ctx.config.explicit_lac_interval_ns
        if not is_recovery:
            ctx.open_writers[metadata.ledger_id] = self

    @property
    def ledger_id(self) -> int:
        return self.metadata.ledger_id

    @property
    def pending_adds_count(self) -> int:
        return len(self._pending)

    # -- adds -----------------------------------------------------------------------------

    def add(self, op_id: int, payload: bytes, *, now_ns: int) -> int | None:
        """Push one entry; returns its entry id, or None if it failed at once (Completed says why)."""
        size = len(payload)
        if size > self._entry_size_max:
            self._complete(op_id, error=BadRequest(
                f"ledger {self.ledger_id}: entry of {size} bytes exceeds entry_size_max "
                f"{self.ctx.config.entry_size_max}"))
            return None
        entry_id = self.last_add_pushed + 1
        length = self.length + size
        body = self._pack_entry(entry_id, self.last_add_confirmed, length, payload)
        held_for_all, pending = self._held_for_all, self._pending
        if held_for_all and self.state is _OPEN and not self._failed and len(pending) < self._pending_adds_count_max:
            # The usual add of a burst: what _push does for it, without the checks that cannot
            # apply (adds are held for every bookie, so the ledger is unstriped, and pending, so
            # the writer is not idle).
            self.last_add_pushed = entry_id
            self.length = length
            add = [entry_id, op_id, body, length, self._held_for_all_acks]
            pending.append(add)
            held_for_all.append(add)
            return entry_id
        return entry_id if self._push(op_id, entry_id, body, length, now_ns) else None

    def add_recovered(self, op_id: int, *, entry_id: int, body: bytes, length: int, now_ns: int) -> bool:
        """Recovery rewrites an entry it found, byte for byte, with recovery adds."""
        assert self.is_recovery and entry_id == self.last_add_pushed + 1
        return self._push(op_id, entry_id, body, length, now_ns)

    def _push(self, op_id: int, entry_id: int, body: bytes, length: int, now_ns: int) -> bool:
        if self.state is not _OPEN:
            self._complete(op_id, error=self._refusal())
            return False
        pending = self._pending
        if len(pending) >= self._pending_adds_count_max:
            self._complete(op_id, error=TooManyRequests(
                f"ledger {self.ledger_id}: {len(pending)} adds pending (pending_adds_count_max)"))
            return False
        self.last_add_pushed = entry_id
        self.length = length
        if self._idle_since_ns is not None:
            self._adds_follow_at_once = now_ns - self._idle_since_ns < self._explicit_lac_interval_ns
            self._idle_since_ns = None
            if self._explicit_lac_timer is not None:     # this entry carries the LAC instead
                self.ctx.cancel_timer(self._explicit_lac_timer)
                self._explicit_lac_timer = None
        failed = self._failed
        if self._is_unstriped and not failed:
            held_for_all = self._held_for_all
            if not held_for_all:
                self.ctx.hold(self, self.metadata.ensembles[-1][1], now_ns)
                self._held_for_all_acks = [0, 0, entry_id, 0]     # counted when they leave
            add = [entry_id, op_id, body, length, self._held_for_all_acks]
            pending.append(add)
            held_for_all.append(add)
            return True
        add = [entry_id, op_id, body, length, [0, 0, entry_id, 1]]
        pending.append(add)
        write_sets_ = self._write_sets
        positions = write_sets_[entry_id % len(write_sets_)]
        self._hold(add, [p for p in positions if p not in failed] if failed else positions, now_ns)
        return True

    def _hold(self, add: _PendingAdd, positions, now_ns: int) -> None:
        """Send `add` to these positions with the next batches. Each position must get its
        adds in entry id order."""
        held = self._held
        if self._held_for_all:
            self._spill_held_for_all()
        newly_held = None
        for position in positions:
            adds = held.get(position)
            if adds is None:
                held[position] = [add]
                if newly_held is None:
                    newly_held = []
                newly_held.append(self.metadata.ensembles[-1][1][position])
            else:
                adds.append(add)
        if newly_held is not None:
            self.ctx.hold(self, newly_held, now_ns)

    def _spill_held_for_all(self) -> None:
        """Move the adds held for every position to the end of each position's own list (_held)."""
        held_for_all, self._held_for_all = self._held_for_all, []
        if not held_for_all:
            return
        self._held_for_all_acks[_GROUP_COUNT] = len(held_for_all)
        held = self._held
        for position in range(self.metadata.ensemble_size):
            adds = held.get(position)
            if adds is None:
                held[position] = held_for_all.copy()
            else:
                adds += held_for_all

    def _refusal(self) -> BKException:
        if self.state is WriterState.ERRORED:
            return self.error
        return LedgerClosed(f"ledger {self.ledger_id} is closed for adds")

    def send_held(self, pulled: dict[str, int]) -> bool:
        """The driver pulled these bookies (bookie -> when it was first held, which the
        requests are timed from): send what is held for them, per bookie a request per run.
        Returns whether anything is still held (for bookies not pulled)."""
        ensemble = self.metadata.ensembles[-1][1]
        held_for_all = self._held_for_all
        pulled_count = sum(bookie in pulled for bookie in ensemble)
        if not pulled_count:         # (another writer's bookies)
            return bool(held_for_all or self._held or self._lac_push_held_at_ns is not None)
        if self._lac_push_held_at_ns is not None:
            self._send_held_lac()
        if held_for_all:
            if pulled_count == len(ensemble) and not self._held:
                # The usual case: every bookie at once. The same entries for each, so they are
                # split into runs once, as one group per run.
                self._held_for_all = []
                runs = _runs(held_for_all)
                self._group_by_run(held_for_all, runs)
                # Bookies in the order of the first add's write set, as if held one by one:
                # which bookie hears first rotates with the entries.
                write_sets_ = self._write_sets
                for position in write_sets_[held_for_all[0][_ENTRY_ID] % len(write_sets_)]:
                    bookie = ensemble[position]
                    for first_entry_id, bodies in runs:
                        self._send_run(first_entry_id, bodies, position, bookie, pulled[bookie])
                return False
            self._spill_held_for_all()       # some bookies now, the rest when they are pulled (or
            #                                  some held more than the rest)
        held = self._held
        # Bookies that hold the same span of entries share its runs.
        runs_by_span: dict[tuple[int, int], list[tuple[int, list[bytes]]]] = {}
        for position in [p for p in held if ensemble[p] in pulled]:
            adds = held.pop(position)
            span = (adds[0][_ENTRY_ID], len(adds))
            if adds[-1][_ENTRY_ID] - span[0] == span[1] - 1:      # consecutive: the span says which
                runs = runs_by_span.get(span)
                if runs is None:
                    runs = runs_by_span[span] = _runs(adds)
            else:
                runs = _runs(adds)
            bookie = ensemble[position]
            for first_entry_id, bodies in runs:
                self._send_run(first_entry_id, bodies, position, bookie, pulled[bookie])
        return bool(held)

    def _group_by_run(self, held_for_all: list[_PendingAdd], runs: list[tuple[int, list[bytes]]]) -> None:
        """The adds held for every bookie leave in these runs: one acknowledgement group each."""
        if len(runs) == 1:          # the usual case: they leave in one batch, as one group
            self._held_for_all_acks[_GROUP_COUNT] = len(held_for_all)
            return
        index = 0
        for first_entry_id, bodies in runs:
            group = [0, 0, first_entry_id, len(bodies)]
            for add in held_for_all[index:index + len(bodies)]:
                add[_ACKS] = group
            index += len(bodies)

    def _send_run(self, first_entry_id: int, bodies: list[bytes], position: int, bookie: str, now_ns: int) -> None:
        """One request for consecutive entries to one bookie, answered once for all of them."""
        count = len(bodies)
        # Fields read now rather than by build (the same values: build runs within send_request).
        ledger_id, master_key = self.metadata.ledger_id, self.master_key
        is_recovery, is_deferred_sync = self.is_recovery, self.metadata.is_deferred_sync
        if count == 1:
            body = bodies[0]
            build = lambda request_id: AddRequest(request_id, ledger_id, first_entry_id, master_key, body,  # noqa: E731
                                                  is_recovery, is_deferred_sync)
        else:
            build = lambda request_id: AddBatchRequest(request_id, ledger_id, first_entry_id, master_key,  # noqa: E731
                                                       bodies, is_recovery, is_deferred_sync)
        ctx = self.ctx
        # Not remembered: an answer from a bookie that was replaced meanwhile, or one that comes
        # after the adds resolved, finds nothing to acknowledge.
        ctx.send_request(
            bookie, build,
            lambda response, at_ns: self._on_add_response(first_entry_id, count, position, bookie, response, at_ns),
            timeout_ns=ctx.config.add_entry_timeout_ns, now_ns=now_ns)

    def _on_add_response(self, first_entry_id: int, count: int, position: int, bookie: str, response,
                         now_ns: int) -> None:
        """The answer for entries first_entry_id .. + count - 1 at `position` (one code for all)."""
        pending = self._pending
        start = first_entry_id - pending[0][_ENTRY_ID] if pending else count
        if start + count <= 0 or start >= len(pending) or self.metadata.ensembles[-1][1][position] != bookie:
            return  # already resolved, or that bookie was replaced meanwhile (last_ensemble)
        code = Code.TIMEOUT if response is None else response.code
        if code == _CODE_OK:
            bit = 1 << position
            acks = pending[start][_ACKS] if start >= 0 else None
            if acks is not None and acks[_GROUP_FIRST_ENTRY_ID] == first_entry_id and acks[_GROUP_COUNT] == count:
                if not acks[_ACKED] & bit:            # the request's adds are one group
                    acks[_ACKED] |= bit
                    acks[_ACK_COUNT] += 1
            else:
                self._ack_groups(max(start, 0), start + count, bit)
            self._complete_ready(now_ns)
        elif code == Code.FENCED:
            self._fail(LedgerFenced(f"ledger {self.ledger_id} was fenced by recovery"), now_ns)
        elif code == Code.UNAUTHORIZED:
            self._fail(Unauthorized(f"ledger {self.ledger_id}: bookie {bookie} refused the master key"), now_ns)
        else:
            self._on_bookie_failed(position, bookie, code, now_ns)

    def _ack_groups(self, start_index: int, end_index: int, bit: int) -> None:
        """Acknowledge pending adds start_index .. end_index - 1 (with `bit`) a group at a time
        while the span covers whole groups (a bookie pulled after the others gets the adds of
        several groups in one run), and one by one (_ack_each) from a group it covers in part."""
        pending = self._pending
        end_index = min(end_index, len(pending))
        index = start_index
        while index < end_index:
            add = pending[index]
            acks = add[_ACKS]
            count = acks[_GROUP_COUNT]
            if acks[_GROUP_FIRST_ENTRY_ID] != add[_ENTRY_ID] or not 0 < count <= end_index - index:
                self._ack_each(index, end_index, bit)
                return
            if not acks[_ACKED] & bit:
                acks[_ACKED] |= bit
                acks[_ACK_COUNT] += 1
            index += count

    def _ack_each(self, start_index: int, end_index: int, bit: int) -> None:
        """Acknowledge pending adds start_index .. end_index - 1 one by one (with `bit`), each
        group they belong to split first into groups of one."""
        pending = self._pending
        for add in islice(pending, start_index, end_index):
            acks = add[_ACKS]
            if acks[_GROUP_COUNT] != 1:
                first_index = acks[_GROUP_FIRST_ENTRY_ID] - pending[0][_ENTRY_ID]
                for entry_id, member in enumerate(islice(pending, first_index, first_index + acks[_GROUP_COUNT]),
                                                  acks[_GROUP_FIRST_ENTRY_ID]):
                    member[_ACKS] = [acks[_ACKED], acks[_ACK_COUNT], entry_id, 1]
                acks = add[_ACKS]
            if not acks[_ACKED] & bit:
                acks[_ACKED] |= bit
                acks[_ACK_COUNT] += 1

    def _complete_ready(self, now_ns: int) -> None:
        if self._is_changing_ensemble:
            return
        pending = self._pending
        ack_quorum_size = self.metadata.ack_quorum_size
        if pending and pending[0][_ACKS][_ACK_COUNT] >= ack_quorum_size:
            is_deferred_sync = self.metadata.is_deferred_sync
            if self._complete_each is None:
                # Each completion is a call into recovery, which may look at this writer.
                complete = self._complete
                while pending and pending[0][_ACKS][_ACK_COUNT] >= ack_quorum_size:
                    add = pending.popleft()
                    entry_id = self.last_add_completed = add[_ENTRY_ID]
                    self._completed_length = add[_LENGTH]
                    if not is_deferred_sync:
                        self.last_add_confirmed = entry_id
                        self.confirmed_length = add[_LENGTH]
                    complete(add[_OP_ID], entry_id)
            else:
                # Adds complete in entry id order: the ready ones at the head leave together,
                # and the writer's counters move once, to the last of them.
                # A group completes whole: its first add is at the head (see _ACKED).
                popleft = pending.popleft
                op_ids: list[int] = []
                while pending:
                    acks = pending[0][_ACKS]
                    if acks[_ACK_COUNT] < ack_quorum_size:
                        break
                    last = pending[acks[_GROUP_COUNT] - 1]
                    op_ids += [popleft()[_OP_ID] for _ in range(acks[_GROUP_COUNT])]
                first_entry_id = self.last_add_completed + 1
                self.last_add_completed = last[_ENTRY_ID]
                self._completed_length = last[_LENGTH]
                if not is_deferred_sync:
                    self.last_add_confirmed = last[_ENTRY_ID]
                    self.confirmed_length = last[_LENGTH]
                self._complete_each(op_ids, first_entry_id)
            self._schedule_explicit_lac(now_ns)
        if self.state is _CLOSING:           # _maybe_finish_close, its first test spelled out
            self._maybe_finish_close(now_ns)

    # -- failures and ensemble changes ----------------------------------------------------

    def _on_bookie_failed(self, position: int, bookie: str, code: Code, now_ns: int) -> None:
        if self.state in (WriterState.ERRORED, WriterState.CLOSED) or self._failed.get(position) == bookie:
            return
        if self.metadata.is_deferred_sync:
            # As in BookKeeper, a deferred-sync ledger cannot change ensembles: entries acked but
            # not yet forced would be left behind on the old bookies.
            self._fail(exception_for(code, f"ledger {self.ledger_id}: bookie {bookie} failed "
                                           f"({code.name}) and deferred-sync ledgers cannot change ensemble"), now_ns)
            return
        self._failed[position] = bookie
        self._unusable_bookies.add(bookie)
        if self.is_recovery:
            # A recovery never changes ensembles: its change would start at the *recovered* LAC + 1,
            # which can lie below the entries the old writer had acknowledged, and an aborted
            # recovery would leave those mapped to a bookie that never got them. It goes on while
            # every write set still reaches Qa, and otherwise fails so it is retried later.
            if self._can_write_without(set(self._failed)):
                self._complete_ready(now_ns)
            else:
                self._fail(NotEnoughBookies(
                    f"ledger {self.ledger_id}: recovery cannot reach the ack quorum without "
                    f"{sorted(self._failed.values())}; retry when they are back"), now_ns)
            return
        if not self._is_changing_ensemble:
            self._start_ensemble_change(now_ns, attempt_index=0)

    def on_bookie_lost(self, bookie: str, now_ns: int) -> None:
        """The bookie's registration vanished (its session expired): replace it now rather than
        at the next failed add. Deferred-sync ledgers cannot change ensembles, so they wait for
        a real failure."""
        if self.state is not WriterState.OPEN or self.metadata.is_deferred_sync:
            return
        ensemble = self.metadata.last_ensemble
        if bookie in ensemble:
            self._on_bookie_failed(ensemble.index(bookie), bookie, Code.TIMEOUT, now_ns)

    def _start_ensemble_change(self, now_ns: int, *, attempt_index: int) -> None:
        if self.ensemble_change_count >= self.ctx.config.ensemble_change_count_max:
            self._fail(TooManyEnsembleChanges(
                f"ledger {self.ledger_id}: {self.ensemble_change_count} ensemble changes (ensemble_change_count_max)"), now_ns)
            return
        self._is_changing_ensemble = True
        self.ctx.call_metadata(Children(self.ctx.layout.available_path),
                               lambda result, at_ns: self._on_bookies_listed(result, attempt_index, at_ns))

    def _on_bookies_listed(self, result, attempt_index: int, now_ns: int) -> None:
        if self.state is WriterState.ERRORED:
            return
        if result.code is not MetaCode.OK:
            if attempt_index + 1 >= self.ctx.config.metadata_retry_count_max:
                self._fail(MetadataError(f"ledger {self.ledger_id}: cannot list bookies: {result.code.name}"), now_ns)
            else:
                self.ctx.retry_later(now_ns, lambda t: self._start_ensemble_change(t, attempt_index=attempt_index + 1))
            return
        ensemble = self.metadata.last_ensemble
        replaced = dict(sorted(self._failed.items()))
        candidates = sorted(set(result.children) - {"readonly"} - set(ensemble) - self._unusable_bookies)
        if len(candidates) < len(replaced):
            if self._can_write_without(set(self._failed)):
                # No spare bookie, but every write set still reaches Qa: go on under-replicated
                # (never skipping the ack quorum) and try to replace the failed bookies later.
                self._is_changing_ensemble = False
                self.ctx.call_at(now_ns + DEGRADED_RETRY_INTERVAL_NS, self._retry_replacement)
                self._complete_ready(now_ns)
                return
            self._fail(NotEnoughBookies(
                f"ledger {self.ledger_id}: need {len(replaced)} replacement bookies, "
                f"{len(candidates)} writable bookies outside the ensemble"), now_ns)
            return
        chosen = self.ctx.rng.sample(candidates, len(replaced))
        new_ensemble = list(ensemble)
        for position, bookie in zip(replaced, chosen):
            new_ensemble[position] = bookie
        first_entry_id = self.last_add_confirmed + 1
        based_on = self.metadata.ensembles

        def transform(current: LedgerMetadata) -> LedgerMetadata:
            self._check_still_ours(current, based_on)
            return current.with_ensemble(first_entry_id, tuple(new_ensemble))

        update_ledger_metadata(self.ctx, self.metadata, transform,
                               lambda md, error, at_ns: self._on_ensemble_changed(md, error, replaced, at_ns),
                               now_ns=now_ns)

    def _can_write_without(self, failed_positions: set[int]) -> bool:
        md = self.metadata
        return all(
            sum(1 for p in write_set(start, ensemble_size=md.ensemble_size, write_quorum_size=md.write_quorum_size)
                if p not in failed_positions) >= md.ack_quorum_size
            for start in range(md.ensemble_size))

    def _retry_replacement(self, now_ns: int) -> None:
        if self._failed and not self._is_changing_ensemble and self.state in (WriterState.OPEN, WriterState.CLOSING):
            self._start_ensemble_change(now_ns, attempt_index=0)

    def _check_still_ours(self, current: LedgerMetadata, based_on) -> None:
        """Raise unless `current` is still the metadata this writer may change."""
        if current.state is LedgerState.CLOSED:
            raise LedgerClosed(f"ledger {self.ledger_id} was closed by another client at entry {current.last_entry_id}")
        if current.state is LedgerState.IN_RECOVERY and not self.is_recovery:
            raise LedgerFenced(f"ledger {self.ledger_id} is being recovered by another client")
        if current.ensembles != based_on:
            raise MetadataVersion(f"ledger {self.ledger_id}: ensembles changed under this writer")

    def _on_ensemble_changed(self, metadata: LedgerMetadata | None, error: BKException | None,
                             replaced: dict[int, str], now_ns: int) -> None:
        if self.state is WriterState.ERRORED:
            return
        if error is not None:
            self._fail(error if not isinstance(error, LedgerClosed) else LedgerFenced(str(error)), now_ns)
            return
        self.metadata = metadata
        self.ensemble_change_count += 1
        for position in replaced:
            if self._failed.get(position) == replaced[position]:
                del self._failed[position]
        self._spill_held_for_all()
        for position in replaced:
            self._held.pop(position, None)     # held for the old bookie: all go again, in order
        for add in self._pending:
            positions = write_set(add[_ENTRY_ID], ensemble_size=metadata.ensemble_size,
                                  write_quorum_size=metadata.write_quorum_size)
            resend = [position for position in positions if position in replaced]
            for position in resend:
                _forget_ack(add, position)
            if resend:
                self._hold(add, resend, now_ns)
        self._is_changing_ensemble = False
        if self._failed:   # more bookies failed while this change was in flight
            self._start_ensemble_change(now_ns, attempt_index=0)
        else:
            self._complete_ready(now_ns)

    def _fail(self, error: BKException, now_ns: int) -> None:
        """Fail every pending add and refuse later ones. The entries may exist on some bookies."""
        if self.state is WriterState.ERRORED:
            return
        was_closing = self.state is WriterState.CLOSING
        self.state = WriterState.ERRORED
        self.ctx.open_writers.pop(self.ledger_id, None)
        self.error = error
        self._is_changing_ensemble = False
        self._held.clear()
        self._held_for_all = []
        while self._pending:
            add = self._pending.popleft()
            self._complete(add[_OP_ID], error=error)
        if self._explicit_lac_timer is not None:
            self.ctx.cancel_timer(self._explicit_lac_timer)
        if was_closing:
            self._write_close(now_ns)

    # -- close ----------------------------------------------------------------------------

    def close(self, op_id: int, *, now_ns: int) -> None:
        """Close at the LAC once pending adds resolve. Completed result: the closed metadata."""
        if self.state is WriterState.CLOSED:
            self._complete(op_id, result=self.metadata)
            return
        self._close_op_ids.append(op_id)
        if len(self._close_op_ids) > 1:
            return  # a close is already under way; it answers every caller
        if self.state is WriterState.OPEN:
            self.state = WriterState.CLOSING
            self._maybe_finish_close(now_ns)
        else:  # ERRORED: still close the metadata at the LAC, so readers can use the ledger
            self._write_close(now_ns)

    def _maybe_finish_close(self, now_ns: int) -> None:
        if self.state is _CLOSING and not self._pending and not self._is_changing_ensemble:
            self._write_close(now_ns)

    def _write_close(self, now_ns: int) -> None:
        last_entry_id, length = self.last_add_confirmed, self.confirmed_length
        based_on = self.metadata.ensembles

        def transform(current: LedgerMetadata) -> LedgerMetadata | None:
            if current.state is LedgerState.CLOSED:
                if current.last_entry_id == last_entry_id and current.length == length:
                    return None
                raise MetadataVersion(f"ledger {self.ledger_id} was closed by another client at entry "
                                      f"{current.last_entry_id}, this writer's LAC is {last_entry_id}")
            self._check_still_ours(current, based_on)
            return current.closed(last_entry_id=last_entry_id, length=length)

        update_ledger_metadata(self.ctx, self.metadata, transform, self._on_closed, now_ns=now_ns)

    def _on_closed(self, metadata: LedgerMetadata | None, error: BKException | None, now_ns: int) -> None:
        self.ctx.open_writers.pop(self.ledger_id, None)
        if error is None:
            self.metadata = metadata
            self.state = WriterState.CLOSED
        elif self.state is not WriterState.ERRORED:
            self.state = WriterState.ERRORED
            self.error = error
        if self._explicit_lac_timer is not None:
            self.ctx.cancel_timer(self._explicit_lac_timer)
        op_ids, self._close_op_ids = self._close_op_ids, []
        for op_id in op_ids:
            self._complete(op_id, result=metadata, error=error)

    # -- explicit LAC and force -----------------------------------------------------------

    def _schedule_explicit_lac(self, now_ns: int) -> None:
        """Adds just completed. Readers learn the LAC from stored entries, which carry the LAC
        of their send time, so a writer with adds in flight has nothing to push: its next
        entries carry it. An idle one pushes its LAC at most once per explicit_lac_interval_ns:
        once the driver has taken the effects of the input that completed its adds (held for
        its bookies, it leaves when the driver pulls them), or, if its application added
        again within the interval the last time it went idle (one add at a time, say), on a
        timer due explicit_lac_hold_ns later, which the next add cancels (that entry carries
        the LAC). A timer due at once would race the application's next add (in trio the two
        wake together) and cost every add of a one-at-a-time writer a WriteLac to each bookie;
        one due an interval later would still wake the client once per add or so.

        A writer with lac_push_delay_ns set pushes only once it has been idle that long: its
        application adds in bursts with gaps shorter than that (a table range's journal, one
        group of commands at a time), and each push would cost every bookie a WriteLac per
        burst, as much as the burst's own add."""
        interval_ns = self.ctx.config.explicit_lac_interval_ns
        if interval_ns <= 0 or self.is_recovery or self._pending:
            return
        self._idle_since_ns = now_ns
        if self._explicit_lac_timer is not None:
            return
        if self.lac_push_delay_ns is not None:
            self._explicit_lac_timer = self.ctx.call_at(now_ns + self.lac_push_delay_ns,
                                                        self._on_explicit_lac_timeout)
            return
        sent_at_ns = self._explicit_lac_sent_at_ns
        if sent_at_ns is not None and now_ns < sent_at_ns + interval_ns:
            self._explicit_lac_timer = self.ctx.call_at(sent_at_ns + interval_ns, self._on_explicit_lac_timeout)
        elif self._adds_follow_at_once:
            self._explicit_lac_timer = self.ctx.call_at(now_ns + self.ctx.config.explicit_lac_hold_ns,
                                                        self._on_explicit_lac_timeout)
        elif self._lac_push_held_at_ns is None:
            # Held like an add, so that it leaves once the driver has taken this input's
            # effects (the completions): an application that adds again at once is not idle.
            self._lac_push_held_at_ns = now_ns
            self.ctx.hold(self, self.metadata.last_ensemble, now_ns)

    def _send_held_lac(self) -> None:
        at_ns, self._lac_push_held_at_ns = self._lac_push_held_at_ns, None
        self._push_lac(at_ns)

    def _on_explicit_lac_timeout(self, now_ns: int) -> None:
        self._explicit_lac_timer = None
        self._push_lac(now_ns)

    def _push_lac(self, now_ns: int) -> None:
        """Send the LAC to the ensemble if the writer is still idle and readers may not know it."""
        lac = self.last_add_confirmed
        if self.state is not WriterState.OPEN or self._pending or lac <= self._explicit_lac_sent:
            return
        self._explicit_lac_sent = lac
        self._explicit_lac_sent_at_ns = now_ns
        body = self.digester.pack_lac(lac)
        for bookie in self.metadata.last_ensemble:
            self.ctx.send_request(
                bookie, lambda request_id: WriteLacRequest(request_id=request_id, ledger_id=self.ledger_id,
                                                           master_key=self.master_key, lac=lac, body=body),
                lambda response, at_ns: None, timeout_ns=self.ctx.config.add_entry_timeout_ns, now_ns=now_ns)

    def force(self, op_id: int, *, now_ns: int) -> None:
        """Make every completed add durable on the ensemble; then it counts toward the LAC."""
        if self.state is WriterState.ERRORED:
            self._complete(op_id, error=self.error)
            return
        target, target_length = self.last_add_completed, self._completed_length
        ensemble = self.metadata.last_ensemble
        waiting = set(range(len(ensemble)))
        failure: list[BKException] = []

        def on_response(position: int, response, at_ns: int) -> None:
            if failure:
                return
            code = Code.TIMEOUT if response is None else response.code
            if code != Code.OK:
                failure.append(exception_for(code, f"ledger {self.ledger_id}: force failed on {ensemble[position]}"))
                self._complete(op_id, error=failure[0])
                return
            waiting.discard(position)
            if not waiting:
                if target > self.last_add_confirmed:
                    self.last_add_confirmed, self.confirmed_length = target, target_length
                self._complete(op_id, result=self.last_add_confirmed)

        for position, bookie in enumerate(ensemble):
            self.ctx.send_request(
                bookie, lambda request_id: ForceLedgerRequest(request_id=request_id, ledger_id=self.ledger_id,
                                                              master_key=self.master_key),
                lambda response, at_ns, p=position: on_response(p, response, at_ns),
                timeout_ns=self.ctx.config.add_entry_timeout_ns, now_ns=now_ns)

    def invariants(self) -> None:
        if self._held_for_all:       # add() counts on it: the writer is not idle
            assert self._idle_since_ns is None and self._pending
        # What is held for a bookie leaves when the driver pulls it: the driver was told of it.
        ensemble, named = self.metadata.ensembles[-1][1], self.ctx.held_destinations
        assert all(ensemble[position] in named for position in self._held)
        assert not self._held_for_all or all(bookie in named for bookie in ensemble)
        assert self.last_add_confirmed <= self.last_add_completed <= self.last_add_pushed
        if self._pending:
            assert self._pending[0][_ENTRY_ID] == self.last_add_completed + 1
            assert self._pending[0][_ACKS][_GROUP_FIRST_ENTRY_ID] == self._pending[0][_ENTRY_ID]
            assert self._pending[-1][_ENTRY_ID] == self.last_add_pushed
            assert self._pending[0][_ENTRY_ID] >= self.metadata.last_ensemble_start
