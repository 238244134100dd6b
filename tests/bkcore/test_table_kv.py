"""The table range state machine: etcd-style revisions and versions, ranges within a pkey,
counters, txn compares, TTL expiry with delete events, failed commands changing nothing, and
(under hypothesis) journal replay giving the same results, events and state."""

import pytest
from hypothesis import given, settings, strategies as st

from bkcore.table.commands import (
    Compare, CompareResult, CompareTarget, DeleteRange, ExpireKeys, IllegalOp, Increment, KeyNotFound, OpRefused, Put,
    PutResult, RangeRead, Stamped, TableError, Txn, decode_stamped, encode_stamped, fold_key, pkey_end, unfold_key,
)
from bkcore.table.kv import MemoryKvIndex, RangeState


def run(state, command, now_ms=0, position=None):
    return state.apply(Stamped(command, now_ms), position=position)


def test_put_get_versions_and_revisions_follow_etcd():
    state = RangeState(MemoryKvIndex())
    result, events = run(state, Put(b"a", b"1"))
    assert result.revision == 1 and result.prev_kv is None
    assert [(e.kind, e.kv.value, e.revision) for e in events] == [("put", b"1", 1)]
    run(state, Put(b"b", b"x"))
    result, events = run(state, Put(b"a", b"2", prev_kv=True))
    assert result.prev_kv.value == b"1" and events[0].prev_kv.value == b"1"
    kv = state.get(b"a", now_ms=0)
    assert (kv.value, kv.create_revision, kv.mod_revision, kv.version) == (b"2", 1, 3, 2)
    assert state.revision == 3
    deleted, events = run(state, DeleteRange(b"a", prev_kv=True))
    assert deleted.deleted == 1 and deleted.prev_kvs[0].value == b"2" and events[0].kind == "delete"
    assert state.get(b"a", now_ms=0) is None
    again, events = run(state, Put(b"a", b"3"))
    kv = state.get(b"a", now_ms=0)
    assert (kv.create_revision, kv.version) == (5, 1)
    nothing, events = run(state, DeleteRange(b"zzz"))
    assert (nothing.deleted, nothing.revision, events, state.revision) == (0, 5, [], 5)


def test_ranges_and_delete_ranges_stay_within_one_pkey():
    state = RangeState(MemoryKvIndex())
    for pkey in (b"p", b"q"):
        for lkey in (b"a", b"b", b"c"):
            run(state, Put(fold_key(pkey, lkey), pkey + lkey))
    assert unfold_key(fold_key(b"p", b"a")) == (b"p", b"a")
    everything_of_p = state.read(RangeRead(fold_key(b"p"), pkey_end(fold_key(b"p"))), now_ms=0)
    assert [kv.value for kv in everything_of_p.kvs] == [b"pa", b"pb", b"pc"] and everything_of_p.count == 3
    limited = state.read(RangeRead(fold_key(b"p", b"b"), pkey_end(fold_key(b"p")), limit=1), now_ms=0)
    assert [kv.value for kv in limited.kvs] == [b"pb"] and limited.more and limited.count == 2
    keys_only = state.read(RangeRead(fold_key(b"q"), pkey_end(fold_key(b"q")), keys_only=True), now_ms=0)
    assert [kv.value for kv in keys_only.kvs] == [b""] * 3
    result, events = run(state, DeleteRange(fold_key(b"p", b"b"), pkey_end(fold_key(b"p"))))
    assert result.deleted == 2 and len(events) == 2
    assert state.read(RangeRead(fold_key(b"q"), pkey_end(fold_key(b"q")), count_only=True), now_ms=0).count == 3


