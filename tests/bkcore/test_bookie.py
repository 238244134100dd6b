"""The Bookie state machine, driven by hand: durability before acks, group commit, fencing,
keys, readonly mode, long polls, LAC, force, limits, crash replay, and fuzzed input."""

import dataclasses

import pytest
from hypothesis import given, settings, strategies as st

from bkcore.bookie.bookie import Bookie, BookieConfig, BookieUsageError
from bkcore.bookie.journal import JournalCorrupted
from bkcore.bookie.storage import MemoryLedgerStorage
from bkcore.digest import Digester, DigestType
from bkcore.effects import JournalWrite, Send
from bkcore.errors import Code
from bkcore.wire import (
    AddBatchRequest, AddBatchResponse, AddRequest, AddResponse, ForceLedgerRequest, ForceLedgerResponse, ReadBatchRequest,
    ReadBatchResponse, ReadLacRequest, ReadRequest, ReadResponse, WriteLacRequest, WriteLacResponse,
)

MS = 1_000_000
KEY = b"k" * 32
DIGESTER = Digester(ledger_id=1, digest_type=DigestType.CRC32C, password=b"pw")


def body(entry_id: int, lac: int = -1, ledger_digester=DIGESTER) -> bytes:
    return ledger_digester.pack_entry(entry_id=entry_id, lac=lac, length=entry_id + 1, payload=b"p%d" % entry_id)


def add(entry_id: int, *, request_id: int | None = None, key=KEY, lac: int = -1, **flags) -> AddRequest:
    return AddRequest(request_id=request_id or 100 + entry_id, ledger_id=1, entry_id=entry_id,
                      master_key=key, body=body(entry_id, lac), **flags)


class Driver:
    """Feeds a bookie and collects what it says; the journal is a byte string."""

    def __init__(self, storage=None, *, answers_early: bool = False, **config) -> None:
        self.config = BookieConfig(**config)
        # Persist as the server does for a small group: in two inputs, the first half's answers
        # taken before the second half applies the records.
        self.answers_early = answers_early
        self.storage = MemoryLedgerStorage() if storage is None else storage
        self.bookie = Bookie(bookie_id="b", config=self.config, storage=self.storage)
        self.now_ns = 0
        self.journal = b""
        self.in_flight: list[JournalWrite] = []
        self.sent: list = []

    def send(self, message) -> None:
        self.bookie.receive(message, source="client", now_ns=self.now_ns)
        self.collect()

    def collect(self) -> None:
        for effect in self.bookie.take_effects():
            if isinstance(effect, JournalWrite):
                self.in_flight.append(effect)
            else:
                assert isinstance(effect, Send) and effect.destination == "client"
                self.sent.append(effect.message)
        self.bookie.invariants()

    def tick(self, duration_ns: int = 2 * MS) -> None:
        self.now_ns += duration_ns
        deadline = self.bookie.next_deadline_ns()
        if deadline is not None and deadline <= self.now_ns:
            self.bookie.on_timer(self.now_ns)
        self.collect()

    def persist(self) -> None:
        while self.in_flight:
            write = self.in_flight.pop(0)
            self.journal += write.data
            if self.answers_early:
                self.bookie.answer_persisted(write.token, self.now_ns)
                self.bookie.invariants()
                for answer in self.bookie.take_effects():
                    assert isinstance(answer.message, (AddResponse, AddBatchResponse)) and answer.destination == "client"
                    self.sent.append(answer.message)
                self.bookie.apply_persisted(self.now_ns)
            else:
                self.bookie.on_persisted(write.token, self.now_ns)
            self.collect()

    def answers(self, kind=None) -> list:
        found = [m for m in self.sent if kind is None or isinstance(m, kind)]
        self.sent = [m for m in self.sent if m not in found]
        return found


def test_add_is_acknowledged_only_after_persistence():
    d = Driver()
    d.send(add(0))
    assert d.answers() == []
    d.tick()
    assert len(d.in_flight) == 1 and d.answers() == []
    d.persist()
    (response,) = d.answers()
    assert response == AddResponse(100, Code.OK, 1, 0)
    assert d.storage.get_entry(1, 0) == body(0)


def test_group_commit_batches_and_keeps_one_write_in_flight():
    d = Driver(journal_writes_in_flight_max=1)
    for entry_id in range(5):
        d.send(add(entry_id))
    d.tick()
    assert len(d.in_flight) == 1
    for entry_id in range(5, 8):
        d.send(add(entry_id))
    d.tick()
    assert len(d.in_flight) == 1, "a second group must wait for the first to be durable"
    first = d.in_flight.pop(0)
    d.bookie.on_persisted(first.token, d.now_ns)
    d.collect()
    assert sorted(r.entry_id for r in d.answers(AddResponse)) == [0, 1, 2, 3, 4]
    d.tick()
    d.persist()
    assert sorted(r.entry_id for r in d.answers(AddResponse)) == [5, 6, 7]


def test_two_writes_in_flight_persist_in_order_and_a_third_group_waits():
    d = Driver(journal_writes_in_flight_max=2)
    for group in ([0, 1], [2, 3], [4, 5]):
        for entry_id in group:
            d.send(add(entry_id))
        d.tick()
    assert len(d.in_flight) == 2, "the third group waits for room"
    first, second = d.in_flight
    assert second.token > first.token
    with pytest.raises(BookieUsageError):
        d.bookie.on_persisted(second.token, d.now_ns)      # the older one persists first
    assert d.answers() == [] and d.storage.get_entry(1, 0) is None
    d.in_flight.pop(0)
    d.bookie.on_persisted(first.token, d.now_ns)
    d.collect()
    assert [r.entry_id for r in d.answers(AddResponse)] == [0, 1]
    assert len(d.in_flight) == 2, "the third group leaves as soon as there is room"
    assert d.bookie.journal_queued_size == sum(len(w.data) for w in d.in_flight)
    d.persist()
    assert [r.entry_id for r in d.answers(AddResponse)] == [2, 3, 4, 5]
    assert [d.storage.get_entry(1, e) for e in range(6)] == [body(e) for e in range(6)]


def test_writes_in_flight_max_must_be_positive():
    with pytest.raises(ValueError, match="journal_writes_in_flight_max"):
        BookieConfig(journal_writes_in_flight_max=0)


