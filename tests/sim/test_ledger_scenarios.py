"""Scenarios ported in spirit from BookKeeper's suite, run on a fault-free SimWorld with faults
applied by hand: BookieWriteLedgerTest, LedgerCloseTest, LedgerRecoveryTest, LedgerRecovery2Test,
ParallelLedgerRecoveryTest, TestFencing, BookieFailureTest, HandleFailuresTest,
TestDelayEnsembleChange, TestReadLastConfirmedLongPoll, TestSpeculativeRead."""

import pytest

from bkcore.client.config import ClientConfig
from bkcore.digest import DigestType
from bkcore.errors import (
    BadRequest, IllegalOperation, LedgerClosed, LedgerFenced, NoSuchLedger, NotEnoughBookies,
    TooManyEnsembleChanges, Unauthorized,
)
from bkcore.wire import AddRequest, WriteLacRequest
from bksim.harness import Harness
from bksim.scenario import MS, S


def payloads(count: int, prefix: str = "entry") -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(count)]


def write_entries(h: Harness, writer, entries: list[bytes]) -> None:
    for expected_id, payload in enumerate(entries, start=writer.last_add_pushed + 1):
        assert h.add(writer, payload) == expected_id


def read_all(h: Harness, reader) -> list[bytes]:
    last = reader.metadata.last_entry_id if reader.is_closed else reader.last_add_confirmed
    if last < 0:
        return []
    completed = h.read(reader, 0, last)
    assert completed.error is None, completed.error
    return completed.result


# -- BookieWriteLedgerTest ----------------------------------------------------------------

@pytest.mark.parametrize("e,w,a", [(1, 1, 1), (3, 2, 2), (3, 3, 2), (4, 3, 1), (5, 5, 3), (5, 2, 1)])
@pytest.mark.parametrize("digest_type", list(DigestType))
def test_write_close_and_read_back(e, w, a, digest_type):
    h = Harness(bookie_count=5)
    writer = h.create_ledger(ensemble_size=e, write_quorum_size=w, ack_quorum_size=a, digest_type=digest_type)
    entries = payloads(25)
    write_entries(h, writer, entries)
    metadata = h.close(writer)
    assert (metadata.last_entry_id, metadata.length) == (24, sum(map(len, entries)))
    opened = h.open(writer.ledger_id, is_recovery=False)
    assert opened.error is None
    assert read_all(h, opened.result) == entries


def test_pipelined_adds_complete_in_order():
    h = Harness()
    writer = h.create_ledger()
    client = h.client()
    keys = [h.start("client", lambda op, i=i: writer.add(op, b"p%d" % i, now_ns=h.now_ns)) for i in range(200)]
    results = [h.wait(key) for key in keys]
    assert [c.result for c in results] == list(range(200))
    assert writer.last_add_confirmed == 199
    del client


def test_add_after_close_fails_and_oversized_entries_are_refused():
    h = Harness(client_config=ClientConfig(entry_size_max=1024))
    writer = h.create_ledger()
    too_big = h.run("client", lambda op: writer.add(op, b"x" * 2048, now_ns=h.now_ns))
    assert isinstance(too_big.error, BadRequest)
    h.add(writer, b"fits")
    h.close(writer)
    after = h.run("client", lambda op: writer.add(op, b"late", now_ns=h.now_ns))
    assert isinstance(after.error, LedgerClosed)


def test_wrong_password_and_unknown_ledger():
    h = Harness()
    writer = h.create_ledger(password=b"right")
    h.add(writer, b"a")
    assert isinstance(h.open(writer.ledger_id, password=b"wrong", is_recovery=False).error, Unauthorized)
    assert isinstance(h.open(writer.ledger_id, password=b"wrong").error, Unauthorized)
    assert isinstance(h.open(9_999_999, password=b"right").error, NoSuchLedger)


def test_not_enough_bookies_to_create():
    h = Harness(bookie_count=2)
    client = h.client()
    completed = h.run("client", lambda op: client.create_ledger(op, password=b"", now_ns=h.now_ns))
    assert isinstance(completed.error, NotEnoughBookies)


def test_reads_past_the_lac_are_refused():
    h = Harness()
    writer = h.create_ledger()
    write_entries(h, writer, payloads(3))
    reader = h.open(writer.ledger_id, is_recovery=False).result
    completed = h.read(reader, 0, reader.last_add_confirmed + 5)
    assert isinstance(completed.error, IllegalOperation)


# -- LedgerCloseTest ----------------------------------------------------------------------