def test_counters_and_failed_commands_change_nothing():
    state = RangeState(MemoryKvIndex())
    assert run(state, Increment(b"c", 100))[0].total == 100
    assert run(state, Increment(b"c", -30))[0].total == 70
    counter = state.get(b"c", now_ms=0)
    assert counter.value == (70).to_bytes(8, "big", signed=True) and counter.is_number and counter.number == 70
    run(state, Put(b"text", b"12345678"))       # 8 bytes, but a value, not a counter
    before = (state.revision, MemoryKvIndex.items(state.index))
    error, events = run(state, Increment(b"text", 1))
    assert isinstance(error, IllegalOp) and "holds bytes, not a number" in str(error) and events == []
    # ...nor a put one that holds a number; inside a txn only that put is refused.
    error, events = run(state, Put(b"c", b"text"))
    assert isinstance(error, IllegalOp) and "holds a number" in str(error) and events == []
    result, _ = run(state, Txn((), (Put(b"c", b"x"), Put(b"other", b"y"))))
    assert isinstance(result.results[0], OpRefused) and isinstance(result.results[1], PutResult)
    assert state.get(b"c", now_ms=0).number == 70 and state.get(b"other", now_ms=0).value == b"y"
    run(state, DeleteRange(b"other"))
    before = (state.revision, MemoryKvIndex.items(state.index))
    # A txn whose second op fails leaves its first op undone too.
    error, events = run(state, Txn((), (Put(b"new", b"v"), Increment(b"text", 1))))
    assert isinstance(error, TableError) and events == []
    assert state.revision == before[0] and state.get(b"new", now_ms=0) is None
    for bad in (Put(b"", b"v"), Put(b"k", "str"), Increment(b"k", 2**63), Put(b"k", b"v", ttl_ms=-1)):
        assert isinstance(run(state, bad)[0], TableError)
    assert state.revision == before[0]


def test_txn_compares_every_target_and_picks_a_branch():
    state = RangeState(MemoryKvIndex())
    run(state, Put(b"k", b"v1"))
    run(state, Put(b"k", b"v2"))

    def txn(*compares):
        result, _ = run(state, Txn(tuple(compares), (RangeRead(b"k"),), (Put(b"lost", b"x"),)))
        return result.succeeded

    C, R = CompareTarget, CompareResult
    assert txn(Compare(b"k", C.VALUE, R.EQUAL, b"v2"), Compare(b"k", C.VERSION, R.EQUAL, 2))
    assert txn(Compare(b"k", C.CREATE_REVISION, R.EQUAL, 1), Compare(b"k", C.MOD_REVISION, R.GREATER, 1))
    assert txn(Compare(b"k", C.VALUE, R.LESS, b"v3"), Compare(b"k", C.VERSION, R.NOT_EQUAL, 5))
    assert not txn(Compare(b"k", C.VALUE, R.EQUAL, b"v1"))
    assert state.get(b"lost", now_ms=0) is not None
    # BookKeeper's rules for a missing key: its version or revisions cannot be compared (the
    # txn is refused); compare-and-create compares its value with "no value" (empty bytes).
    for target in (C.VERSION, C.CREATE_REVISION, C.MOD_REVISION):
        error, events = run(state, Txn((Compare(b"fresh", target, R.EQUAL, 0),), (Put(b"fresh", b"1"),)))
        assert isinstance(error, KeyNotFound) and "does not exist" in str(error) and events == []
    result, _ = run(state, Txn((Compare(b"fresh", C.VALUE, R.EQUAL, b""),), (Put(b"fresh", b"1"),)))
    assert result.succeeded and result.results[0].revision == state.revision
    assert txn(Compare(b"missing", C.VALUE, R.NOT_EQUAL, b"x"))
    assert not txn(Compare(b"missing", C.VALUE, R.EQUAL, b"x"))
    assert not txn(Compare(b"missing", C.VALUE, R.LESS, b"x"))
    assert not txn(Compare(b"missing", C.VALUE, R.GREATER, b"x"))
    # A present key against "no value": > and != hold, = and < do not.
    assert txn(Compare(b"k", C.VALUE, R.GREATER, b"")) and txn(Compare(b"k", C.VALUE, R.NOT_EQUAL, b""))
    assert not txn(Compare(b"k", C.VALUE, R.EQUAL, b"")) and not txn(Compare(b"k", C.VALUE, R.LESS, b""))