def test_flush_when_queue_empty_and_size_threshold():
    d = Driver(journal_flush_when_queue_empty=True)
    d.send(add(0))
    assert len(d.in_flight) == 1
    d = Driver(journal_buffered_writes_threshold_size=1)
    d.send(add(0))
    assert len(d.in_flight) == 1


def test_wrong_master_key_is_unauthorized_and_changes_nothing():
    d = Driver()
    d.send(add(0))
    d.tick()
    d.persist()
    d.answers()
    d.send(add(1, key=b"x" * 32))
    assert d.answers()[0].code == Code.UNAUTHORIZED
    d.send(ReadRequest(request_id=9, ledger_id=1, entry_id=-1, master_key=b"x" * 32, is_fencing=True))
    assert d.answers()[0].code == Code.UNAUTHORIZED
    assert not d.storage.is_fenced(1) and d.storage.last_entry_id(1) == 0


def test_fence_is_persisted_before_the_answer_and_stops_normal_adds():
    d = Driver()
    d.send(add(0))
    d.tick()
    d.persist()
    d.answers()
    d.send(ReadRequest(request_id=9, ledger_id=1, entry_id=-1, master_key=KEY, is_fencing=True))
    assert d.answers() == [], "fence answered before it was durable"
    d.send(add(1))
    assert d.answers()[0].code == Code.FENCED
    d.send(add(1, request_id=77, is_recovery=True))
    d.tick()
    d.persist()
    answers = d.answers()
    fence_answer = [a for a in answers if a.request_id == 9][0]
    # Answered once its group is durable, with the last entry held at that moment.
    assert fence_answer.code == Code.OK and fence_answer.entry_id in (0, 1)
    assert [a.code for a in answers if a.request_id == 77] == [Code.OK]
    assert d.storage.is_fenced(1)


def test_fencing_an_unknown_ledger_records_it():
    d = Driver()
    d.send(ReadRequest(request_id=9, ledger_id=1, entry_id=-1, master_key=KEY, is_fencing=True))
    d.tick()
    d.persist()
    assert d.answers()[0].code == Code.NO_SUCH_ENTRY
    d.send(add(0))
    assert d.answers()[0].code == Code.FENCED


def test_readonly_refuses_normal_adds_but_serves_reads_and_recovery():
    d = Driver()
    d.send(add(0))
    d.tick()
    d.persist()
    d.answers()
    d.bookie.set_readonly(True)
    d.send(add(1))
    assert d.answers()[0].code == Code.READONLY
    d.send(add(1, is_recovery=True))
    d.tick()
    d.persist()
    assert d.answers()[0].code == Code.OK
    d.send(ReadRequest(request_id=5, ledger_id=1, entry_id=0))
    assert d.answers()[0].body == body(0)


def test_reads_of_missing_and_corrupt_entries():
    d = Driver()
    d.send(ReadRequest(request_id=1, ledger_id=1, entry_id=0))
    assert d.answers()[0].code == Code.NO_SUCH_LEDGER
    d.send(add(0))
    d.tick()
    d.persist()
    d.answers()
    d.send(ReadRequest(request_id=2, ledger_id=1, entry_id=5))
    assert d.answers()[0].code == Code.NO_SUCH_ENTRY
    d.storage.mark_corrupt(ledger_id=1, entry_id=0)
    d.send(ReadRequest(request_id=3, ledger_id=1, entry_id=0))
    assert d.answers()[0].code == Code.IO_ERROR, "corruption must never read as 'no such entry'"


def test_long_poll_wakes_when_the_lac_moves():
    d = Driver()
    d.send(add(0))
    d.tick()
    d.persist()
    d.answers()
    d.send(ReadRequest(request_id=5, ledger_id=1, entry_id=0, previous_lac=-1, long_poll_timeout_ns=1000 * MS))
    assert d.answers() == []
    # The LAC an add carries is learnt when the add arrives, not once it is journaled (as in
    # BookKeeper): the waiter is answered before entry 1 is durable here.
    d.send(add(1, lac=0))
    (answer,) = d.answers()
    assert answer.request_id == 5 and answer.lac == 0 and answer.code == Code.OK and answer.body == body(0)
    assert d.in_flight == [] and d.bookie.next_deadline_ns() is not None, "entry 1 is not even being written yet"


def test_a_refused_add_teaches_no_lac():
    d = Driver()
    d.send(add(0))
    d.tick()
    d.persist()
    d.answers()
    d.send(ReadRequest(request_id=5, ledger_id=1, entry_id=0, previous_lac=-1, long_poll_timeout_ns=1000 * MS))
    d.send(add(1, lac=0, key=b"x" * 32))
    (refused,) = d.answers()
    assert refused.code == Code.UNAUTHORIZED
    d.tick(10 * MS)
    assert d.answers() == [], "the long poll still waits"


def test_long_poll_times_out():
    d = Driver()
    d.send(add(0))
    d.tick()
    d.persist()
    d.answers()
    d.send(ReadRequest(request_id=5, ledger_id=1, entry_id=1, previous_lac=-1, long_poll_timeout_ns=100 * MS))
    d.tick(50 * MS)
    assert d.answers() == []
    d.tick(60 * MS)
    (answer,) = d.answers()
    assert answer.code == Code.NO_SUCH_ENTRY and answer.lac == -1


def test_write_and_read_explicit_lac():
    d = Driver()
    d.send(add(0))
    d.tick()
    d.persist()
    d.answers()
    lac_body = DIGESTER.pack_lac(0)
    d.send(WriteLacRequest(request_id=3, ledger_id=1, master_key=KEY, lac=0, body=lac_body))
    d.tick()
    d.persist()
    assert d.answers()[0].code == Code.OK
    d.send(ReadLacRequest(request_id=4, ledger_id=1))
    (answer,) = d.answers()
    assert answer.lac_body == lac_body and answer.last_body == body(0)
    d.send(ReadLacRequest(request_id=5, ledger_id=2))
    assert d.answers()[0].code == Code.NO_SUCH_LEDGER


def test_deferred_sync_acks_at_once_and_force_waits_for_durability():
    d = Driver()
    d.send(add(0, is_deferred_sync=True))
    assert d.answers()[0].code == Code.OK
    d.send(ForceLedgerRequest(request_id=8, ledger_id=1, master_key=KEY))
    assert d.answers() == []
    d.tick()
    d.persist()
    assert d.answers()[0].code == Code.OK