def test_close_waits_for_pending_adds():
    h = Harness()
    writer = h.create_ledger()
    keys = [h.start("client", lambda op, i=i: writer.add(op, b"e%d" % i, now_ns=h.now_ns)) for i in range(10)]
    close_key = h.start("client", lambda op: writer.close(op, now_ns=h.now_ns))
    assert [h.wait(k).result for k in keys] == list(range(10))
    metadata = h.wait(close_key).result
    assert metadata.last_entry_id == 9


def test_closing_an_empty_ledger():
    h = Harness()
    writer = h.create_ledger()
    metadata = h.close(writer)
    assert (metadata.last_entry_id, metadata.length) == (-1, 0)
    assert read_all(h, h.open(writer.ledger_id).result) == []


# -- LedgerRecoveryTest -------------------------------------------------------------------

@pytest.mark.parametrize("e,w,a", [(3, 3, 2), (3, 2, 2), (5, 3, 2), (2, 2, 1)])
def test_recovery_finds_every_acknowledged_entry(e, w, a):
    h = Harness(bookie_count=5)
    writer = h.create_ledger(ensemble_size=e, write_quorum_size=w, ack_quorum_size=a)
    entries = payloads(20)
    write_entries(h, writer, entries)
    opened = h.open(writer.ledger_id)
    assert opened.error is None
    reader = opened.result
    assert reader.metadata.last_entry_id == 19
    assert reader.metadata.length == sum(map(len, entries))
    assert read_all(h, reader) == entries


def test_recovery_of_an_empty_open_ledger():
    h = Harness()
    writer = h.create_ledger()
    reader = h.open(writer.ledger_id).result
    assert reader.metadata.is_closed and reader.metadata.last_entry_id == -1


def test_recovery_with_a_bookie_down():
    h = Harness()
    writer = h.create_ledger(ensemble_size=3, write_quorum_size=3, ack_quorum_size=2)
    write_entries(h, writer, payloads(10))
    h.crash(writer.metadata.last_ensemble[0])
    reader = h.open(writer.ledger_id).result
    assert reader.metadata.last_entry_id == 9


def test_recovery_rewrites_entries_past_the_lac_that_reached_few_bookies():
    # Entry 5 reaches only one bookie of three (Qa = 2, so it is never acknowledged). Recovery
    # finds it there (only 2 bookies say "no such entry", the threshold is Qw - Qa + 1 = 2...
    # so it is declared missing) — unless a copy is found first. Either outcome is legal; what
    # is not legal is an acknowledged entry missing, or replicas that disagree.
    h = Harness()
    writer = h.create_ledger(ensemble_size=3, write_quorum_size=3, ack_quorum_size=2)
    write_entries(h, writer, payloads(5))
    target = writer.metadata.last_ensemble[0]
    h.drop_messages(lambda s, d, m: isinstance(m, AddRequest) and m.entry_id == 5 and d != target)
    h.start("client", lambda op: writer.add(op, b"entry-5", now_ns=h.now_ns))
    h.advance(10 * MS)
    h.drop_messages(None)
    reader = h.open(writer.ledger_id).result
    assert reader.metadata.last_entry_id in (4, 5)
    entries = read_all(h, reader)
    assert entries[:5] == payloads(5)


# -- LedgerRecovery2Test ------------------------------------------------------------------

def test_first_writer_cannot_commit_after_second_writer_closed():
    h = Harness(bookie_count=3)
    writer = h.create_ledger(ensemble_size=3, write_quorum_size=3, ack_quorum_size=2)
    write_entries(h, writer, payloads(5))
    # Entry 5 reaches a single bookie; the others never see it while recovery runs.
    lone = writer.metadata.last_ensemble[0]
    h.drop_messages(lambda s, d, m: s == "client" and isinstance(m, AddRequest) and d != lone)
    pending = h.start("client", lambda op: writer.add(op, b"late", now_ns=h.now_ns))
    h.advance(5 * MS)
    reader = h.open(writer.ledger_id, "recoverer").result
    closed_at = reader.metadata.last_entry_id
    h.drop_messages(None)
    outcome = h.wait(pending)
    # Either way the add must not be committed past the close: it fails (fenced, closed, or
    # out of bookies while trying to route around the silent ones), or it lies within the close.
    if outcome.error is None:
        assert outcome.result <= closed_at, "the first writer committed past the second writer's close"
    later = h.run("client", lambda op: writer.add(op, b"later", now_ns=h.now_ns))
    assert later.error is not None


