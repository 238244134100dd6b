"""The Bookie state machine, driven by hand: durability before acks, group commit, fencing,
keys, readonly mode, long polls, LAC, force, limits, crash replay, and fuzzed input."""

import pytest
from hypothesis import given, settings, strategies as st

from bkcore.bookie.bookie import Bookie, BookieConfig
from bkcore.bookie.storage import MemoryLedgerStorage
from bkcore.digest import Digester, DigestType
from bkcore.effects import JournalWrite, Send
from bkcore.errors import Code
from bkcore.wire import (
    AddRequest, AddResponse, ForceLedgerRequest, ReadLacRequest, ReadRequest, WriteLacRequest,
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

    def __init__(self, **config) -> None:
        self.config = BookieConfig(**config)
        self.storage = MemoryLedgerStorage()
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
    d = Driver()
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
    d.storage.corrupt_entries.add((1, 0))
    d.send(ReadRequest(request_id=3, ledger_id=1, entry_id=0))
    assert d.answers()[0].code == Code.IO_ERROR, "corruption must never read as 'no such entry'"


def test_long_poll_wakes_when_the_lac_moves():
    d = Driver()
    d.send(add(0))
    d.tick()
    d.persist()
    d.answers()
    d.send(ReadRequest(request_id=5, ledger_id=1, entry_id=1, previous_lac=-1, long_poll_timeout_ns=1000 * MS))
    assert d.answers() == []
    d.send(add(1, lac=0))
    d.tick()
    d.persist()
    answers = {a.request_id: a for a in d.answers()}
    assert answers[5].lac == 0 and answers[5].code == Code.OK and answers[5].body == body(1, 0)


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


message_strategy = st.one_of(
    st.builds(AddRequest, request_id=st.integers(0, 9), ledger_id=st.integers(0, 2), entry_id=st.integers(-2, 5),
              master_key=st.sampled_from([KEY, b"other"]), body=st.sampled_from([body(0), body(1), b"junk"]),
              is_recovery=st.booleans(), is_deferred_sync=st.booleans()),
    st.builds(ReadRequest, request_id=st.integers(0, 9), ledger_id=st.integers(0, 2), entry_id=st.integers(-1, 5),
              master_key=st.sampled_from([KEY, b"other"]), is_fencing=st.booleans(),
              previous_lac=st.integers(-1, 3), long_poll_timeout_ns=st.sampled_from([0, 10 * MS])),
    st.builds(ReadLacRequest, request_id=st.integers(0, 9), ledger_id=st.integers(0, 2)),
    st.builds(WriteLacRequest, request_id=st.integers(0, 9), ledger_id=st.integers(0, 2),
              master_key=st.sampled_from([KEY, b"other"]), lac=st.integers(-1, 5), body=st.just(b"lac")),
    st.builds(ForceLedgerRequest, request_id=st.integers(0, 9), ledger_id=st.integers(0, 2),
              master_key=st.sampled_from([KEY, b"other"])),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(message_strategy, st.booleans(), st.booleans()), max_size=40))
def test_fuzzed_requests_only_produce_answers_and_journal_writes(steps):
    d = Driver()
    for message, should_tick, should_persist in steps:
        d.send(message)
        if should_tick:
            d.tick()
        if should_persist:
            d.persist()
    d.tick(1000 * MS)
    d.persist()
    d.tick(1000 * MS)
    d.persist()
    replayed = Bookie(bookie_id="b", config=BookieConfig(), storage=MemoryLedgerStorage())
    assert replayed.replay_journal(d.journal).tail_problem is None
    assert replayed.storage.ledger_ids() == d.storage.ledger_ids()