def test_too_many_pending_adds_push_back():
    d = Driver(pending_adds_count_max=2)
    for entry_id in range(3):
        d.send(add(entry_id))
    assert [a.code for a in d.answers()] == [Code.TOO_MANY_REQUESTS]
    assert d.bookie.statistics().pending_adds_peak == 2


def test_bad_requests_are_refused():
    d = Driver(entry_size_max=64)
    d.send(AddRequest(request_id=1, ledger_id=1, entry_id=0, master_key=KEY, body=b"short"))
    d.send(AddRequest(request_id=2, ledger_id=1, entry_id=3, master_key=KEY, body=body(0)))
    d.send(AddRequest(request_id=3, ledger_id=1, entry_id=0, master_key=KEY, body=body(0) + b"x" * 100))
    assert [a.code for a in d.answers()] == [Code.BAD_REQUEST] * 3
    d.send(AddResponse(1, 0, 1, 0))   # not a request: counted, ignored
    assert d.bookie.statistics().malformed_count == 1


def test_crash_replay_restores_entries_keys_and_fences():
    d = Driver()
    for entry_id in range(3):
        d.send(add(entry_id, lac=entry_id - 1))
    d.send(ReadRequest(request_id=9, ledger_id=1, entry_id=-1, master_key=KEY, is_fencing=True))
    d.tick()
    d.persist()
    d.send(add(3, is_recovery=True))   # journaled, never synced: lost in the crash
    d.tick()
    torn = d.in_flight[0].data[:7]
    restarted = Bookie(bookie_id="b", config=BookieConfig(), storage=MemoryLedgerStorage())
    report = restarted.replay_journal(d.journal + torn)
    assert report.entry_count == 3 and report.tail_problem is not None
    restarted.receive(add(4), source="client", now_ns=0)
    assert restarted.take_effects()[0].message.code == Code.FENCED
    restarted.receive(add(4, key=b"y" * 32, is_recovery=True), source="client", now_ns=0)
    assert restarted.take_effects()[0].message.code == Code.UNAUTHORIZED
    restarted.receive(ReadRequest(request_id=1, ledger_id=1, entry_id=2), source="client", now_ns=0)
    response = restarted.take_effects()[0].message
    assert response.body == body(2, 1) and response.lac == 1


def persisted_driver(entry_count: int = 1, **config) -> Driver:
    """A driver whose ledger 1 holds entries 0..entry_count-1, all acknowledged."""
    d = Driver(**config)
    for entry_id in range(entry_count):
        d.send(add(entry_id, lac=entry_id - 1))
    d.tick()
    d.persist()
    d.answers()
    return d


def fence(request_id: int = 9, key=KEY, ledger_id: int = 1) -> ReadRequest:
    return ReadRequest(request_id=request_id, ledger_id=ledger_id, entry_id=-1, master_key=key, is_fencing=True)


def long_poll(request_id: int, *, entry_id: int, previous_lac: int, timeout_ns: int = 1000 * MS,
              ledger_id: int = 1) -> ReadRequest:
    return ReadRequest(request_id=request_id, ledger_id=ledger_id, entry_id=entry_id, previous_lac=previous_lac,
                       long_poll_timeout_ns=timeout_ns)


def test_config_is_validated():
    with pytest.raises(ValueError, match="pending_adds_count_max"):
        BookieConfig(pending_adds_count_max=-1)
    with pytest.raises(ValueError, match="entry_size_max"):
        BookieConfig(entry_size_max=64 * 1024 * 1024)
    with pytest.raises(ValueError, match="journal_queue_size_max"):
        BookieConfig(journal_queue_size_max=1024)


def test_adds_journaled_before_a_fence_still_complete():
    d = Driver()
    d.send(add(0))
    d.send(fence())
    d.send(add(1))
    d.tick()
    answers = {a.request_id: a for a in d.answers()}
    assert answers == {101: AddResponse(101, Code.FENCED, 1, 1)}
    d.persist()
    answers = {a.request_id: a for a in d.answers()}
    assert answers[100] == AddResponse(100, Code.OK, 1, 0)
    assert answers[9].code == Code.OK and answers[9].entry_id == 0 and answers[9].body == body(0)


def test_adds_answered_early_go_before_their_entries_are_applied_and_the_rest_keep_their_order():
    d = Driver()
    d.send(add(0))
    d.send(add(1))
    d.send(fence())
    d.send(add(2, request_id=77, is_recovery=True))
    d.tick()
    (write,) = d.in_flight
    d.bookie.answer_persisted(write.token, d.now_ns)
    seen_early = [effect.message for effect in d.bookie.take_effects()]
    assert seen_early == [AddResponse(100, Code.OK, 1, 0), AddResponse(101, Code.OK, 1, 1)]
    assert d.storage.get_entry(1, 0) is None, "answered before the group is applied"
    assert d.bookie.is_applying and d.bookie.take_effects() == ()
    d.bookie.apply_persisted(d.now_ns)
    fence_answer, recovery_answer = (effect.message for effect in d.bookie.take_effects())
    assert fence_answer.request_id == 9 and fence_answer.code == Code.OK and fence_answer.entry_id == 2
    assert recovery_answer == AddResponse(77, Code.OK, 1, 2)
    assert [d.storage.get_entry(1, e) for e in range(3)] == [body(0), body(1), body(2)]
    assert d.bookie.statistics().adds_ok_count == 3
    d.bookie.invariants()


def test_no_other_input_comes_between_the_early_answers_and_the_apply():
    d = Driver()
    d.send(add(0))
    d.tick()
    (write,) = d.in_flight
    d.bookie.answer_persisted(write.token, d.now_ns)
    assert [effect.message for effect in d.bookie.take_effects()] == [AddResponse(100, Code.OK, 1, 0)]
    for refused in (lambda: d.bookie.receive(ReadRequest(request_id=5, ledger_id=1, entry_id=0), source="client", now_ns=d.now_ns),
                    lambda: d.bookie.receive_batch([ReadRequest(request_id=5, ledger_id=1, entry_id=0)], source="client", now_ns=d.now_ns),
                    lambda: d.bookie.on_timer(d.now_ns),
                    lambda: d.bookie.answer_persisted(write.token, d.now_ns)):
        with pytest.raises(BookieUsageError):
            refused()
        assert d.bookie.take_effects() == () and d.storage.get_entry(1, 0) is None
    d.bookie.apply_persisted(d.now_ns)
    assert not d.bookie.is_applying and d.storage.get_entry(1, 0) == body(0)
    with pytest.raises(BookieUsageError):
        d.bookie.apply_persisted(d.now_ns)          # nothing left to apply
    d.send(ReadRequest(request_id=5, ledger_id=1, entry_id=0))
    assert d.answers(ReadResponse)[0].body == body(0)