# -- ParallelLedgerRecoveryTest -----------------------------------------------------------

def test_parallel_recoveries_converge():
    h = Harness(bookie_count=4)
    writer = h.create_ledger()
    write_entries(h, writer, payloads(30))
    keys = []
    for name in ("r1", "r2", "r3"):
        client = h.client(name)
        keys.append(h.start(name, lambda op, c=client: c.open_ledger(op, writer.ledger_id, password=b"pw",
                                                                      is_recovery=True, now_ns=h.now_ns)))
    results = [h.wait(key) for key in keys]
    assert all(r.error is None for r in results), [r.error for r in results]
    closes = {(r.result.metadata.last_entry_id, r.result.metadata.length) for r in results}
    assert len(closes) == 1 and next(iter(closes))[0] == 29


# -- TestFencing --------------------------------------------------------------------------

def test_recovery_fences_the_writer():
    h = Harness()
    writer = h.create_ledger()
    write_entries(h, writer, payloads(3))
    assert h.open(writer.ledger_id, "recoverer").error is None
    fenced = h.run("client", lambda op: writer.add(op, b"after", now_ns=h.now_ns))
    assert isinstance(fenced.error, (LedgerFenced, LedgerClosed))
    # The recovered close agrees with this writer's LAC, so closing it is not an error
    # (BookKeeper accepts a close that matches the stored last entry and length).
    closed = h.run("client", lambda op: writer.close(op, now_ns=h.now_ns))
    assert closed.error is None and closed.result.last_entry_id == 2


def test_writer_close_disagreeing_with_recovery_fails():
    h = Harness()
    writer = h.create_ledger()
    write_entries(h, writer, payloads(3))
    # Entry 3 is acknowledged by nobody: the writer's LAC stays 2 while recovery may keep it.
    h.drop_messages(lambda s, d, m: s == "client" and isinstance(m, AddRequest) and m.entry_id == 3
                    and d != writer.metadata.last_ensemble[0])
    h.start("client", lambda op: writer.add(op, b"half", now_ns=h.now_ns))
    h.advance(5 * MS)
    reader = h.open(writer.ledger_id, "recoverer").result
    closed = h.run("client", lambda op: writer.close(op, now_ns=h.now_ns))
    if reader.metadata.last_entry_id == writer.last_add_confirmed:
        assert closed.error is None
    else:
        assert closed.error is not None


def test_opening_without_recovery_does_not_fence():
    h = Harness()
    writer = h.create_ledger()
    write_entries(h, writer, payloads(3))
    assert h.open(writer.ledger_id, is_recovery=False).error is None
    assert h.add(writer, b"still writable") == 3


# -- BookieFailureTest / HandleFailuresTest -----------------------------------------------

def test_writer_replaces_a_crashed_bookie_and_keeps_every_entry():
    h = Harness(bookie_count=4)
    writer = h.create_ledger(ensemble_size=3, write_quorum_size=3, ack_quorum_size=2)
    entries = payloads(40)
    write_entries(h, writer, entries[:20])
    victim = writer.metadata.last_ensemble[1]
    h.crash(victim)
    write_entries(h, writer, entries[20:])
    assert writer.ensemble_change_count >= 1
    assert victim not in writer.metadata.last_ensemble
    h.close(writer)
    assert read_all(h, h.open(writer.ledger_id).result) == entries


def test_two_failures_with_spares():
    h = Harness(bookie_count=5)
    writer = h.create_ledger(ensemble_size=3, write_quorum_size=3, ack_quorum_size=2)
    entries = payloads(30)
    write_entries(h, writer, entries[:10])
    h.crash(writer.metadata.last_ensemble[0])
    write_entries(h, writer, entries[10:20])
    h.crash(writer.metadata.last_ensemble[2])
    write_entries(h, writer, entries[20:])
    h.close(writer)
    assert read_all(h, h.open(writer.ledger_id).result) == entries


def test_no_spare_bookie_fails_the_adds():
    h = Harness(bookie_count=3)
    writer = h.create_ledger(ensemble_size=3, write_quorum_size=3, ack_quorum_size=3)
    write_entries(h, writer, payloads(3))
    h.crash(writer.metadata.last_ensemble[0])
    failed = h.run("client", lambda op: writer.add(op, b"x", now_ns=h.now_ns))
    assert isinstance(failed.error, NotEnoughBookies)