def test_ttl_keys_vanish_from_reads_and_expire_with_delete_events():
    state = RangeState(MemoryKvIndex())
    run(state, Put(b"session", b"alive", ttl_ms=1000), now_ms=5000)
    run(state, Put(b"forever", b"x"), now_ms=5000)
    assert state.get(b"session", now_ms=5999).value == b"alive"
    assert state.get(b"session", now_ms=6000) is None
    # A refresh (put again) pushes the expiry out; the old expiry does not delete it.
    run(state, Put(b"session", b"alive", ttl_ms=1000), now_ms=5500)
    _, events = run(state, ExpireKeys(), now_ms=6200)
    assert events == []
    _, events = run(state, ExpireKeys(), now_ms=6500)
    assert [(e.kind, e.kv.key, e.prev_kv.value) for e in events] == [("delete", b"session", b"alive")]
    assert state.get(b"forever", now_ms=10**9) is not None
    # Expiry happens before whatever command comes next, whatever it is.
    run(state, Put(b"short", b"x", ttl_ms=10), now_ms=7000)
    _, events = run(state, Put(b"other", b"y"), now_ms=7010)
    assert [e.kind for e in events] == ["delete", "put"]


commands = st.recursive(
    st.one_of(
        st.builds(Put, st.sampled_from([b"a", b"b", b"c"]), st.binary(max_size=3), st.booleans(),
                  st.sampled_from([0, 0, 5, 50])),
        st.builds(DeleteRange, st.sampled_from([b"a", b"b"]), st.sampled_from([None, b"c", b"d"]), st.booleans()),
        st.builds(Increment, st.sampled_from([b"a", b"n"]), st.integers(-5, 5)),
        st.just(ExpireKeys()),
    ),
    lambda inner: st.builds(
        Txn, st.lists(st.builds(Compare, st.sampled_from([b"a", b"n"]), st.sampled_from(list(CompareTarget)),
                                st.sampled_from(list(CompareResult)), st.integers(0, 3)), max_size=2).map(tuple),
        st.lists(inner.filter(lambda c: not isinstance(c, (Txn, ExpireKeys))), max_size=2).map(tuple),
        st.lists(inner.filter(lambda c: not isinstance(c, (Txn, ExpireKeys))), max_size=2).map(tuple)),
    max_leaves=4)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(commands, st.integers(0, 20)), max_size=25))
def test_replaying_the_journal_rebuilds_the_same_state(steps):
    """Apply commands (through their journal encoding) once live and once replayed: same
    results, events, revision and index; versions count puts since creation. The replay
    forgets its expiry floor before each command (so it looks for expiries every time): the
    floor that spares the live state those scans changes nothing."""
    live, replayed = RangeState(MemoryKvIndex()), RangeState(MemoryKvIndex())
    now, journal, outputs = 0, [], []
    for command, tick in steps:
        now += tick
        try:
            stamped = Stamped(command, now)
            data = encode_stamped(stamped)
        except TableError:
            continue
        journal.append(data)
        outputs.append(live.apply(stamped, position=len(journal)))
    for position, data in enumerate(journal, 1):
        replayed.expiry_floor_ms = None
        result, events = replayed.apply(decode_stamped(data), position=position)
        expected_result, expected_events = outputs[position - 1]
        assert events == expected_events
        assert type(result) is type(expected_result)
        if not isinstance(result, Exception):
            assert result == expected_result
    assert live.index.items() == replayed.index.items()
    assert (live.revision, live.applied_position) == (replayed.revision, replayed.applied_position)
    # Reopening from the index alone keeps the revision and the journal position.
    reopened = RangeState(MemoryKvIndex(dict(live.index.items())))
    assert (reopened.revision, reopened.applied_position) == (live.revision, live.applied_position)
    revisions = [e.revision for _, events in outputs for e in events]
    assert revisions == sorted(revisions)


def test_journal_records_refuse_junk():
    for junk in (b"", b"\x93\x01\x02", encode_stamped(Stamped(Put(b"k", b"v"), 1)).replace(b"\x01", b"\x09", 1)):
        with pytest.raises(TableError):
            decode_stamped(junk)