def test_a_write_applied_in_slices_answers_what_each_slice_applied_and_others_are_served_between():
    d = Driver()
    for entry_id in range(4):
        d.send(add(entry_id))
    d.send(batch(4, 10))
    d.send(add(14))
    d.tick()
    (write,) = d.in_flight
    d.in_flight.clear()
    d.bookie.begin_persisted(write.token)
    # Records: the ledger's MASTER_KEY, four ENTRY, one ENTRIES of 10, one ENTRY: slices of 3
    # records, each answering the adds whose records it applied.
    assert d.bookie.apply_persisted(d.now_ns, record_count_max=3) == 3
    d.collect()
    assert d.bookie.is_applying and d.answers() == [AddResponse(100, Code.OK, 1, 0), AddResponse(101, Code.OK, 1, 1)]
    assert d.bookie.journal_queued_size == len(write.data), "the rest of the write is not in storage yet"
    # Served between two slices: a read, a new add, a timer that writes its group. The next
    # write is not applied before this one.
    d.send(ReadRequest(request_id=7, ledger_id=1, entry_id=1))
    assert d.answers() == [ReadResponse(7, Code.OK, 1, 1, body(1), -1)]
    d.send(add(15))
    d.tick()
    (next_write,) = d.in_flight
    for refused in (lambda: d.bookie.begin_persisted(next_write.token),
                    lambda: d.bookie.answer_persisted(next_write.token, d.now_ns)):
        with pytest.raises(BookieUsageError):
            refused()
    assert d.bookie.apply_persisted(d.now_ns, record_count_max=3) == 3
    d.collect()
    assert d.answers() == [AddResponse(102, Code.OK, 1, 2), AddResponse(103, Code.OK, 1, 3),
                           AddBatchResponse(504, Code.OK, 1, 4, 10)]
    assert d.bookie.is_applying and d.bookie.applied_token == 0
    assert d.bookie.apply_persisted(d.now_ns, record_count_max=3) == 1
    d.collect()
    assert not d.bookie.is_applying and d.answers() == [AddResponse(114, Code.OK, 1, 14)]
    assert [d.storage.get_entry(1, e) for e in range(15)] == [body(e, e - 1 if 4 <= e < 14 else -1)
                                                             for e in range(15)]
    assert d.bookie.applied_token == write.token
    d.persist()
    assert d.answers() == [AddResponse(115, Code.OK, 1, 15)] and d.bookie.applied_token == next_write.token
    with pytest.raises(BookieUsageError):
        d.bookie.apply_persisted(d.now_ns)          # nothing left to apply


def test_a_fence_read_in_a_write_applied_in_slices_is_answered_once_the_records_before_it_are():
    d = Driver()
    d.send(add(0))
    d.send(fence())
    d.send(add(1, request_id=77, is_recovery=True))
    d.tick()
    (write,) = d.in_flight
    d.in_flight.clear()
    d.bookie.begin_persisted(write.token)
    answers = []
    while d.bookie.is_applying:            # one record a slice: MASTER_KEY, ENTRY, FENCE, ENTRY
        assert d.bookie.apply_persisted(d.now_ns, record_count_max=1) == 1
        d.collect()
        answers.append([(type(a).__name__, a.request_id, a.entry_id) for a in d.answers()])
    assert answers == [[], [("AddResponse", 100, 0)], [("ReadResponse", 9, 0)], [("AddResponse", 77, 1)]]
    assert d.storage.is_fenced(1) and d.bookie.statistics().adds_ok_count == 2


def test_a_group_without_adds_answers_nothing_early():
    d = Driver(answers_early=True)
    d.send(add(0))
    d.tick()
    d.persist()
    d.answers()
    d.send(fence())
    d.tick()
    d.persist()
    (fence_answer,) = d.answers()
    assert fence_answer.request_id == 9 and fence_answer.code == Code.OK


def test_fencing_a_durably_fenced_ledger_journals_nothing():
    d = persisted_driver()
    d.send(fence())
    d.tick()
    d.persist()
    d.answers()
    writes_before = d.bookie.statistics().journal_writes_count
    d.send(fence(request_id=10))
    (answer,) = d.answers()
    assert answer.code == Code.OK and answer.body == body(0)
    d.tick()
    assert d.in_flight == [] and d.bookie.statistics().journal_writes_count == writes_before


def test_a_second_fence_while_the_first_persists_waits_too():
    d = persisted_driver()
    d.send(fence(request_id=9))
    d.tick()
    d.send(fence(request_id=10))
    assert d.answers() == []
    d.persist()
    d.tick()
    d.persist()
    assert sorted(a.request_id for a in d.answers()) == [9, 10]


def test_read_of_the_last_entry():
    d = persisted_driver(3)
    d.send(ReadRequest(request_id=5, ledger_id=1, entry_id=-1))
    (answer,) = d.answers()
    assert answer.code == Code.OK and answer.entry_id == 2 and answer.body == body(2, 1) and answer.lac == 1


def test_read_lac_of_a_ledger_without_entries():
    d = Driver()
    d.send(fence())
    d.tick()
    d.persist()
    d.answers()
    d.send(ReadLacRequest(request_id=4, ledger_id=1))
    (answer,) = d.answers()
    assert answer.code == Code.OK and answer.lac_body == b"" and answer.last_body == b""


def test_corrupt_last_entry_is_an_io_error_for_read_lac():
    d = persisted_driver(2)
    d.storage.mark_corrupt(ledger_id=1, entry_id=1)
    d.send(ReadLacRequest(request_id=4, ledger_id=1))
    assert d.answers()[0].code == Code.IO_ERROR
    d.send(ReadRequest(request_id=5, ledger_id=1, entry_id=-1))
    assert d.answers()[0].code == Code.IO_ERROR


