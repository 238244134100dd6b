"""Bookie: answers clients' adds, reads, fences and LAC requests; owns durability ordering.

Inputs: receive(message), on_persisted(token) when a JournalWrite is durable (or its two
halves, answer_persisted(token) then apply_persisted(), for a driver that writes the early
answers before the apply; or begin_persisted(token) then apply_persisted() in slices, for a
driver that serves other inputs between them), on_timer(now) when next_deadline_ns() is due.
Outputs: Send (responses) and JournalWrite effects. After a restart, replay_journal() (or
replay_records()) rebuilds storage before anything is served.

Batched adds (AddBatchRequest: consecutive entries of one ledger) are checked as a whole,
journaled as one ENTRIES record and answered once; otherwise they follow the rules of adds.

Rules that never bend:
- an add is acknowledged only after its journal record is durable (except deferred-sync adds,
  which are acknowledged once received and made durable by a later force or group);
- fencing is durable before the fence read is answered; from the moment a fence arrives, normal
  adds are refused with FENCED, recovery adds still accepted;
- a wrong master key is refused (UNAUTHORIZED) and changes nothing;
- records are applied to storage in journal order, by the same code as crash replay, so a
  restarted bookie is exactly the one that acknowledged;
- a stored entry that cannot be read is IO_ERROR, never NO_SUCH_ENTRY.

Group commit (BookKeeper's journal): records collect in a group; at most
journal_writes_in_flight_max JournalWrites are in flight; the group is written when there is
room for one more and its oldest record has waited journal_max_group_wait_ns, or it holds
journal_buffered_writes_threshold_size bytes, or journal_flush_when_queue_empty is set and
something waits on the group. Writes become durable in the order they were emitted (a driver
may sync several with one fdatasync), and on_persisted() is told in that order: it answers the
adds at the front of the group, applies the group's records, answers everything else that
waited on it, then writes the next group if it is due. Split in two inputs, the first
answers are effects the driver can take and write before the second applies the records. With two in flight, a driver writing one group can take the next the moment the first is
synced, instead of waiting for the answers to go out first (BookKeeper's journal thread keeps
writing while its force-write thread syncs). Two kinds of request are answered before their
record is journaled, and wait for no write: deferred-sync adds (their writer asked for that)
and explicit LACs (a hint for readers).

Limits: pending_adds_count_max (adds waiting for the journal), pending_syncs_count_max (fences
and forces waiting for it), journal_queue_size_max (bytes collected for the next
write), long_poll_waiters_count_max. Past any of them the request is refused with
TOO_MANY_REQUESTS and counted. Ill-typed input is counted as malformed and dropped.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from bkcore.bookie.journal import (
    RECORD_OVERHEAD_SIZE_MAX, RECORD_SIZE_MAX, EntriesRecord, EntryRecord, FenceRecord, ForceRecord, JournalRecord,
    LacRecord, MasterKeyRecord, RecordEncoder, scan_records,
)
from bkcore.bookie.longpoll import LongPollWaiters
from bkcore.bookie.storage import LedgerStorage, StorageIOError
from bkcore.digest import entries_are_of, peek_entry_header
from bkcore.effects import JournalWrite, Send
from bkcore.errors import Code
from bkcore.wire import (
    BATCH_ENTRY_COUNT_MAX, INVALID_ENTRY_ID, LAST_ENTRY_ID, AddBatchRequest, AddBatchResponse, AddRequest,
    AddResponse, ForceLedgerRequest, ForceLedgerResponse, READ_BATCH_SIZE_MAX, ReadBatchRequest, ReadBatchResponse,
    ReadLacRequest, ReadLacResponse, ReadRequest, ReadResponse, WriteLacRequest, WriteLacResponse,
)

MS = 1_000_000
KIB = 1024
MIB = 1024 * KIB
# apply_persisted() without a bound: all of the write at once.
RECORD_COUNT_UNBOUNDED = 1 << 62


class BookieUsageError(Exception):
    """The driver misused the bookie (unknown persisted token, replay after serving); nothing
    was changed."""


@dataclass(frozen=True, slots=True)
class BookieConfig:
    journal_max_group_wait_ns: int = 2 * MS                        # journalMaxGroupWaitMSec
    journal_buffered_writes_threshold_size: int = 512 * KIB        # journalBufferedWritesThreshold
    journal_flush_when_queue_empty: bool = False                   # journalFlushWhenQueueEmpty
    journal_queue_size_max: int = 64 * MIB       # bytes collected for the next write; over: refuse
    journal_writes_in_flight_max: int = 2        # JournalWrites emitted and not yet persisted
    pending_adds_count_max: int = 10_000         # maxAddsInProgressLimit; over: refuse
    pending_syncs_count_max: int = 10_000        # fences, LAC writes, forces waiting; over: refuse
    long_poll_waiters_count_max: int = 10_000    # over: refuse
    entry_size_max: int = 5 * MIB + 4096         # nettyMaxFrameSizeBytes-ish; also explicit LAC bodies
    master_key_size_max: int = 256               # keys are 32-byte digests; anything huge is bad input

    def __post_init__(self) -> None:
        for name in ("journal_max_group_wait_ns", "journal_buffered_writes_threshold_size", "pending_adds_count_max",
                     "pending_syncs_count_max", "long_poll_waiters_count_max", "master_key_size_max"):
            if getattr(self, name) < 0:
                raise ValueError(f"BookieConfig.{name} must be >= 0, not {getattr(self, name)}")
        if not 0 < self.entry_size_max <= RECORD_SIZE_MAX - RECORD_OVERHEAD_SIZE_MAX:
            raise ValueError(f"BookieConfig.entry_size_max {self.entry_size_max} must be positive and fit one "
                             f"journal record ({RECORD_SIZE_MAX} bytes)")
        if self.journal_writes_in_flight_max < 1:
            raise ValueError(f"BookieConfig.journal_writes_in_flight_max must be >= 1, "
                             f"not {self.journal_writes_in_flight_max}")
        # The largest request (a MASTER_KEY record and its ENTRY) must fit an empty queue.
        request_size_max = self.entry_size_max + self.master_key_size_max + 2 * RECORD_OVERHEAD_SIZE_MAX
        if self.journal_queue_size_max < request_size_max:
            raise ValueError(f"BookieConfig.journal_queue_size_max {self.journal_queue_size_max} must hold the "
                             f"largest request's records ({request_size_max} bytes)")


@dataclass(frozen=True, slots=True)
class ReplayReport:
    record_count: int
    entry_count: int
    master_key_count: int
    fence_count: int
    lac_count: int
    valid_size: int
    tail_problem: str | None


@dataclass(frozen=True, slots=True)
class BookieStatistics:
    adds_ok_count: int
    deferred_adds_count: int
    reads_count: int
    fences_count: int
    lac_writes_count: int
    forces_count: int
    long_polls_parked_count: int
    long_polls_timed_out_count: int
    rejected_by_code: tuple[tuple[str, int], ...]   # (code name, count), sorted by name
    malformed_count: int
    journal_writes_count: int
    journal_records_count: int
    journal_written_size: int
    added_size: int             # bytes of the entries of accepted adds (BookKeeper's WRITE_BYTES)
    read_size: int              # bytes of the entries answered to reads (READ_BYTES)
    journal_group_size_peak: int
    pending_adds_peak: int
    pending_syncs_peak: int
    long_poll_waiters_peak: int


class _Group:
    """Records collected for one JournalWrite and what waits on them. (A plain slotted class:
    one is made per group, and a dataclass's default factories cost a call per list.)"""

    __slots__ = ("started_at_ns", "chunks", "size", "records", "waiters")

    def __init__(self, *, started_at_ns: int) -> None:
        self.started_at_ns = started_at_ns
        self.chunks: list[bytes] = []       # encoded records
        self.size = 0                       # == sum of chunk sizes
        # Records to apply to storage once durable (deferred-sync adds were applied already). A
        # single add's AddRequest stands in for its EntryRecord (same fields; see _on_add).
        self.records: list[JournalRecord | AddRequest] = []
        # Requests answered once durable: (request, source).
        self.waiters: list[tuple[object, str]] = []


# Looked up once: reading an enum member off its class costs five times a plain attribute in
# CPython 3.11, and every add and read is answered with this one.
_OK = Code.OK
# What take_effects returns when there is nothing to do: shared, so asking allocates nothing.
# Drivers only iterate what they take.
_NO_EFFECTS: tuple = ()

# Ints the wire can carry (msgpack int64), tested with chained comparisons: a third of the
# cost of membership in a range.
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


# Validators of well-typed requests: exact field types (bool is not an int), ints in int64.
# Written out by hand: this runs for every request, and is several times faster than a loop.
def _is_add_request(m: AddRequest) -> bool:
    return (type(m.request_id) is int and type(m.ledger_id) is int and type(m.entry_id) is int
            and type(m.master_key) is bytes and type(m.body) is bytes and type(m.is_recovery) is bool
            and type(m.is_deferred_sync) is bool
            and _INT64_MIN <= m.request_id <= _INT64_MAX and _INT64_MIN <= m.ledger_id <= _INT64_MAX
            and _INT64_MIN <= m.entry_id <= _INT64_MAX)


_BYTES_ONLY = frozenset({bytes})


def _is_add_batch_request(m: AddBatchRequest) -> bool:
    return (type(m.request_id) is int and type(m.ledger_id) is int and type(m.first_entry_id) is int
            and type(m.master_key) is bytes and type(m.bodies) is list and type(m.is_recovery) is bool
            and type(m.is_deferred_sync) is bool and 0 < len(m.bodies) <= BATCH_ENTRY_COUNT_MAX
            and _BYTES_ONLY.issuperset(map(type, m.bodies))
            and _INT64_MIN <= m.request_id <= _INT64_MAX and _INT64_MIN <= m.ledger_id <= _INT64_MAX
            and _INT64_MIN <= m.first_entry_id <= _INT64_MAX
            and _INT64_MIN <= m.first_entry_id + len(m.bodies) - 1 <= _INT64_MAX)


def _is_read_request(m: ReadRequest) -> bool:
    return (type(m.request_id) is int and type(m.ledger_id) is int and type(m.entry_id) is int
            and type(m.master_key) is bytes and type(m.is_fencing) is bool and type(m.previous_lac) is int
            and type(m.long_poll_timeout_ns) is int
            and _INT64_MIN <= m.request_id <= _INT64_MAX and _INT64_MIN <= m.ledger_id <= _INT64_MAX
            and _INT64_MIN <= m.entry_id <= _INT64_MAX and _INT64_MIN <= m.previous_lac <= _INT64_MAX
            and _INT64_MIN <= m.long_poll_timeout_ns <= _INT64_MAX)


def _is_read_batch_request(m: ReadBatchRequest) -> bool:
    return (type(m.request_id) is int and type(m.ledger_id) is int and type(m.first_entry_id) is int
            and type(m.count_max) is int and type(m.size_max) is int
            and _INT64_MIN <= m.request_id <= _INT64_MAX and _INT64_MIN <= m.ledger_id <= _INT64_MAX
            and _INT64_MIN <= m.first_entry_id <= _INT64_MAX and _INT64_MIN <= m.count_max <= _INT64_MAX
            and _INT64_MIN <= m.size_max <= _INT64_MAX)


def _is_read_lac_request(m: ReadLacRequest) -> bool:
    return (type(m.request_id) is int and type(m.ledger_id) is int
            and _INT64_MIN <= m.request_id <= _INT64_MAX and _INT64_MIN <= m.ledger_id <= _INT64_MAX)


def _is_write_lac_request(m: WriteLacRequest) -> bool:
    return (type(m.request_id) is int and type(m.ledger_id) is int and type(m.master_key) is bytes
            and type(m.lac) is int and type(m.body) is bytes
            and _INT64_MIN <= m.request_id <= _INT64_MAX and _INT64_MIN <= m.ledger_id <= _INT64_MAX
            and _INT64_MIN <= m.lac <= _INT64_MAX)


def _is_force_ledger_request(m: ForceLedgerRequest) -> bool:
    return (type(m.request_id) is int and type(m.ledger_id) is int and type(m.master_key) is bytes
            and _INT64_MIN <= m.request_id <= _INT64_MAX and _INT64_MIN <= m.ledger_id <= _INT64_MAX)


def _entry_count(request: AddRequest | AddBatchRequest) -> int:
    return 1 if type(request) is AddRequest else len(request.bodies)


def _add_answer(request: AddRequest | AddBatchRequest, code: Code) -> AddResponse | AddBatchResponse:
    if type(request) is AddRequest:
        return AddResponse(request.request_id, code, request.ledger_id, request.entry_id)
    return AddBatchResponse(request.request_id, code, request.ledger_id, request.first_entry_id, len(request.bodies))


class _Counts:
    """The counts and peaks statistics() reports (attributes: cheaper than a dict per request)."""

    __slots__ = ("adds_ok", "deferred_adds", "reads", "fences", "lac_writes", "forces", "long_polls_parked",
                 "long_polls_timed_out", "malformed", "journal_writes", "journal_records", "journal_written_size",
                 "added_size", "read_size",
                 "journal_group_size_peak", "pending_adds_peak", "pending_syncs_peak")

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)


