"""Bookie: answers clients' adds, reads, fences and LAC requests; owns durability ordering.

Inputs: receive(message), on_persisted(token) when a JournalWrite is durable, on_timer(now)
when next_deadline_ns() is due. Outputs: Send (responses) and JournalWrite effects.

Rules that never bend:
- an add is acknowledged only after its journal record is durable (except deferred-sync adds,
  which are acknowledged once received and made durable by a later force);
- fencing is durable before the fence read is answered; from the moment a fence arrives, normal
  adds are refused with FENCED, recovery adds still accepted;
- a wrong master key is refused (UNAUTHORIZED) and changes nothing;
- records are applied to storage in journal order, the same code path as crash replay, so a
  restarted bookie is exactly the one that acknowledged.

Group commit: records collect in a group; one JournalWrite is in flight at a time; the group is
written when no write is in flight and its oldest record waited journal_max_group_wait_ns, or it
holds journal_buffered_writes_threshold_size bytes, or journal_flush_when_queue_empty is set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from bkcore.bookie.journal import (
    EntryRecord, FenceRecord, ForceRecord, JournalRecord, LacRecord, MasterKeyRecord, encode_record,
    scan_records,
)
from bkcore.bookie.longpoll import LongPollWaiters
from bkcore.bookie.storage import LedgerStorage, StorageIOError
from bkcore.digest import ENTRY_HEADER, peek_entry_header
from bkcore.effects import JournalWrite, Send
from bkcore.errors import Code
from bkcore.wire import (
    INVALID_ENTRY_ID, LAST_ENTRY_ID, AddRequest, AddResponse, ForceLedgerRequest,
    ForceLedgerResponse, ReadLacRequest, ReadLacResponse, ReadRequest, ReadResponse,
    WriteLacRequest, WriteLacResponse,
)

MS = 1_000_000


@dataclass(frozen=True, slots=True)
class BookieConfig:
    journal_max_group_wait_ns: int = 2 * MS                        # journalMaxGroupWaitMSec
    journal_buffered_writes_threshold_size: int = 512 * 1024       # journalBufferedWritesThreshold
    journal_flush_when_queue_empty: bool = False                   # journalFlushWhenQueueEmpty
    pending_adds_count_max: int = 10_000
    long_poll_waiters_count_max: int = 10_000
    entry_size_max: int = 5 * 1024 * 1024 + 4096


@dataclass(frozen=True, slots=True)
class ReplayReport:
    record_count: int
    entry_count: int
    valid_size: int
    tail_problem: str | None


@dataclass(frozen=True, slots=True)
class BookieStatistics:
    adds_ok_count: int
    reads_count: int
    fences_count: int
    rejected_by_code: tuple[tuple[str, int], ...]
    malformed_count: int
    journal_writes_count: int
    journal_bytes: int
    pending_adds_peak: int
    long_poll_waiters_peak: int


class Bookie:
    def __init__(self, *, bookie_id: str, config: BookieConfig, storage: LedgerStorage) -> None:
        self.bookie_id = bookie_id
        self.config = config
        self.storage = storage
        self._effects: list = []
        self._is_readonly = False
        # Ledgers fenced in memory; a ledger is durably fenced once storage.is_fenced() says so.
        self._fenced: set[int] = set()
        # Master keys received but whose MASTER_KEY record is not yet applied.
        self._pending_master_keys: dict[int, bytes] = {}
        # Highest LAC known per ledger: from stored entries' headers and explicit LACs.
        self._known_lac: dict[int, int] = {}
        # The group being collected: records, their encoded bytes, and what to do once durable.
        self._group_records: list[JournalRecord] = []
        self._group_data: list[bytes] = []
        self._group_size = 0
        self._group_started_at_ns = 0
        self._group_waiters: list[Callable[[], None]] = []
        # The one group in flight: (token, records, waiters), or None.
        self._in_flight: tuple[int, list[JournalRecord], list[Callable[[], None]]] | None = None
        self._next_token = 1
        self._pending_adds_count = 0
        self._long_polls = LongPollWaiters(count_max=config.long_poll_waiters_count_max)
        self._adds_ok = self._reads = self._fences = self._malformed = 0
        self._journal_writes = self._journal_bytes = self._pending_adds_peak = 0
        self._rejected: dict[str, int] = {}

    # -- driver interface -----------------------------------------------------------------

    @property
    def is_readonly(self) -> bool:
        return self._is_readonly

    def set_readonly(self, is_readonly: bool) -> None:
        self._is_readonly = is_readonly

    def take_effects(self) -> list:
        effects, self._effects = self._effects, []
        return effects

    def next_deadline_ns(self) -> int | None:
        deadlines = []
        if self._group_records and self._in_flight is None:
            deadlines.append(self._group_started_at_ns + self.config.journal_max_group_wait_ns)
        poll_deadline = self._long_polls.next_deadline_ns()
        if poll_deadline is not None:
            deadlines.append(poll_deadline)
        return min(deadlines) if deadlines else None

    def on_timer(self, now_ns: int) -> None:
        for waiter in self._long_polls.pop_expired(now_ns):
            self._answer_read(waiter.request, waiter.source)
        self._maybe_flush(now_ns)

    def receive(self, message: object, *, source: str, now_ns: int) -> None:
        kind = type(message)
        if kind is AddRequest:
            self._on_add(message, source, now_ns)
        elif kind is ReadRequest:
            self._on_read(message, source, now_ns)
        elif kind is ReadLacRequest:
            self._on_read_lac(message, source)
        elif kind is WriteLacRequest:
            self._on_write_lac(message, source, now_ns)
        elif kind is ForceLedgerRequest:
            self._on_force(message, source, now_ns)
        else:
            self._malformed += 1
        self._maybe_flush(now_ns)

    def on_persisted(self, token: int, now_ns: int) -> None:
        assert self._in_flight is not None and self._in_flight[0] == token, f"unexpected journal token {token}"
        _, records, waiters = self._in_flight
        self._in_flight = None
        for record in records:
            self._apply(record)
        for waiter in waiters:
            waiter()
        self._maybe_flush(now_ns)

    # -- journal --------------------------------------------------------------------------

    def _journal(self, record: JournalRecord, now_ns: int, waiter: Callable[[], None] | None = None) -> None:
        if not self._group_records:
            self._group_started_at_ns = now_ns
        data = encode_record(record)
        self._group_records.append(record)
        self._group_data.append(data)
        self._group_size += len(data)
        if waiter is not None:
            self._group_waiters.append(waiter)

    def _maybe_flush(self, now_ns: int) -> None:
        if self._in_flight is not None or not self._group_records:
            return
        config = self.config
        if not (config.journal_flush_when_queue_empty
                or self._group_size >= config.journal_buffered_writes_threshold_size
                or now_ns - self._group_started_at_ns >= config.journal_max_group_wait_ns):
            return
        token = self._next_token
        self._next_token += 1
        data = b"".join(self._group_data)
        self._in_flight = (token, self._group_records, self._group_waiters)
        self._group_records, self._group_data, self._group_waiters = [], [], []
        self._group_size = 0
        self._journal_writes += 1
        self._journal_bytes += len(data)
        self._effects.append(JournalWrite(token=token, data=data))

    def _apply(self, record: JournalRecord) -> None:
        """Apply one durable record to storage; crash replay and live persistence share this."""
        kind = type(record)
        if kind is EntryRecord:
            self.storage.add_entry(record.ledger_id, record.entry_id, record.body)
            header = peek_entry_header(record.body)
            if header is not None:
                self._learn_lac(record.ledger_id, header[2])
        elif kind is MasterKeyRecord:
            self.storage.set_master_key(record.ledger_id, record.master_key)
            if self._pending_master_keys.get(record.ledger_id) == record.master_key:
                del self._pending_master_keys[record.ledger_id]
        elif kind is FenceRecord:
            self.storage.set_fenced(record.ledger_id)
            self._fenced.discard(record.ledger_id)
            self._wake_long_polls(record.ledger_id)
        elif kind is LacRecord:
            self.storage.set_explicit_lac(record.ledger_id, record.lac, record.body)
            self._learn_lac(record.ledger_id, record.lac)

    def replay_journal(self, data: bytes) -> ReplayReport:
        """Rebuild storage from one journal's bytes after a restart (before serving)."""
        scan = scan_records(data)
        entry_count = self.replay_records(scan.records)
        return ReplayReport(len(scan.records), entry_count, scan.valid_size, scan.tail_problem)

    def replay_records(self, records: list[JournalRecord]) -> int:
        """Apply replayed journal records in order (see journal_files.Journal.open); returns
        how many were entries."""
        entry_count = 0
        for record in records:
            self._apply(record)
            entry_count += type(record) is EntryRecord
        return entry_count

    # -- ledger state ---------------------------------------------------------------------

    def _known_key(self, ledger_id: int) -> bytes | None:
        key = self.storage.master_key(ledger_id)
        return key if key is not None else self._pending_master_keys.get(ledger_id)

    def _is_fenced(self, ledger_id: int) -> bool:
        return ledger_id in self._fenced or self.storage.is_fenced(ledger_id)

    def _claim_key(self, ledger_id: int, master_key: bytes, now_ns: int) -> bool:
        """True if the key may act on the ledger; journals the key of a ledger seen first now."""
        known = self._known_key(ledger_id)
        if known is None:
            self._pending_master_keys[ledger_id] = master_key
            self._journal(MasterKeyRecord(ledger_id, master_key), now_ns)
            return True
        return known == master_key

    def _learn_lac(self, ledger_id: int, lac: int) -> None:
        if lac > self._known_lac.get(ledger_id, INVALID_ENTRY_ID):
            self._known_lac[ledger_id] = lac
            self._wake_long_polls(ledger_id)

    def _wake_long_polls(self, ledger_id: int) -> None:
        lac = self._known_lac.get(ledger_id, INVALID_ENTRY_ID)
        is_fenced = self._is_fenced(ledger_id)
        for waiter in self._long_polls.pop_ready(ledger_id, lac=lac, is_fenced=is_fenced):
            self._answer_read(waiter.request, waiter.source)

    def _reject(self, code: Code) -> int:
        self._rejected[code.name] = self._rejected.get(code.name, 0) + 1
        return code

    # -- handlers -------------------------------------------------------------------------

    def _on_add(self, request: AddRequest, source: str, now_ns: int) -> None:
        code = self._check_add(request)
        if code == Code.OK and not self._claim_key(request.ledger_id, request.master_key, now_ns):
            code = self._reject(Code.UNAUTHORIZED)
        if code != Code.OK:
            self._effects.append(Send(source, AddResponse(request.request_id, code, request.ledger_id, request.entry_id)))
            return
        record = EntryRecord(request.ledger_id, request.entry_id, request.body)
        respond = self._add_responder(request, source)
        if request.is_deferred_sync:
            self.storage.set_master_key(request.ledger_id, request.master_key)
            self._apply(record)
            self._journal(record, now_ns)
            respond()
            return
        self._pending_adds_count += 1
        self._pending_adds_peak = max(self._pending_adds_peak, self._pending_adds_count)
        self._journal(record, now_ns, respond)

    def _check_add(self, request: AddRequest) -> Code:
        header = peek_entry_header(request.body)
        if (len(request.body) > self.config.entry_size_max or header is None
                or header[:2] != (request.ledger_id, request.entry_id) or request.entry_id < 0):
            return self._reject(Code.BAD_REQUEST)
        if self._is_readonly and not request.is_recovery:
            return self._reject(Code.READONLY)
        known = self._known_key(request.ledger_id)
        if known is not None and known != request.master_key:
            return self._reject(Code.UNAUTHORIZED)
        if self._is_fenced(request.ledger_id) and not request.is_recovery:
            return self._reject(Code.FENCED)
        if self._pending_adds_count >= self.config.pending_adds_count_max:
            return self._reject(Code.TOO_MANY_REQUESTS)
        return Code.OK

    def _add_responder(self, request: AddRequest, source: str) -> Callable[[], None]:
        def respond() -> None:
            if not request.is_deferred_sync:
                self._pending_adds_count -= 1
            self._adds_ok += 1
            self._effects.append(Send(source, AddResponse(request.request_id, Code.OK, request.ledger_id,
                                                          request.entry_id)))
        return respond

    def _on_read(self, request: ReadRequest, source: str, now_ns: int) -> None:
        self._reads += 1
        ledger_id = request.ledger_id
        if request.is_fencing:
            self._fences += 1
            if not self._claim_key(ledger_id, request.master_key, now_ns):
                self._send_read(source, request, self._reject(Code.UNAUTHORIZED))
                return
            if self.storage.is_fenced(ledger_id):
                self._answer_read(request, source)
                return
            self._fenced.add(ledger_id)
            self._journal(FenceRecord(ledger_id), now_ns, lambda: self._answer_read(request, source))
            return
        if request.long_poll_timeout_ns > 0:
            lac = self._known_lac.get(ledger_id, INVALID_ENTRY_ID)
            if lac <= request.previous_lac and not self._is_fenced(ledger_id):
                if not self._long_polls.park(request, source, deadline_ns=now_ns + request.long_poll_timeout_ns):
                    self._send_read(source, request, self._reject(Code.TOO_MANY_REQUESTS))
                return
        self._answer_read(request, source)

    def _answer_read(self, request: ReadRequest, source: str) -> None:
        ledger_id = request.ledger_id
        if not self.storage.has_ledger(ledger_id):
            self._send_read(source, request, Code.NO_SUCH_ENTRY if request.is_fencing or request.long_poll_timeout_ns
                            else Code.NO_SUCH_LEDGER)
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
        else:
            self._send_read(source, request, Code.OK, entry_id=entry_id, body=body)

    def _send_read(self, source: str, request: ReadRequest, code: Code, *, entry_id: int | None = None,
                   body: bytes = b"") -> None:
        self._effects.append(Send(source, ReadResponse(
            request.request_id, code, request.ledger_id, request.entry_id if entry_id is None else entry_id,
            body, self._known_lac.get(request.ledger_id, INVALID_ENTRY_ID))))

    def _on_read_lac(self, request: ReadLacRequest, source: str) -> None:
        ledger_id = request.ledger_id
        if not self.storage.has_ledger(ledger_id):
            self._effects.append(Send(source, ReadLacResponse(request.request_id, Code.NO_SUCH_LEDGER, ledger_id)))
            return
        explicit = self.storage.explicit_lac(ledger_id)
        last_entry_id = self.storage.last_entry_id(ledger_id)
        try:
            last_body = self.storage.get_entry(ledger_id, last_entry_id) if last_entry_id >= 0 else None
        except StorageIOError:
            self._effects.append(Send(source, ReadLacResponse(request.request_id, self._reject(Code.IO_ERROR), ledger_id)))
            return
        self._effects.append(Send(source, ReadLacResponse(
            request.request_id, Code.OK, ledger_id, explicit[1] if explicit else b"", last_body or b"")))

    def _on_write_lac(self, request: WriteLacRequest, source: str, now_ns: int) -> None:
        code = Code.OK
        known = self._known_key(request.ledger_id)
        if known is None:
            code = Code.NO_SUCH_LEDGER
        elif known != request.master_key:
            code = self._reject(Code.UNAUTHORIZED)
        respond = lambda c=code: self._effects.append(Send(source, WriteLacResponse(request.request_id, c, request.ledger_id)))
        if code != Code.OK:
            respond()
            return
        self._journal(LacRecord(request.ledger_id, request.lac, request.body), now_ns, respond)

    def _on_force(self, request: ForceLedgerRequest, source: str, now_ns: int) -> None:
        known = self._known_key(request.ledger_id)
        code = Code.OK if known == request.master_key else (
            Code.NO_SUCH_LEDGER if known is None else self._reject(Code.UNAUTHORIZED))
        respond = lambda c=code: self._effects.append(Send(source, ForceLedgerResponse(request.request_id, c, request.ledger_id)))
        if code != Code.OK:
            respond()
            return
        self._journal(ForceRecord(request.ledger_id), now_ns, respond)

    # -- checks ---------------------------------------------------------------------------

    def invariants(self) -> None:
        assert self._pending_adds_count >= 0
        assert self._pending_adds_count <= self.config.pending_adds_count_max
        assert len(self._group_records) == len(self._group_data)
        assert self._group_size == sum(len(d) for d in self._group_data)
        assert len(self._long_polls) <= self.config.long_poll_waiters_count_max
        for ledger_id in self._fenced:
            assert self._known_key(ledger_id) is not None

    def statistics(self) -> BookieStatistics:
        return BookieStatistics(self._adds_ok, self._reads, self._fences, tuple(sorted(self._rejected.items())),
                                self._malformed, self._journal_writes, self._journal_bytes,
                                self._pending_adds_peak, self._long_polls.peak_count)


assert ENTRY_HEADER.size == 32