def test_long_poll_answered_at_once_when_the_lac_is_ahead_or_the_ledger_is_fenced():
    d = persisted_driver(3)                    # known LAC 1
    d.send(long_poll(5, entry_id=1, previous_lac=0))
    (answer,) = d.answers()
    assert answer.code == Code.OK and answer.lac == 1 and answer.body == body(1, 0)
    d.send(fence())
    d.send(long_poll(6, entry_id=3, previous_lac=1))
    assert [a.request_id for a in d.answers()] == [6], "a fenced ledger (even in memory) answers at once"


def test_long_poll_woken_by_an_explicit_lac():
    d = persisted_driver(2)                    # known LAC 0
    d.send(long_poll(5, entry_id=1, previous_lac=0))
    assert d.answers() == []
    d.send(WriteLacRequest(request_id=3, ledger_id=1, master_key=KEY, lac=1, body=DIGESTER.pack_lac(1)))
    # A hint: taken and answered at once, before it is journaled.
    answers = {a.request_id: a for a in d.answers()}
    assert answers[5].code == Code.OK and answers[5].lac == 1 and answers[5].body == body(1, 0)
    assert answers[3] == WriteLacResponse(3, Code.OK, 1)
    assert d.in_flight == []


def test_an_explicit_lac_rides_with_the_next_group_and_never_costs_a_write_of_its_own():
    d = Driver(journal_flush_when_queue_empty=True)
    d.send(add(0))
    d.persist()
    d.answers()
    writes_before = d.bookie.statistics().journal_writes_count
    d.send(WriteLacRequest(request_id=3, ledger_id=1, master_key=KEY, lac=0, body=DIGESTER.pack_lac(0)))
    assert d.answers()[0].code == Code.OK and d.in_flight == [], "no write for the hint alone"
    d.send(add(1, lac=0))
    assert len(d.in_flight) == 1, "the next add's group carries it"
    d.persist()
    assert d.bookie.statistics().journal_writes_count == writes_before + 1
    assert d.journal.count(DIGESTER.pack_lac(0)) == 1
    # Alone, it waits for journal_max_group_wait_ns.
    d.send(WriteLacRequest(request_id=4, ledger_id=1, master_key=KEY, lac=1, body=DIGESTER.pack_lac(1)))
    assert d.in_flight == []
    d.tick(d.config.journal_max_group_wait_ns)
    assert len(d.in_flight) == 1
    d.persist()
    assert d.journal.count(DIGESTER.pack_lac(1)) == 1


def test_long_poll_woken_by_a_fence():
    d = persisted_driver(1)
    d.send(long_poll(5, entry_id=1, previous_lac=-1))
    d.send(fence())
    assert d.answers() == []
    d.tick()
    d.persist()
    answers = {a.request_id: a for a in d.answers()}
    assert answers[5].code == Code.NO_SUCH_ENTRY and answers[9].code == Code.OK


def test_long_poll_on_a_ledger_not_yet_here_wakes_on_its_first_entries():
    d = Driver()
    d.send(long_poll(5, entry_id=0, previous_lac=-1))
    d.send(add(0))
    d.tick()
    d.persist()
    assert [a.request_id for a in d.answers()] == [100], "LAC still -1: keep waiting"
    d.send(add(1, lac=0))
    d.tick()
    d.persist()
    answers = {a.request_id: a for a in d.answers()}
    assert answers[5] == ReadResponse(5, Code.OK, 1, 0, body(0), 0)


def test_long_poll_on_an_unknown_ledger_times_out_with_no_such_entry():
    d = Driver()
    d.send(long_poll(5, entry_id=0, previous_lac=-1, timeout_ns=10 * MS, ledger_id=7))
    d.tick(20 * MS)
    assert d.answers() == [ReadResponse(5, Code.NO_SUCH_ENTRY, 7, 0, b"", -1)]
    assert d.bookie.statistics().long_polls_timed_out_count == 1


def test_long_poll_waiters_are_bounded():
    d = persisted_driver(1, long_poll_waiters_count_max=2)
    for request_id in range(3):
        d.send(long_poll(request_id, entry_id=1, previous_lac=-1))
    assert [(a.request_id, a.code) for a in d.answers()] == [(2, Code.TOO_MANY_REQUESTS)]
    assert d.bookie.statistics().long_poll_waiters_peak == 2


def test_next_deadline_is_a_pure_query_and_covers_group_and_long_polls():
    d = persisted_driver(1)
    assert d.bookie.next_deadline_ns() is None
    d.send(long_poll(5, entry_id=1, previous_lac=-1, timeout_ns=50 * MS))
    assert d.bookie.next_deadline_ns() == d.now_ns + 50 * MS
    d.send(add(1))
    assert d.bookie.next_deadline_ns() == d.now_ns + 2 * MS == d.bookie.next_deadline_ns()
    d.tick()
    assert d.bookie.next_deadline_ns() == d.now_ns - 2 * MS + 50 * MS, "no group deadline while a write is in flight"


def test_many_answered_long_polls_do_not_grow_the_deadline_heap():
    d = persisted_driver(1)
    for round_index in range(200):
        d.send(long_poll(round_index, entry_id=round_index + 1, previous_lac=round_index - 1, timeout_ns=10**12))
        d.send(add(round_index + 1, lac=round_index))
        d.tick()
        d.persist()
    assert len([a for a in d.answers() if isinstance(a, ReadResponse)]) == 200
    assert len(d.bookie._long_polls._deadlines) <= 64


def test_write_lac_and_force_are_refused_without_the_ledger_or_its_key():
    d = persisted_driver(1)
    d.send(WriteLacRequest(request_id=1, ledger_id=2, master_key=KEY, lac=0, body=b"lac"))
    d.send(WriteLacRequest(request_id=2, ledger_id=1, master_key=b"x" * 32, lac=0, body=b"lac"))
    d.send(WriteLacRequest(request_id=3, ledger_id=1, master_key=KEY, lac=-5, body=b"lac"))
    d.send(ForceLedgerRequest(request_id=4, ledger_id=2, master_key=KEY))
    d.send(ForceLedgerRequest(request_id=5, ledger_id=1, master_key=b"x" * 32))
    assert [(a.request_id, a.code) for a in d.answers()] == [
        (1, Code.NO_SUCH_LEDGER), (2, Code.UNAUTHORIZED), (3, Code.BAD_REQUEST),
        (4, Code.NO_SUCH_LEDGER), (5, Code.UNAUTHORIZED)]
    assert d.in_flight == [] and d.bookie.next_deadline_ns() is None