def test_ensemble_change_limit():
    h = Harness(bookie_count=6, client_config=ClientConfig(ensemble_change_count_max=1))
    writer = h.create_ledger(ensemble_size=3, write_quorum_size=3, ack_quorum_size=3)
    h.add(writer, b"a")
    h.crash(writer.metadata.last_ensemble[0])
    h.add(writer, b"b")
    h.crash(writer.metadata.last_ensemble[1])
    failed = h.run("client", lambda op: writer.add(op, b"c", now_ns=h.now_ns))
    assert isinstance(failed.error, TooManyEnsembleChanges)


def test_readonly_bookie_is_replaced():
    h = Harness(bookie_count=4)
    writer = h.create_ledger()
    h.add(writer, b"a")
    readonly = writer.metadata.last_ensemble[0]
    h.bookie(readonly).set_readonly(True)
    h.add(writer, b"b")
    assert readonly not in writer.metadata.last_ensemble


# -- TestDelayEnsembleChange (in spirit: a slow bookie is replaced after the add timeout) -

def test_paused_bookie_is_replaced_after_the_add_timeout():
    config = ClientConfig(add_entry_timeout_ns=500 * MS)
    h = Harness(bookie_count=4, client_config=config)
    writer = h.create_ledger(ensemble_size=3, write_quorum_size=3, ack_quorum_size=3)
    h.add(writer, b"a")
    slow = writer.metadata.last_ensemble[2]
    h.world.pause_node(slow, 10 * S)
    started_ns = h.now_ns
    assert h.add(writer, b"b") == 1
    assert h.now_ns - started_ns >= 500 * MS
    assert slow not in writer.metadata.last_ensemble


# -- TestReadLastConfirmedLongPoll --------------------------------------------------------

def test_long_poll_returns_when_the_lac_moves():
    h = Harness()
    writer = h.create_ledger()
    h.add(writer, b"a")
    h.add(writer, b"b")
    reader = h.open(writer.ledger_id, is_recovery=False).result
    assert reader.last_add_confirmed == 0     # entry 1 carries LAC 0
    poll = h.start("reader", lambda op: reader.long_poll_lac(op, now_ns=h.now_ns, timeout_ns=5 * S))
    h.advance(50 * MS)
    h.add(writer, b"c")                       # entry 2 carries LAC 1
    result = h.wait(poll)
    assert result.error is None and result.result >= 1


def test_a_long_poll_brings_back_the_entry_it_waited_for():
    h = Harness(client_config=ClientConfig(explicit_lac_interval_ns=0))
    writer = h.create_ledger()
    write_entries(h, writer, payloads(2))
    reader = h.open(writer.ledger_id, is_recovery=False).result
    lac = reader.last_add_confirmed
    poll = h.start("reader", lambda op: reader.long_poll_lac(op, now_ns=h.now_ns, timeout_ns=5 * S))
    h.advance(50 * MS)
    write_entries(h, writer, [b"next"])
    assert h.wait(poll).result > lac
    expected = (payloads(2) + [b"next"])[lac + 1]
    assert reader.take_polled_entry(lac + 1) == expected
    assert reader.take_polled_entry(lac + 1) is None, "taken once"


def test_an_entry_a_timed_out_long_poll_brings_back_is_not_confirmed_so_not_taken():
    h = Harness(client_config=ClientConfig(explicit_lac_interval_ns=0))
    writer = h.create_ledger()
    h.add(writer, b"a")                       # carries LAC -1, and no explicit LAC follows
    reader = h.open(writer.ledger_id, is_recovery=False).result
    assert reader.last_add_confirmed == -1
    result = h.run("reader", lambda op: reader.long_poll_lac(op, now_ns=h.now_ns, timeout_ns=100 * MS))
    assert result.result == -1
    assert reader.take_polled_entry(0) is None


def test_long_poll_times_out_unchanged():
    h = Harness(client_config=ClientConfig(explicit_lac_interval_ns=0))
    writer = h.create_ledger()
    h.add(writer, b"a")
    reader = h.open(writer.ledger_id, is_recovery=False).result
    before = reader.last_add_confirmed
    started_ns = h.now_ns
    result = h.run("reader", lambda op: reader.long_poll_lac(op, now_ns=h.now_ns, timeout_ns=300 * MS))
    assert result.error is None and result.result == before
    assert h.now_ns - started_ns >= 300 * MS