class Bookie:
    """Owns the journal group commit, fencing state, the known LAC per ledger and parked long
    polls; ledger contents live in `storage`."""

    def __init__(self, *, bookie_id: str, config: BookieConfig, storage: LedgerStorage) -> None:
        self.bookie_id = bookie_id
        self.config = config
        self.storage = storage
        self._effects: list = []
        self._is_readonly = False
        self._has_served = False   # replay is refused once anything was received
        # Ledgers fenced in memory whose FENCE record is not applied yet (then storage says so).
        self._fenced: set[int] = set()
        # Master keys of ledgers first seen now, until their MASTER_KEY record is applied.
        self._pending_master_keys: dict[int, bytes] = {}
        # Known LAC per ledger: max of the LACs piggybacked on stored entries and the explicit
        # LAC. Loaded lazily from storage (the last entry's header) on first use, so it is right
        # after a restart from checkpointed storage too; pruned of deleted ledgers as it grows.
        self._known_lac: dict[int, int] = {}
        self._known_lac_prune_at_count = 1024
        self._collecting: _Group | None = None
        self._encoder = RecordEncoder()
        # (token, group) of every JournalWrite emitted and not yet persisted, oldest first.
        self._in_flight: deque[tuple[int, _Group]] = deque()
        self._in_flight_max = config.journal_writes_in_flight_max
        # The group answer_persisted() or begin_persisted() took off _in_flight, until
        # apply_persisted() has applied all of it (None otherwise), and its token. Of it: how
        # many records are applied, how many waiters have their record applied (every record
        # but a MASTER_KEY or an explicit LAC has one waiter, appended right after it), and how
        # many waiters are answered. answer_persisted() answers the adds at its front before
        # any record is applied: until all are, every other input is refused (nobody may see
        # storage without the records of adds already answered).
        self._unapplied: _Group | None = None
        self._unapplied_token = 0
        self._unapplied_applied_count = 0
        self._unapplied_ready_count = 0
        self._unapplied_answered_count = 0
        self._has_early_answers = False
        self._next_token = 1
        # The last JournalWrite whose records are all applied to storage (0: none since start):
        # a checkpoint's LastLogMark may cover it and nothing after (BookieStack).
        self.applied_token = 0
        self._pending_adds_count = 0
        self._pending_syncs_count = 0
        self._long_polls = LongPollWaiters(count_max=config.long_poll_waiters_count_max)
        self._counts = _Counts()
        self._rejected: dict[str, int] = {}

    # -- driver interface -----------------------------------------------------------------

    @property
    def is_readonly(self) -> bool:
        return self._is_readonly

    def set_readonly(self, is_readonly: bool) -> None:
        self._is_readonly = is_readonly

    @property
    def journal_waiter_count(self) -> int:
        """Requests waiting for the journal (a graceful shutdown waits for this to reach 0)."""
        return self._pending_adds_count + self._pending_syncs_count

    @property
    def journal_queued_size(self) -> int:
        """Bytes of records not yet in storage: the write being applied (all of it, until it
        is), the journal writes in flight and the group collected for the next one (what
        persisting them will add to storage, at most)."""
        return ((0 if self._collecting is None else self._collecting.size)
                + (0 if self._unapplied is None else self._unapplied.size)
                + sum(group.size for _, group in self._in_flight))

    def take_effects(self) -> list | tuple:
        effects = self._effects
        if not effects:
            return _NO_EFFECTS      # most inputs (adds waiting for their group) leave none
        self._effects = []
        return effects

    def next_deadline_ns(self) -> int | None:
        # Asked after every input: two candidates compared by hand, no list.
        poll_deadline = self._long_polls.next_deadline_ns()
        if self._collecting is None or len(self._in_flight) >= self._in_flight_max:
            return poll_deadline
        group_deadline = self._collecting.started_at_ns + self.config.journal_max_group_wait_ns
        if poll_deadline is None or group_deadline <= poll_deadline:
            return group_deadline
        return poll_deadline

    def on_timer(self, now_ns: int) -> None:
        if self._has_early_answers:
            self._refuse_before_apply()
        poll_deadline = self._long_polls.next_deadline_ns()
        if poll_deadline is not None and poll_deadline <= now_ns:    # else none has expired
            for waiter in self._long_polls.pop_expired(now_ns):
                self._counts.long_polls_timed_out += 1
                self._answer_read(waiter.request, waiter.source)
        self._maybe_flush(now_ns)

    def receive(self, message: object, *, source: str, now_ns: int) -> None:
        """receive_batch() of one message, without building the batch."""
        if self._has_early_answers:
            self._refuse_before_apply()
        self._has_served = True
        row = _REQUEST_TABLE.get(type(message))
        if row is None or not row[0](message):
            self._counts.malformed += 1
        else:
            row[1](self, message, source, now_ns)
        if self._collecting is not None and len(self._in_flight) < self._in_flight_max:   # else none due
            self._maybe_flush(now_ns)

    def receive_batch(self, messages, *, source: str, now_ns: int) -> None:
        """Handle every request of one receive buffer, then decide about the journal once: a
        bookie flushing "when the queue is empty" treats the end of a batch as empty."""
        if self._has_early_answers:
            self._refuse_before_apply()
        self._has_served = True
        for message in messages:
            row = _REQUEST_TABLE.get(type(message))
            if row is None or not row[0](message):
                self._counts.malformed += 1
                continue
            row[1](self, message, source, now_ns)
        self._maybe_flush(now_ns)

    def on_persisted(self, token: int, now_ns: int) -> None:
        """The JournalWrite `token` is durable: the oldest in flight (they persist in order).
        Everything that waited on it is answered and its records are applied to storage:
        answer_persisted() and apply_persisted() as one input, for a driver that has nothing
        to write before the apply."""
        self.answer_persisted(token, now_ns)
        self.apply_persisted(now_ns)

    def answer_persisted(self, token: int, now_ns: int) -> None:
        """The first half of on_persisted(): the JournalWrite `token` is durable, and the Sends
        acknowledging the adds at the front of its group (all of them, unless a fence read or
        force waits among them) become effects now. Its records wait for apply_persisted(),
        which must be the next input. A driver that puts answers on the wire itself takes these
        effects and writes them in between, so that a client hears of its add while the bookie
        still applies it. The adds are durable, so they may be acknowledged first; and no
        other input reaches this bookie before apply_persisted() (any other is refused), so
        nobody can see storage without them."""
        self._take_persisted(token)
        self._unapplied_answered_count = self._answer_adds(self._unapplied.waiters, self._effects)
        self._has_early_answers = True

    def begin_persisted(self, token: int) -> None:
        """on_persisted() in slices, for a driver that serves other inputs between them: the
        JournalWrite `token` is durable, and apply_persisted(record_count_max=...) applies its
        records a slice at a time until is_applying is false, each slice answering the requests
        whose records it applied (in order: those are the records of every earlier request too).
        Other inputs may come between two slices: storage holds every record of a request
        answered, and some of the others, as it might before a write is synced. The next write
        waits for this one."""
        self._take_persisted(token)

    def _take_persisted(self, token: int) -> None:
        if self._unapplied is not None:
            raise BookieUsageError(f"journal token {token} is durable, but write {self._unapplied_token} is still "
                                   f"being applied: apply_persisted() finishes it first (they apply in order)")
        in_flight = self._in_flight
        if not in_flight or in_flight[0][0] != token:
            raise BookieUsageError(f"journal token {token} is not the oldest write in flight "
                                   f"({in_flight[0][0] if in_flight else 'none'})")
        self._unapplied_token, self._unapplied = in_flight.popleft()
        self._unapplied_applied_count = self._unapplied_ready_count = self._unapplied_answered_count = 0

    def apply_persisted(self, now_ns: int, *, record_count_max: int = RECORD_COUNT_UNBOUNDED) -> int:
        """The second half of on_persisted(): apply the records of the write answer_persisted()
        or begin_persisted() was told of, in order, at most record_count_max of them, and return
        how many; answer, in order, what waited on the records applied and was not answered
        early (fence reads and forces see every record before theirs). Once all are applied,
        write the next group if it is due. (A record costs about the same whoever sent it: one
        entry or a batch's ENTRIES record, applied, then one answer.)"""
        group = self._unapplied
        if group is None:
            raise BookieUsageError("apply_persisted() without a write told durable by answer_persisted() or "
                                   "begin_persisted()")
        storage = self.storage
        records = group.records
        index = self._unapplied_applied_count
        record_count = len(records)
        ready_count = self._unapplied_ready_count
        end = min(record_count, index + record_count_max)
        applied_count = end - index
        while index < end:
            record = records[index]
            index += 1
            if type(record) is AddRequest or type(record) is EntryRecord:
                # _apply of an entry, spelled out (nearly every record is one; see _on_add).
                ledger_id = record.ledger_id
                body = record.body
                storage.add_entry(ledger_id, record.entry_id, body)
                header = peek_entry_header(body)
                if header is not None:
                    known = self._known_lac.get(ledger_id)    # (_cache_lac may replace the dict)
                    if known is None or header[2] > known:        # else _learn_lac does nothing
                        self._learn_lac(ledger_id, header[2])
                ready_count += 1
            else:
                self._apply(record)
                kind = type(record)
                if kind is not MasterKeyRecord and kind is not LacRecord:
                    ready_count += 1
        self._unapplied_applied_count = index
        self._unapplied_ready_count = ready_count
        answered_count = self._unapplied_answered_count
        if answered_count < ready_count:
            waiters = group.waiters
            is_all = ready_count == len(waiters) and not answered_count
            ready = waiters if is_all else waiters[answered_count:ready_count]
            for request, source in ready[self._answer_adds(ready, self._effects):]:
                self._complete(request, source)
            self._unapplied_answered_count = ready_count
        if index < record_count:
            return applied_count
        self._unapplied = None
        self._has_early_answers = False
        self.applied_token = self._unapplied_token
        self._maybe_flush(now_ns)
        return applied_count

    @property
    def is_applying(self) -> bool:
        """Whether a write told durable by answer_persisted() or begin_persisted() has records
        apply_persisted() has not applied yet."""
        return self._unapplied is not None

    def _refuse_before_apply(self) -> None:
        raise BookieUsageError("a write told durable by answer_persisted() awaits apply_persisted(); "
                               "no other input may come first")

    def _answer_adds(self, waiters: list[tuple[object, str]], answers: list) -> int:
        """Append to `answers` the Sends acknowledging the adds at the front of `waiters`, up to
        the first request of another kind; returns how many it answered. (_complete of an add,
        spelled out: this runs for every add.)"""
        counts = self._counts
        answered_count = 0
        for request, source in waiters:
            kind = type(request)
            if kind is AddRequest:
                self._pending_adds_count -= 1
                counts.adds_ok += 1
                answers.append(Send(source, AddResponse(request.request_id, _OK, request.ledger_id,
                                                        request.entry_id)))
            elif kind is AddBatchRequest:
                entry_count = len(request.bodies)
                self._pending_adds_count -= entry_count
                counts.adds_ok += entry_count
                answers.append(Send(source, AddBatchResponse(request.request_id, _OK, request.ledger_id,
                                                             request.first_entry_id, entry_count)))
            else:
                break
            answered_count += 1
        return answered_count

    # -- crash replay ---------------------------------------------------------------------

    def replay_journal(self, data: bytes) -> ReplayReport:
        """Rebuild storage from one journal's bytes after a restart, before serving. A torn
        tail is tolerated and reported; corruption in the middle raises JournalCorrupted."""
        scan = scan_records(data)
        counts = self._replay(scan.records)
        return ReplayReport(len(scan.records), counts[EntryRecord], counts[MasterKeyRecord], counts[FenceRecord],
                            counts[LacRecord], scan.valid_size, scan.tail_problem)

    def replay_records(self, records: list[JournalRecord]) -> int:
        """Apply already-scanned journal records in order (see journal_files.Journal.open);
        returns how many were entries."""
        return self._replay(records)[EntryRecord]

    def _replay(self, records: list[JournalRecord]) -> dict[type, int]:
        if self._has_served:
            raise BookieUsageError("replay the journal before serving: this bookie has received requests")
        counts = dict.fromkeys((EntryRecord, MasterKeyRecord, FenceRecord, LacRecord, ForceRecord), 0)
        for record in records:
            self._apply(record)
            if type(record) is EntriesRecord:
                counts[EntryRecord] += len(record.bodies)   # counted as the entries they hold
            else:
                counts[type(record)] += 1
        return counts

    # -- journal --------------------------------------------------------------------------

    def _has_room(self, size: int) -> bool:
        collected = 0 if self._collecting is None else self._collecting.size
        return collected + size <= self.config.journal_queue_size_max

    def _journal(self, record: JournalRecord, now_ns: int, *, should_apply: bool = True) -> None:
        group = self._collecting
        if group is None:
            group = self._collecting = _Group(started_at_ns=now_ns)
        data = self._encoder.encode(record)
        group.chunks.append(data)
        group.size += len(data)
        if should_apply:
            group.records.append(record)
        self._counts.journal_records += 1

    def _wait_for_journal(self, request: object, source: str) -> None:
        assert self._collecting is not None, "journal the record before waiting on it"
        self._collecting.waiters.append((request, source))
        kind = type(request)
        if kind is AddRequest or kind is AddBatchRequest:
            self._pending_adds_count += 1 if kind is AddRequest else len(request.bodies)
            if self._pending_adds_count > self._counts.pending_adds_peak:
                self._counts.pending_adds_peak = self._pending_adds_count
        else:
            self._pending_syncs_count += 1
            if self._pending_syncs_count > self._counts.pending_syncs_peak:
                self._counts.pending_syncs_peak = self._pending_syncs_count

    def _maybe_flush(self, now_ns: int) -> None:
        group = self._collecting
        if group is None or len(self._in_flight) >= self._in_flight_max:
            return
        config = self.config
        # (A group nobody waits for, only LAC hints and deferred-sync adds, is not flushed just
        # because the queue is empty: it waits for a group that has waiters, or its time.)
        if not ((config.journal_flush_when_queue_empty and group.waiters)
                or group.size >= config.journal_buffered_writes_threshold_size
                or now_ns - group.started_at_ns >= config.journal_max_group_wait_ns):
            return
        token = self._next_token
        self._next_token += 1
        self._collecting = None
        self._in_flight.append((token, group))
        counts = self._counts
        counts.journal_writes += 1
        counts.journal_written_size += group.size
        if group.size > counts.journal_group_size_peak:     # (max(), spelled out: once per group)
            counts.journal_group_size_peak = group.size
        entry_count = 0
        for request, _ in group.waiters:        # (once per group, not per add)
            kind = type(request)
            if kind is AddRequest or kind is AddBatchRequest:
                entry_count += _entry_count(request)
        self._effects.append(JournalWrite(token, group.chunks, group.size, entry_count, group.started_at_ns))

    def _apply(self, record: JournalRecord) -> None:
        """Apply one durable record to storage; crash replay and live persistence share this.
        (Exact type tests, most frequent first: records are final classes, and this runs for
        every record.)"""
        storage = self.storage
        kind = type(record)
        if kind is EntryRecord:
            ledger_id = record.ledger_id
            body = record.body
            storage.add_entry(ledger_id, record.entry_id, body)
            header = peek_entry_header(body)
            if header is not None:
                self._learn_lac(ledger_id, header[2])
        elif kind is EntriesRecord:
            ledger_id = record.ledger_id
            first_entry_id = record.first_entry_id
            bodies = record.bodies
            storage.add_entries(ledger_id, first_entry_id, bodies)
            header = peek_entry_header(bodies[-1])    # LACs rise with entry ids
            if header is not None:
                self._learn_lac(ledger_id, header[2])
        elif kind is MasterKeyRecord:
            ledger_id = record.ledger_id
            master_key = record.master_key
            storage.set_master_key(ledger_id, master_key)
            if self._pending_master_keys.get(ledger_id) == master_key:
                del self._pending_master_keys[ledger_id]
        elif kind is FenceRecord:
            ledger_id = record.ledger_id
            storage.set_fenced(ledger_id)
            self._fenced.discard(ledger_id)
            self._wake_long_polls(ledger_id)
        elif kind is LacRecord:
            storage.set_explicit_lac(record.ledger_id, record.lac, record.body)
            self._learn_lac(record.ledger_id, record.lac)

    def _complete(self, request: object, source: str) -> None:
        """Answer a request whose records are now durable (adds mostly go by _answer_adds: an
        add comes here only behind a fence read or force in its group)."""
        if type(request) is AddRequest or type(request) is AddBatchRequest:
            self._answer_adds([(request, source)], self._effects)
            return
        self._pending_syncs_count -= 1
        match request:
            case ReadRequest():
                self._answer_read(request, source)
            case WriteLacRequest():
                self._send(source, WriteLacResponse(request.request_id, _OK, request.ledger_id))
            case ForceLedgerRequest():
                self._send(source, ForceLedgerResponse(request.request_id, _OK, request.ledger_id))

    # -- ledger state ---------------------------------------------------------------------

    def _known_key(self, ledger_id: int) -> bytes | None:
        key = self.storage.master_key(ledger_id)
        return key if key is not None else self._pending_master_keys.get(ledger_id)

    def _journal_key_if_new(self, ledger_id: int, master_key: bytes, now_ns: int) -> None:
        if self._known_key(ledger_id) is None:
            self._pending_master_keys[ledger_id] = master_key
            self._journal(MasterKeyRecord(ledger_id, master_key), now_ns)

    def _is_fenced(self, ledger_id: int) -> bool:
        return ledger_id in self._fenced or self.storage.is_fenced(ledger_id)

    def _lac_of(self, ledger_id: int) -> int:
        lac = self._known_lac.get(ledger_id)
        if lac is not None:
            return lac
        if not self.storage.has_ledger(ledger_id):
            return INVALID_ENTRY_ID
        lac = INVALID_ENTRY_ID
        explicit = self.storage.explicit_lac(ledger_id)
        if explicit is not None:
            lac = explicit[0]
        last_entry_id = self.storage.last_entry_id(ledger_id)
        if last_entry_id >= 0:
            try:
                header = peek_entry_header(self.storage.get_entry(ledger_id, last_entry_id) or b"")
            except StorageIOError:
                return lac   # not cached: the next query tries storage again
            if header is not None:
                lac = max(lac, header[2])
        self._cache_lac(ledger_id, lac)
        return lac

    def _cache_lac(self, ledger_id: int, lac: int) -> None:
        self._known_lac[ledger_id] = lac
        if len(self._known_lac) > self._known_lac_prune_at_count:
            # Amortized: drop ledgers storage no longer has (deleted by GC).
            self._known_lac = {i: v for i, v in self._known_lac.items() if self.storage.has_ledger(i)}
            self._known_lac_prune_at_count = max(1024, 2 * len(self._known_lac))

    def _learn_lac(self, ledger_id: int, lac: int) -> None:
        """A stored entry or explicit LAC carries `lac` (already applied to storage)."""
        known = self._known_lac.get(ledger_id)
        if known is None:
            # Not loaded: the next _lac_of() reads storage, which already holds this. Only
            # waiters parked on a ledger unknown at the time need waking now.
            if self._long_polls.has_waiters(ledger_id):
                self._wake_long_polls(ledger_id)
        elif lac > known:
            self._known_lac[ledger_id] = lac
            self._wake_long_polls(ledger_id)

    def _wake_long_polls(self, ledger_id: int) -> None:
        if not self._long_polls.has_waiters(ledger_id):
            return
        ready = self._long_polls.pop_ready(ledger_id, lac=self._lac_of(ledger_id), is_fenced=self._is_fenced(ledger_id))
        for waiter in ready:
            self._answer_read(waiter.request, waiter.source)

    def _reject(self, code: Code) -> Code:
        self._rejected[code.name] = self._rejected.get(code.name, 0) + 1
        return code

    def _send(self, destination: str, message: object) -> None:
        self._effects.append(Send(destination, message))

    # -- handlers -------------------------------------------------------------------------

    def _on_add(self, request: AddRequest, source: str, now_ns: int) -> None:
        ledger_id = request.ledger_id
        body = request.body
        # The shape checks of _check_add for one body, from the one header peek that also gives
        # the LAC it carries (entries_are_of of a single body, without building its lists).
        header = peek_entry_header(body)
        if (header is None or header[0] != ledger_id or header[1] != request.entry_id
                or len(body) > self.config.entry_size_max):
            code, known_key = self._reject(Code.BAD_REQUEST), None
        else:
            code, known_key = self._check_add_state(ledger_id, request.master_key, request.is_recovery,
                                                    request.is_deferred_sync, request.entry_id, 1,
                                                    len(body) + RECORD_OVERHEAD_SIZE_MAX)
        if code != _OK:
            self._send(source, AddResponse(request.request_id, code, ledger_id, request.entry_id))
            return
        self._learn_lac_on_receipt(ledger_id, header[2])
        if request.is_deferred_sync:
            self._store_adds(request, EntryRecord(ledger_id, request.entry_id, request.body), source, now_ns)
            return
        # _store_adds -> _journal and _wait_for_journal for the common case (one add, synced),
        # spelled out: this runs for every entry a bookie stores. The request itself stands in
        # for its ENTRY record among the group's records (same ledger_id, entry_id and body).
        if known_key is None:
            self._journal_key_if_new(ledger_id, request.master_key, now_ns)    # the ledger's first add
        group = self._collecting
        if group is None:
            group = self._collecting = _Group(started_at_ns=now_ns)
        data = self._encoder.encode_entry(ledger_id, request.entry_id, request.body)
        group.chunks.append(data)
        group.size += len(data)
        group.records.append(request)
        group.waiters.append((request, source))
        counts = self._counts
        counts.journal_records += 1
        counts.added_size += len(body)
        self._pending_adds_count += 1
        if self._pending_adds_count > counts.pending_adds_peak:
            counts.pending_adds_peak = self._pending_adds_count

    def _on_add_batch(self, request: AddBatchRequest, source: str, now_ns: int) -> None:
        code, _ = self._check_add(request.ledger_id, request.master_key, request.is_recovery,
                                  request.is_deferred_sync, request.first_entry_id, request.bodies)
        if code != _OK:
            self._send(source, AddBatchResponse(request.request_id, code, request.ledger_id, request.first_entry_id,
                                                len(request.bodies)))
            return
        self._learn_lac_on_receipt(request.ledger_id, peek_entry_header(request.bodies[-1])[2])
        record = EntriesRecord(request.ledger_id, request.first_entry_id, request.bodies)
        self._store_adds(request, record, source, now_ns)

    def _learn_lac_on_receipt(self, ledger_id: int, lac: int) -> None:
        """The LAC an accepted add carries, or an explicit LAC, is true as soon as the writer
        sent it (every entry up to it has its ack quorum), whether or not the record carrying
        it ever becomes durable here: learn it now, as BookKeeper's bookies do, so that
        long-polling readers are answered when it arrives rather than once it is journaled.
        (A ledger not loaded yet learns its LAC from storage later, as usual.)"""
        known = self._known_lac.get(ledger_id)
        if known is not None and lac > known:
            self._known_lac[ledger_id] = lac
            self._wake_long_polls(ledger_id)

    def _store_adds(self, request: AddRequest | AddBatchRequest, record: EntryRecord | EntriesRecord,
                    source: str, now_ns: int) -> None:
        ledger_id = request.ledger_id
        self._journal_key_if_new(ledger_id, request.master_key, now_ns)
        self._counts.added_size += (len(request.body) if type(request) is AddRequest
                                    else sum(map(len, request.bodies)))
        if request.is_deferred_sync:
            # Applied and answered now; journaled for durability by a later group or force.
            self.storage.set_master_key(ledger_id, request.master_key)
            self._apply(record)
            self._journal(record, now_ns, should_apply=False)
            count = _entry_count(request)
            self._counts.adds_ok += count
            self._counts.deferred_adds += count
            self._send(source, _add_answer(request, _OK))
            return
        self._journal(record, now_ns)
        self._wait_for_journal(request, source)

    def _check_add(self, ledger_id: int, master_key: bytes, is_recovery: bool, is_deferred_sync: bool,
                   first_entry_id: int, bodies) -> tuple[Code, bytes | None]:
        """Checks of a batch of adds; it passes or fails as a whole. Returns the code and, once
        the checks reach it, the ledger's known key (_known_key: None for a ledger this bookie
        has not seen), which the caller journals if it is new. (_on_add makes the same shape
        checks of its one body itself, then asks _check_add_state.)"""
        body_sizes = list(map(len, bodies))
        if max(body_sizes) > self.config.entry_size_max or not entries_are_of(bodies, ledger_id, first_entry_id):
            return self._reject(Code.BAD_REQUEST), None
        return self._check_add_state(ledger_id, master_key, is_recovery, is_deferred_sync, first_entry_id,
                                     len(bodies), sum(body_sizes) + len(bodies) * RECORD_OVERHEAD_SIZE_MAX)

    def _check_add_state(self, ledger_id: int, master_key: bytes, is_recovery: bool, is_deferred_sync: bool,
                         first_entry_id: int, entry_count: int, size: int) -> tuple[Code, bytes | None]:
        """The checks of adds whose bodies are well formed: `entry_count` entries whose records
        take at most `size` bytes. Returns as _check_add.
        (Runs for every add: _known_key, _is_fenced and _has_room are spelled out here.)"""
        config = self.config
        master_key_size = len(master_key)
        if master_key_size > config.master_key_size_max or first_entry_id < 0:
            return self._reject(Code.BAD_REQUEST), None
        if self._is_readonly and not is_recovery:
            return self._reject(Code.READONLY), None
        storage = self.storage
        known = storage.master_key(ledger_id)
        if known is None:
            known = self._pending_master_keys.get(ledger_id)
        if known is not None and known != master_key:
            return self._reject(Code.UNAUTHORIZED), known
        if not is_recovery and (ledger_id in self._fenced or storage.is_fenced(ledger_id)):
            return self._reject(Code.FENCED), known
        collected_size = 0 if self._collecting is None else self._collecting.size
        if ((not is_deferred_sync and self._pending_adds_count + entry_count > config.pending_adds_count_max)
                or collected_size + size + master_key_size + RECORD_OVERHEAD_SIZE_MAX > config.journal_queue_size_max):
            return self._reject(Code.TOO_MANY_REQUESTS), known
        return _OK, known

    def _check_key(self, ledger_id: int, master_key: bytes, *, may_create: bool) -> Code:
        """Key check of fences, LAC writes and forces (adds check in _check_add)."""
        if len(master_key) > self.config.master_key_size_max:
            return self._reject(Code.BAD_REQUEST)
        known = self._known_key(ledger_id)
        if known is None and not may_create:
            return self._reject(Code.NO_SUCH_LEDGER)
        if known is not None and known != master_key:
            return self._reject(Code.UNAUTHORIZED)
        return _OK

    def _check_sync_room(self, size: int) -> Code:
        """Room for one more request waiting on the journal with `size` bytes of records."""
        if self._pending_syncs_count >= self.config.pending_syncs_count_max or not self._has_room(size):
            return self._reject(Code.TOO_MANY_REQUESTS)
        return _OK

    def _on_fence(self, request: ReadRequest, source: str, now_ns: int) -> None:
        """A recovery read: fence the ledger durably, then answer the read."""
        self._counts.reads += 1
        ledger_id = request.ledger_id
        code = self._check_key(ledger_id, request.master_key, may_create=True)
        if code == _OK and self.storage.is_fenced(ledger_id):
            self._counts.fences += 1
            self._answer_read(request, source)          # durably fenced already
            return
        if code == _OK:
            code = self._check_sync_room(len(request.master_key) + 2 * RECORD_OVERHEAD_SIZE_MAX)
        if code != _OK:
            self._send_read(source, request, code)
            return
        self._counts.fences += 1
        self._journal_key_if_new(ledger_id, request.master_key, now_ns)
        self._fenced.add(ledger_id)
        self._journal(FenceRecord(ledger_id), now_ns)
        self._wait_for_journal(request, source)

    def _on_read(self, request: ReadRequest, source: str, now_ns: int) -> None:
        if request.is_fencing:
            self._on_fence(request, source, now_ns)
            return
        self._counts.reads += 1
        ledger_id = request.ledger_id
        if (request.long_poll_timeout_ns > 0 and self._lac_of(ledger_id) <= request.previous_lac
                and not self._is_fenced(ledger_id)):
            if self._long_polls.park(request, source, deadline_ns=now_ns + request.long_poll_timeout_ns):
                self._counts.long_polls_parked += 1
            else:
                self._send_read(source, request, self._reject(Code.TOO_MANY_REQUESTS))
            return
        self._answer_read(request, source)

    def _answer_read(self, request: ReadRequest, source: str) -> None:
        ledger_id = request.ledger_id
        if not self.storage.has_ledger(ledger_id):
            is_waited = request.is_fencing or request.long_poll_timeout_ns > 0
            self._send_read(source, request, Code.NO_SUCH_ENTRY if is_waited else Code.NO_SUCH_LEDGER)
            return
        entry_id = request.entry_id
        if entry_id == LAST_ENTRY_ID:
            entry_id = self.storage.last_entry_id(ledger_id)
        try:
            body = self.storage.get_entry(ledger_id, entry_id) if entry_id >= 0 else None
        except StorageIOError:
            self._send_read(source, request, self._reject(Code.IO_ERROR))
            return
        if body is None:
            self._send_read(source, request, Code.NO_SUCH_ENTRY)
            return
        # The entry, with the LAC this bookie knows (_lac_of, its cached case spelled out).
        self._counts.read_size += len(body)
        lac = self._known_lac.get(ledger_id)
        self._effects.append(Send(source, ReadResponse(request.request_id, _OK, ledger_id, entry_id, body,
                                                       self._lac_of(ledger_id) if lac is None else lac)))

    def _send_read(self, source: str, request: ReadRequest, code: Code) -> None:
        """Answer a read without an entry (an entry is sent by _answer_read)."""
        self._send(source, ReadResponse(request.request_id, code, request.ledger_id, request.entry_id, b"",
                                        self._lac_of(request.ledger_id)))

    def _on_read_batch(self, request: ReadBatchRequest, source: str, now_ns: int) -> None:
        """The entries held from first_entry_id on, up to count_max of them and size_max bytes
        (at least the first), stopping before the first one missing or unreadable. An error
        code only when not even the first can be sent."""
        self._counts.reads += 1
        ledger_id, first_entry_id = request.ledger_id, request.first_entry_id
        count_max = request.count_max
        if first_entry_id < 0 or not 0 < count_max <= BATCH_ENTRY_COUNT_MAX or request.size_max <= 0:
            self._send_read_batch(source, request, self._reject(Code.BAD_REQUEST), [])
            return
        storage = self.storage
        if not storage.has_ledger(ledger_id):
            self._send_read_batch(source, request, Code.NO_SUCH_LEDGER, [])
            return
        size_max = min(request.size_max, READ_BATCH_SIZE_MAX)
        try:
            bodies = storage.get_entries(ledger_id, first_entry_id, count_max, size_max)
        except StorageIOError:
            self._send_read_batch(source, request, self._reject(Code.IO_ERROR), [])
            return
        self._counts.read_size += sum(map(len, bodies))
        self._send_read_batch(source, request, _OK if bodies else Code.NO_SUCH_ENTRY, bodies)

    def _send_read_batch(self, source: str, request: ReadBatchRequest, code: Code, bodies: list[bytes]) -> None:
        self._send(source, ReadBatchResponse(request.request_id, code, request.ledger_id, request.first_entry_id,
                                             self._lac_of(request.ledger_id), bodies))

    def _on_read_lac(self, request: ReadLacRequest, source: str, now_ns: int) -> None:
        ledger_id = request.ledger_id
        if not self.storage.has_ledger(ledger_id):
            self._send(source, ReadLacResponse(request.request_id, Code.NO_SUCH_LEDGER, ledger_id))
            return
        explicit = self.storage.explicit_lac(ledger_id)
        last_entry_id = self.storage.last_entry_id(ledger_id)
        try:
            last_body = self.storage.get_entry(ledger_id, last_entry_id) if last_entry_id >= 0 else None
        except StorageIOError:
            self._send(source, ReadLacResponse(request.request_id, self._reject(Code.IO_ERROR), ledger_id))
            return
        self._send(source, ReadLacResponse(request.request_id, _OK, ledger_id,
                                           explicit[1] if explicit else b"", last_body or b""))

    def _on_write_lac(self, request: WriteLacRequest, source: str, now_ns: int) -> None:
        if len(request.body) > self.config.entry_size_max or request.lac < INVALID_ENTRY_ID:
            code = self._reject(Code.BAD_REQUEST)
        else:
            code = self._check_key(request.ledger_id, request.master_key, may_create=False)
        if code == _OK:
            code = self._check_sync_room(len(request.body) + RECORD_OVERHEAD_SIZE_MAX)
        if code != _OK:
            self._send(source, WriteLacResponse(request.request_id, code, request.ledger_id))
            return
        # An explicit LAC is a hint (recovery never relies on it, readers keep the largest
        # they have seen): learnt and answered now, so that long polls wake at once, and
        # journaled with the next group that has someone waiting, or after
        # journal_max_group_wait_ns, never in an fdatasync of its own.
        self._counts.lac_writes += 1
        self._journal(LacRecord(request.ledger_id, request.lac, request.body), now_ns)   # stored once durable
        self._learn_lac_on_receipt(request.ledger_id, request.lac)
        self._send(source, WriteLacResponse(request.request_id, _OK, request.ledger_id))

    def _on_force(self, request: ForceLedgerRequest, source: str, now_ns: int) -> None:
        """Durable once a group holding a FORCE record is: every earlier group was written first."""
        code = self._check_key(request.ledger_id, request.master_key, may_create=False)
        if code == _OK:
            code = self._check_sync_room(RECORD_OVERHEAD_SIZE_MAX)
        if code != _OK:
            self._send(source, ForceLedgerResponse(request.request_id, code, request.ledger_id))
            return
        self._counts.forces += 1
        self._journal(ForceRecord(request.ledger_id), now_ns)
        self._wait_for_journal(request, source)

    # -- checks ---------------------------------------------------------------------------

    def invariants(self) -> None:
        config = self.config
        assert len(self._in_flight) <= config.journal_writes_in_flight_max
        tokens = [token for token, _ in self._in_flight]
        assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
        groups = [group for _, group in self._in_flight] + ([self._collecting] if self._collecting is not None else [])
        waiters = [request for group in groups for request, _ in group.waiters]
        unapplied = self._unapplied
        if unapplied is not None:     # durable, not all of its records applied
            assert self._unapplied_applied_count < len(unapplied.records) or not unapplied.records
            assert self._unapplied_ready_count <= len(unapplied.waiters)
            assert self._has_early_answers or self._unapplied_answered_count == self._unapplied_ready_count
            waiters += [request for request, _ in unapplied.waiters[self._unapplied_answered_count:]]
            groups.append(unapplied)
        else:
            assert not self._has_early_answers
        adds = [r for r in waiters if type(r) is AddRequest or type(r) is AddBatchRequest]
        assert sum(map(_entry_count, adds)) == self._pending_adds_count <= config.pending_adds_count_max
        assert len(waiters) - len(adds) == self._pending_syncs_count <= config.pending_syncs_count_max
        for group in groups:
            assert group.size == sum(map(len, group.chunks)) > 0
            assert len(group.waiters) == sum(type(r) is not MasterKeyRecord and type(r) is not LacRecord
                                             for r in group.records), "one waiter per record but keys and LACs"
            assert group.size <= config.journal_queue_size_max
        pending_records = [record for group in groups for record in group.records]
        fenced_pending = {r.ledger_id for r in pending_records if type(r) is FenceRecord}
        assert self._fenced <= fenced_pending, "an in-memory fence without its FENCE record"
        keys_pending = {r.ledger_id for r in pending_records if type(r) is MasterKeyRecord}
        assert set(self._pending_master_keys) <= keys_pending, "a pending key without its MASTER_KEY record"
        for ledger_id in self._fenced:
            assert self._known_key(ledger_id) is not None
        assert all(lac >= INVALID_ENTRY_ID for lac in self._known_lac.values())
        self._long_polls.invariants()

    def statistics(self) -> BookieStatistics:
        c = self._counts
        return BookieStatistics(
            adds_ok_count=c.adds_ok, deferred_adds_count=c.deferred_adds, reads_count=c.reads,
            fences_count=c.fences, lac_writes_count=c.lac_writes, forces_count=c.forces,
            long_polls_parked_count=c.long_polls_parked, long_polls_timed_out_count=c.long_polls_timed_out,
            rejected_by_code=tuple(sorted(self._rejected.items())), malformed_count=c.malformed,
            journal_writes_count=c.journal_writes, journal_records_count=c.journal_records,
            journal_written_size=c.journal_written_size, added_size=c.added_size, read_size=c.read_size,
            journal_group_size_peak=c.journal_group_size_peak,
            pending_adds_peak=c.pending_adds_peak, pending_syncs_peak=c.pending_syncs_peak,
            long_poll_waiters_peak=self._long_polls.peak_count)


# Every request a bookie serves: (validator, handler). Anything else is malformed.
_REQUEST_TABLE = {
    AddRequest: (_is_add_request, Bookie._on_add),
    AddBatchRequest: (_is_add_batch_request, Bookie._on_add_batch),
    ReadRequest: (_is_read_request, Bookie._on_read),                 # fencing reads: _on_fence
    ReadBatchRequest: (_is_read_batch_request, Bookie._on_read_batch),
    ReadLacRequest: (_is_read_lac_request, Bookie._on_read_lac),
    WriteLacRequest: (_is_write_lac_request, Bookie._on_write_lac),
    ForceLedgerRequest: (_is_force_ledger_request, Bookie._on_force),
}