def test_force_waits_for_earlier_groups_of_deferred_adds():
    d = Driver()
    d.send(add(0, is_deferred_sync=True))
    d.tick()                                   # group with entry 0 in flight
    d.send(add(1, is_deferred_sync=True))
    d.send(ForceLedgerRequest(request_id=8, ledger_id=1, master_key=KEY))
    assert [a.entry_id for a in d.answers()] == [0, 1]
    first = d.in_flight.pop(0)
    d.bookie.on_persisted(first.token, d.now_ns)
    d.collect()
    assert d.answers() == [], "the force record is in the next group"
    d.tick()
    d.persist()
    assert d.answers() == [ForceLedgerResponse(8, Code.OK, 1)]
    assert d.bookie.statistics().deferred_adds_count == 2


class CountingStorage(MemoryLedgerStorage):
    def __init__(self) -> None:
        super().__init__()
        self.add_count = 0

    def add_entry(self, ledger_id, entry_id, body) -> None:
        self.add_count += 1
        super().add_entry(ledger_id, entry_id, body)


def test_deferred_sync_entry_is_readable_at_once_and_stored_once():
    d = Driver(storage=CountingStorage())
    d.send(add(0, is_deferred_sync=True))
    d.send(ReadRequest(request_id=5, ledger_id=1, entry_id=0))
    answers = d.answers()
    assert [a.code for a in answers] == [Code.OK, Code.OK] and answers[1].body == body(0)
    d.tick()
    d.persist()
    assert d.storage.add_count == 1
    replayed = Bookie(bookie_id="b", config=BookieConfig(), storage=MemoryLedgerStorage())
    assert replayed.replay_journal(d.journal).entry_count == 1


def test_pending_syncs_and_journal_queue_are_bounded():
    d = persisted_driver(1, pending_syncs_count_max=1)
    d.send(ForceLedgerRequest(request_id=1, ledger_id=1, master_key=KEY))
    d.send(ForceLedgerRequest(request_id=2, ledger_id=1, master_key=KEY))
    d.send(fence(request_id=3))
    assert [(a.request_id, a.code) for a in d.answers()] == [(2, Code.TOO_MANY_REQUESTS), (3, Code.TOO_MANY_REQUESTS)]
    queue_size_max = BookieConfig().entry_size_max + 1024
    d = Driver(journal_queue_size_max=queue_size_max, journal_buffered_writes_threshold_size=queue_size_max)
    big = DIGESTER.pack_entry(entry_id=0, lac=-1, length=0, payload=b"x" * (queue_size_max // 2))
    d.send(AddRequest(request_id=1, ledger_id=1, entry_id=0, master_key=KEY, body=big, is_deferred_sync=True))
    d.send(AddRequest(request_id=2, ledger_id=1, entry_id=0, master_key=KEY, body=big, is_deferred_sync=True))
    assert [(a.request_id, a.code) for a in d.answers()] == [(1, Code.OK), (2, Code.TOO_MANY_REQUESTS)]
    d.tick()
    d.send(AddRequest(request_id=3, ledger_id=1, entry_id=0, master_key=KEY, body=big, is_deferred_sync=True))
    assert d.answers()[0].code == Code.OK, "the group in flight no longer counts against the queue"


def test_known_lac_comes_from_storage_after_a_restart_without_replay():
    d = persisted_driver(4)
    d.send(WriteLacRequest(request_id=3, ledger_id=1, master_key=KEY, lac=3, body=DIGESTER.pack_lac(3)))
    d.tick()
    d.persist()
    # A restart whose storage was checkpointed: nothing to replay, the LAC is read from storage.
    restarted = Bookie(bookie_id="b", config=BookieConfig(), storage=d.storage)
    restarted.receive(long_poll(5, entry_id=3, previous_lac=2), source="client", now_ns=0)
    (effect,) = restarted.take_effects()
    assert effect.message.code == Code.OK and effect.message.lac == 3
    restarted = Bookie(bookie_id="b", config=BookieConfig(), storage=MemoryLedgerStorage())
    restarted.replay_journal(d.journal)
    restarted.receive(ReadRequest(request_id=5, ledger_id=1, entry_id=0), source="client", now_ns=0)
    assert restarted.take_effects()[0].message.lac == 3


def test_driver_misuse_raises_and_changes_nothing():
    d = Driver()
    d.send(add(0))
    d.tick()
    (write,) = d.in_flight
    with pytest.raises(BookieUsageError):
        d.bookie.on_persisted(write.token + 1, d.now_ns)
    d.bookie.invariants()
    with pytest.raises(BookieUsageError, match="before serving"):
        d.bookie.replay_journal(write.data)
    d.persist()
    assert d.answers()[0].code == Code.OK


def test_replay_refuses_corruption_in_the_middle():
    d = persisted_driver(3)
    data = bytearray(d.journal)
    data[20] ^= 0x01
    fresh = Bookie(bookie_id="b", config=BookieConfig(), storage=MemoryLedgerStorage())
    with pytest.raises(JournalCorrupted):
        fresh.replay_journal(bytes(data))


def test_statistics_count_outcomes():
    d = persisted_driver(2)
    d.send(add(1, key=b"x" * 32))
    d.send(ReadRequest(request_id=5, ledger_id=1, entry_id=0))
    d.send(ReadRequest(request_id=6, ledger_id=3, entry_id=0))
    stats = d.bookie.statistics()
    assert stats.adds_ok_count == 2 and stats.reads_count == 2 and stats.journal_writes_count == 1
    assert dict(stats.rejected_by_code) == {"UNAUTHORIZED": 1}
    assert stats.journal_records_count == 3 and stats.journal_written_size == len(d.journal)
    assert stats.journal_group_size_peak == len(d.journal) and stats.pending_adds_peak == 2


WELL_TYPED = [
    add(0),
    ReadRequest(request_id=1, ledger_id=1, entry_id=0),
    ReadLacRequest(request_id=1, ledger_id=1),
    WriteLacRequest(request_id=1, ledger_id=1, master_key=KEY, lac=0, body=b"lac"),
    ForceLedgerRequest(request_id=1, ledger_id=1, master_key=KEY),
    AddBatchRequest(request_id=1, ledger_id=1, first_entry_id=0, master_key=KEY, bodies=[body(0), body(1, 0)]),
]


@pytest.mark.parametrize("message", WELL_TYPED, ids=lambda m: type(m).__name__)
def test_every_ill_typed_field_is_malformed(message):
    """Each field replaced by a value of the wrong type (or an int out of int64) is refused
    and counted, and nothing else happens."""
    d = Driver()
    bad_values = {int: [True, "1", 2**63], bytes: ["k", bytearray(b"k")], bool: [1, None],
                  list: [(body(0),), [1], [], "x"]}
    expected = 0
    for field in dataclasses.fields(message):
        value_type = type(getattr(message, field.name))
        for bad in bad_values[value_type]:
            d.send(dataclasses.replace(message, **{field.name: bad}))
            expected += 1
    assert d.sent == [] and d.in_flight == [] and d.bookie.next_deadline_ns() is None
    assert d.bookie.statistics().malformed_count == expected


message_strategy = st.one_of(
    st.builds(AddRequest, request_id=st.integers(0, 9), ledger_id=st.integers(0, 2), entry_id=st.integers(-2, 5),
              master_key=st.sampled_from([KEY, b"other"]), body=st.sampled_from([body(0), body(1), body(2, 1), b"junk"]),
              is_recovery=st.booleans(), is_deferred_sync=st.booleans()),
    st.builds(ReadRequest, request_id=st.integers(0, 9), ledger_id=st.integers(0, 2), entry_id=st.integers(-1, 5),
              master_key=st.sampled_from([KEY, b"other"]), is_fencing=st.booleans(),
              previous_lac=st.integers(-1, 3), long_poll_timeout_ns=st.sampled_from([0, 10 * MS])),
    st.builds(ReadLacRequest, request_id=st.integers(0, 9), ledger_id=st.integers(0, 2)),
    st.builds(AddBatchRequest, request_id=st.integers(0, 9), ledger_id=st.integers(0, 2),
              first_entry_id=st.integers(-1, 3), master_key=st.sampled_from([KEY, b"other"]),
              bodies=st.sampled_from([[body(0), body(1, 0)], [body(1), body(2, 1)], [body(2, 1)], [body(0), b"junk"]]),
              is_recovery=st.booleans(), is_deferred_sync=st.booleans()),
    st.builds(WriteLacRequest, request_id=st.integers(0, 9), ledger_id=st.integers(0, 2),
              master_key=st.sampled_from([KEY, b"other"]), lac=st.integers(-1, 5), body=st.just(b"lac")),
    st.builds(ForceLedgerRequest, request_id=st.integers(0, 9), ledger_id=st.integers(0, 2),
              master_key=st.sampled_from([KEY, b"other"])),
)


def storage_state(storage: MemoryLedgerStorage) -> dict:
    return {ledger_id: (storage.master_key(ledger_id), storage.is_fenced(ledger_id), storage.explicit_lac(ledger_id),
                        [storage.get_entry(ledger_id, e) for e in range(-1, 6)])
            for ledger_id in storage.ledger_ids()}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(message_strategy, st.booleans(), st.booleans()), max_size=40),
       st.booleans(), st.integers(1, 4), st.booleans())