def test_explicit_lac_reaches_readers_of_an_idle_writer():
    h = Harness(client_config=ClientConfig(explicit_lac_interval_ns=100 * MS))
    writer = h.create_ledger()
    write_entries(h, writer, payloads(5))
    h.advance(300 * MS)
    reader = h.open(writer.ledger_id, is_recovery=False).result
    assert reader.last_add_confirmed == 4


def test_an_idle_writer_pushes_its_lac_at_once_and_at_most_once_per_interval():
    h = Harness(client_config=ClientConfig(explicit_lac_interval_ns=100 * MS))
    writer = h.create_ledger()
    pushes: list[tuple[int, int]] = []       # (time sent, lac) of each LAC push to the first bookie
    first_bookie = writer.metadata.last_ensemble[0]

    def observe(source, destination, message):
        if type(message) is WriteLacRequest and destination == first_bookie:
            pushes.append((h.now_ns, message.lac))
        return False

    h.drop_messages(observe)
    added_ns = h.now_ns
    h.add(writer, b"a")                       # (the harness steps time: the add completed by now)
    assert [lac for _, lac in pushes] == [0] and added_ns < pushes[0][0] <= h.now_ns
    h.add(writer, b"b")
    h.advance(200 * MS)
    assert [lac for _, lac in pushes] == [0, 1]
    assert pushes[1][0] == pushes[0][0] + 100 * MS      # the interval since the last push, not sooner
    reader = h.open(writer.ledger_id, is_recovery=False).result
    assert reader.last_add_confirmed == 1


# -- TestSpeculativeRead ------------------------------------------------------------------

@pytest.mark.parametrize("speculative_ns,fast", [(50 * MS, True), (60 * S, False)])
def test_speculative_read_asks_the_next_replica(speculative_ns, fast):
    config = ClientConfig(speculative_read_timeout_ns=speculative_ns, read_entry_timeout_ns=2 * S)
    h = Harness(client_config=config)
    writer = h.create_ledger(ensemble_size=3, write_quorum_size=3, ack_quorum_size=2)
    write_entries(h, writer, payloads(3))
    h.close(writer)
    reader = h.open(writer.ledger_id).result
    h.world.pause_node(writer.metadata.ensemble_for(0)[0], 30 * S)
    started_ns = h.now_ns
    completed = h.read(reader, 0, 0)
    assert completed.error is None and completed.result == [b"entry-0"]
    elapsed_ns = h.now_ns - started_ns
    assert (elapsed_ns < 1 * S) if fast else (elapsed_ns >= 2 * S)


# -- deferred sync, force recovery, delete -------------------------------------------------

def test_deferred_sync_lac_moves_only_with_force():
    h = Harness()
    writer = h.create_ledger(is_deferred_sync=True)
    write_entries(h, writer, payloads(4))
    assert writer.last_add_confirmed == -1
    assert h.ok("client", lambda op: writer.force(op, now_ns=h.now_ns)) == 3
    assert writer.last_add_confirmed == 3


def test_forced_recovery_when_bookies_are_lost_for_good():
    # A bookie is gone for good: with Qa = 1 every write set must answer for coverage, so a
    # normal recovery refuses; a forced one proceeds with the bookies it can reach.
    h = Harness(bookie_count=3)
    writer = h.create_ledger(ensemble_size=3, write_quorum_size=3, ack_quorum_size=1)
    write_entries(h, writer, payloads(5))
    h.crash(writer.metadata.last_ensemble[0])
    assert h.open(writer.ledger_id, "r1").error is not None
    forced = h.open(writer.ledger_id, "r2", is_forced=True)
    assert forced.error is None, forced.error
    assert forced.result.metadata.last_entry_id == 4
    assert read_all(h, forced.result) == payloads(5)


def test_recovery_waits_for_bookies_rather_than_changing_ensembles():
    # Qw = Qa = 3 and one bookie of the ensemble is down: recovery cannot rewrite safely, so it
    # fails (retryable) instead of moving entries to a bookie that never received them.
    h = Harness(bookie_count=4)
    writer = h.create_ledger(ensemble_size=3, write_quorum_size=3, ack_quorum_size=3)
    write_entries(h, writer, payloads(5))
    down = writer.metadata.last_ensemble[2]
    h.crash(down)
    first = h.open(writer.ledger_id, "r1")
    assert first.error is not None
    h.restart(down)
    second = h.open(writer.ledger_id, "r2")
    assert second.error is None and second.result.metadata.last_entry_id == 4
    assert second.result.metadata.ensembles == writer.metadata.ensembles