def test_fuzzed_requests_are_each_answered_once_and_replay_to_the_same_storage(steps, flush_when_empty,
                                                                               pending_max, answers_early):
    d = Driver(answers_early=answers_early, journal_flush_when_queue_empty=flush_when_empty,
               pending_adds_count_max=pending_max,
               pending_syncs_count_max=pending_max, long_poll_waiters_count_max=pending_max)
    for message, should_tick, should_persist in steps:
        d.send(message)
        if should_tick:
            d.tick()
        if should_persist:
            d.persist()
    for _ in range(2):
        d.tick(1000 * MS)
        d.persist()
    assert len(d.sent) == len(steps), "every request gets exactly one answer"
    assert d.bookie.next_deadline_ns() is None and d.in_flight == []
    replayed = Bookie(bookie_id="b", config=BookieConfig(), storage=MemoryLedgerStorage())
    assert replayed.replay_journal(d.journal).tail_problem is None
    assert storage_state(replayed.storage) == storage_state(d.storage)


def batch(first: int, count: int, **flags) -> AddBatchRequest:
    return AddBatchRequest(request_id=500 + first, ledger_id=1, first_entry_id=first, master_key=KEY,
                           bodies=[body(e, e - 1) for e in range(first, first + count)], **flags)


def test_a_batch_is_journaled_once_acknowledged_once_after_persistence_and_replayed():
    d = Driver()
    d.send(batch(0, 5))
    d.tick()
    assert d.answers() == [] and len(d.in_flight) == 1
    d.persist()
    assert d.answers() == [AddBatchResponse(500, Code.OK, 1, 0, 5)]
    d.send(batch(5, 3))
    d.tick()
    d.persist()
    assert d.answers()[0].count == 3
    assert [d.storage.get_entry(1, e) for e in range(8)] == [body(e, e - 1) for e in range(8)]
    assert d.bookie.statistics().adds_ok_count == 8
    replayed = Bookie(bookie_id="b", config=BookieConfig(), storage=MemoryLedgerStorage())
    assert replayed.replay_journal(d.journal).entry_count == 8
    assert storage_state(replayed.storage) == storage_state(d.storage)
    replayed.receive(ReadRequest(request_id=1, ledger_id=1, entry_id=0), source="client", now_ns=0)
    assert replayed.take_effects()[0].message.lac == 6      # piggybacked by entry 7