def test_delete_ledger():
    h = Harness()
    writer = h.create_ledger()
    h.add(writer, b"a")
    h.close(writer)
    client = h.client()
    assert h.ok("client", lambda op: client.delete_ledger(op, writer.ledger_id, now_ns=h.now_ns)) == writer.ledger_id
    assert isinstance(h.open(writer.ledger_id).error, NoSuchLedger)


def test_without_a_spare_the_writer_goes_on_while_the_ack_quorum_is_reachable():
    # TestDelayEnsembleChange in spirit: with no bookie to replace a dead one, the writer keeps
    # writing to the survivors as long as every write set still reaches Qa, and replaces the
    # dead bookie once one registers.
    h = Harness(bookie_count=4)
    writer = h.create_ledger(ensemble_size=3, write_quorum_size=3, ack_quorum_size=2)
    spare = next(b for b in h.bookie_ids if b not in writer.metadata.last_ensemble)
    h.crash(spare)
    entries = payloads(20)
    write_entries(h, writer, entries[:5])
    victim = writer.metadata.last_ensemble[0]
    h.crash(victim)
    write_entries(h, writer, entries[5:15])
    assert victim in writer.metadata.last_ensemble, "no spare: the ensemble cannot change yet"
    h.restart(spare)
    h.advance(3 * S)
    write_entries(h, writer, entries[15:])
    assert victim not in writer.metadata.last_ensemble and spare in writer.metadata.last_ensemble
    h.close(writer)
    assert read_all(h, h.open(writer.ledger_id).result) == entries


# -- ReadOnlyBookieTest: a filling disk turns a bookie readonly, and back -------------------

def test_a_full_disk_turns_a_bookie_readonly_and_back():
    from bkcore.metaops import Children
    h = Harness(bookie_count=4)
    writer = h.create_ledger(ensemble_size=3, write_quorum_size=3, ack_quorum_size=2)
    entries = payloads(10)
    write_entries(h, writer, entries[:5])
    victim = writer.metadata.last_ensemble[0]
    disk = h.world.bookies[victim].fs
    disk.capacity_size = int(disk.used_size() / 0.96) + 1          # 96% used: past the 95% threshold
    h.advance(1 * S)
    assert h.bookie(victim).is_readonly
    layout = h.world.layout
    assert victim in h.world.metastore.apply(Children(layout.readonly_path)).children
    assert victim not in h.world.metastore.apply(Children(layout.available_path)).children
    write_entries(h, writer, entries[5:])                          # READONLY answers: ensemble change
    assert victim not in writer.metadata.last_ensemble
    reader = h.open(writer.ledger_id).result                       # fencing + recovery adds still work
    assert read_all(h, reader) == entries
    # Space is added (a journal that filled up meanwhile may have stopped the bookie; it restarts):
    # below the low-water mark it is writable again.
    disk.capacity_size = 1 << 40
    h.advance(4 * S)
    assert not h.bookie(victim).is_readonly
    assert victim in h.world.metastore.apply(Children(layout.available_path)).children


# -- ConcurrentLedgerTest: many ledgers written at once through the same bookies -----------

def test_many_ledgers_written_concurrently_read_back_intact():
    h = Harness(bookie_count=5)
    writers = []
    for index in range(12):
        client_name = f"writer-{index % 3}"
        writers.append((client_name, h.create_ledger(client_name, ensemble_size=3, write_quorum_size=2,
                                                     ack_quorum_size=2)))
    keys = []
    for round_index in range(30):                 # interleave adds across every ledger
        for client_name, writer in writers:
            payload = b"ledger %d entry %d" % (writer.ledger_id, round_index)
            keys.append((writer, round_index, payload, h.start(
                client_name, lambda op, w=writer, p=payload: w.add(op, p, now_ns=h.now_ns))))
    for writer, round_index, payload, key in keys:
        completed = h.wait(key)
        assert completed.error is None and completed.result == round_index
    for client_name, writer in writers:
        h.close(writer, client_name)
    for _, writer in writers:
        reader = h.open(writer.ledger_id, is_recovery=False).result
        assert read_all(h, reader) == [b"ledger %d entry %d" % (writer.ledger_id, i) for i in range(30)]
    # Every bookie journaled, checkpointed and can still serve after a restart.
    for bookie_id in h.bookie_ids:
        h.crash(bookie_id)
        h.restart(bookie_id)
    for _, writer in writers:
        reader = h.open(writer.ledger_id, "after-restart", is_recovery=False).result
        assert len(read_all(h, reader)) == 30