def test_bytes_added_and_read_are_counted_and_a_journal_write_says_its_entries():
    d = Driver()
    d.now_ns = 7 * MS
    d.send(add(0))
    d.send(batch(1, 3))
    d.send(add(9, key=b"other" * 8))                       # refused (UNAUTHORIZED): not counted
    d.tick()
    (write,) = d.in_flight
    assert (write.entry_count, write.group_started_at_ns) == (4, 7 * MS)
    d.persist()
    d.send(add(4, is_deferred_sync=True))                   # applied at once: counted too
    added = sum(len(body(e, e - 1 if 0 < e < 4 else -1)) for e in range(5))
    assert d.bookie.statistics().added_size == added
    d.answers()
    d.send(ReadRequest(request_id=1, ledger_id=1, entry_id=0))
    d.send(read_batch(2, 1, 3))
    d.send(ReadRequest(request_id=3, ledger_id=1, entry_id=8))     # NO_SUCH_ENTRY: nothing read
    assert d.bookie.statistics().read_size == sum(len(body(e, e - 1 if e else -1)) for e in range(4))


def test_a_batch_passes_or_fails_as_a_whole():
    d = Driver(pending_adds_count_max=4)
    bad = batch(0, 3)
    bad = dataclasses.replace(bad, bodies=bad.bodies[:2] + [body(7)])      # entry 2 claims to be 7
    d.send(bad)
    assert d.answers() == [AddBatchResponse(500, Code.BAD_REQUEST, 1, 0, 3)]
    d.send(batch(0, 5))                                                  # over the pending limit
    assert d.answers()[0].code == Code.TOO_MANY_REQUESTS
    d.send(batch(0, 2))
    d.send(ReadRequest(request_id=9, ledger_id=1, entry_id=-1, master_key=KEY, is_fencing=True))
    d.tick()
    d.persist()
    d.answers()
    d.send(batch(2, 2))
    assert d.answers()[0].code == Code.FENCED
    d.send(batch(2, 2, is_recovery=True))
    d.tick()
    d.persist()
    assert d.answers()[0].code == Code.OK
    assert d.storage.get_entry(1, 3) == body(3, 2) and d.storage.get_entry(1, 4) is None


# -- batch reads ------------------------------------------------------------------------------

def stored(d: Driver, count: int) -> None:
    for entry_id in range(count):
        d.send(add(entry_id))
    d.tick()
    d.persist()
    d.answers()


def read_batch(request_id: int, first: int, count: int, size_max: int = 1 << 20, ledger_id: int = 1):
    return ReadBatchRequest(request_id=request_id, ledger_id=ledger_id, first_entry_id=first, count_max=count,
                            size_max=size_max)


def test_batch_read_returns_the_entries_held_in_order_up_to_the_first_missing():
    d = Driver()
    stored(d, 5)
    d.send(read_batch(1, 1, 3))
    (answer,) = d.answers(ReadBatchResponse)
    assert answer.code == Code.OK and answer.first_entry_id == 1 and answer.bodies == [body(1), body(2), body(3)]
    d.send(read_batch(2, 3, 100))
    assert d.answers()[0].bodies == [body(3), body(4)], "stops before the first entry it does not hold"
    d.send(read_batch(3, 5, 10))
    assert d.answers()[0].code == Code.NO_SUCH_ENTRY
    d.send(read_batch(4, 0, 10, ledger_id=9))
    assert d.answers()[0].code == Code.NO_SUCH_LEDGER


def test_batch_read_keeps_under_size_max_but_always_sends_the_first_entry():
    d = Driver()
    stored(d, 5)
    size = len(body(0))
    d.send(read_batch(1, 0, 5, size_max=1))
    assert d.answers()[0].bodies == [body(0)]
    d.send(read_batch(2, 0, 5, size_max=2 * size + 1))
    assert d.answers()[0].bodies == [body(0), body(1)]


@pytest.mark.parametrize("first,count,size_max", [(-1, 5, 100), (0, 0, 100), (0, 10_001, 100), (0, 5, 0)])
def test_batch_read_with_a_bad_range_is_a_bad_request(first, count, size_max):
    d = Driver()
    stored(d, 2)
    d.send(read_batch(1, first, count, size_max))
    (answer,) = d.answers()
    assert answer.code == Code.BAD_REQUEST and answer.bodies == []


def test_batch_read_stops_before_a_corrupt_entry_which_is_an_io_error_when_first():
    d = Driver()
    stored(d, 4)
    d.storage.mark_corrupt(ledger_id=1, entry_id=2)
    d.send(read_batch(1, 0, 4))
    assert d.answers()[0].bodies == [body(0), body(1)]
    d.send(read_batch(2, 2, 2))
    (answer,) = d.answers()
    assert answer.code == Code.IO_ERROR and answer.bodies == [], "corruption is never 'no such entry'"


def test_a_single_add_is_checked_as_a_batch_of_one():
    """_on_add checks its one body itself (one header peek); every refusal matches the batch path's."""
    other_ledger = Digester(ledger_id=2, digest_type=DigestType.CRC32C, password=b"pw")
    cases = [
        dict(entry_id=0, body=body(0)),                                  # accepted
        dict(entry_id=0, body=b"short"),
        dict(entry_id=0, body=body(0)[:-len(b"p0")][:20]),                # a header cut short
        dict(entry_id=3, body=body(0)),                                  # claims another entry
        dict(entry_id=0, body=body(0, ledger_digester=other_ledger)),    # of another ledger
        dict(entry_id=0, body=body(0) + b"x" * 100),                     # over entry_size_max
        dict(entry_id=0, body=body(0), master_key=b"k" * 300),           # key too long
        dict(entry_id=0, body=body(0), master_key=b"other"),             # wrong key (ledger known)
        dict(entry_id=0, body=body(0), is_recovery=True),
    ]
    for case in cases:
        codes = []
        for is_batch in (False, True):
            d = Driver(entry_size_max=96, pending_adds_count_max=3)
            d.send(add(5))                                               # the ledger's key is known
            d.answers()
            master_key = case.get("master_key", KEY)
            is_recovery = case.get("is_recovery", False)
            if is_batch:
                d.send(AddBatchRequest(request_id=1, ledger_id=1, first_entry_id=case["entry_id"], master_key=master_key,
                                       bodies=[case["body"]], is_recovery=is_recovery))
            else:
                d.send(AddRequest(request_id=1, ledger_id=1, entry_id=case["entry_id"], master_key=master_key,
                                  body=case["body"], is_recovery=is_recovery))
            d.tick()
            d.persist()
            codes.append(([a.code for a in d.answers()], d.bookie.statistics().rejected_by_code))
        assert codes[0] == codes[1], case
