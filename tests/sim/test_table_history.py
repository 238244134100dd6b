"""bksim.table_history's checker, fed right and deliberately wrong histories: every rule must be able
to fail."""

from bksim.table_history import MISSING, MS, TableHistory, WatchLog, check_table_history

P, C = b"p0", b"n0"


def history(**kwargs) -> TableHistory:
    return TableHistory(counter_pkeys=frozenset([C]), **kwargs)


def op(h: TableHistory, kind: str, lkey: bytes, args: tuple, at_ms: int, done_ms: int | None, result, *,
       pkey: bytes = P, lkeys: tuple[bytes, ...] | None = None, process: str = "tc0.1"):
    recorded = h.invoke(process, kind, pkey, lkeys or (lkey,), args, at_ms * MS)
    if result is not None:
        h.complete(recorded, result, done_ms * MS)
    return recorded


def kinds(h: TableHistory) -> list[str]:
    return [v.kind for v in check_table_history(h)]


def test_a_sequential_register_history_passes():
    h = history()
    op(h, "put", b"a", (b"v1", 0), 0, 1, (None, 0, 1))
    op(h, "get", b"a", (), 2, 3, (b"v1", 1))
    op(h, "txn", b"a", ("version", 1, b"v2"), 4, 5, (True, None, 2))
    op(h, "txn", b"a", ("value", b"v1", b"v3"), 6, 7, (False, (b"v2", 2), None))
    op(h, "range", b"", (), 8, 9, ((b"a", b"v2", 2),), lkeys=(b"a", b"b"))
    op(h, "delete", b"a", (), 10, 11, (1, 3))
    op(h, "get", b"a", (), 12, 13, MISSING)
    assert kinds(h) == []


def test_a_stale_read_is_not_linearizable():
    h = history()
    op(h, "put", b"a", (b"v1", 0), 0, 1, (None, 0, 1))
    op(h, "put", b"a", (b"v2", 0), 2, 3, (b"v1", 1, 2))
    op(h, "get", b"a", (), 4, 5, (b"v1", 1))
    assert kinds(h) == ["not-linearizable"]


def test_an_unknown_write_may_have_happened_or_not():
    h = history()
    op(h, "put", b"a", (b"v1", 0), 0, None, None)
    op(h, "get", b"a", (), 4, 5, (b"v1", 1))
    op(h, "get", b"b", (), 4, 5, MISSING)
    assert kinds(h) == []


def test_a_range_read_projects_absent_keys_as_missing():
    h = history()
    op(h, "put", b"b", (b"v1", 0), 0, 1, (None, 0, 1))
    op(h, "range", b"", (), 2, 3, (), lkeys=(b"a", b"b"))
    assert kinds(h) == ["not-linearizable"]


def test_a_txn_that_failed_where_its_compare_held_is_caught():
    h = history()
    op(h, "put", b"a", (b"v1", 0), 0, 1, (None, 0, 1))
    op(h, "txn", b"a", ("version", 1, b"v2"), 2, 3, (False, (b"v1", 1), None))
    assert kinds(h) == ["not-linearizable"]


def test_a_ttl_key_may_vanish_once_its_ttl_can_have_passed_and_not_before():
    h = history(clock_spread_ns=10 * MS)
    op(h, "put", b"t", (b"v1", 100), 0, 1, (None, 0, 1))
    op(h, "get", b"t", (), 95, 96, MISSING)
    assert kinds(h) == []
    early = history(clock_spread_ns=10 * MS)
    op(early, "put", b"t", (b"v1", 100), 0, 1, (None, 0, 1))
    op(early, "get", b"t", (), 50, 51, MISSING)
    assert kinds(early) == ["not-linearizable"]


def test_a_read_after_the_ttl_passed_is_caught():
    h = history(clock_spread_ns=10 * MS)
    op(h, "put", b"t", (b"v1", 100), 0, 1, (None, 0, 1))
    op(h, "get", b"t", (), 105, 106, (b"v1", 1))
    assert kinds(h) == []
    late = history(clock_spread_ns=10 * MS)
    op(late, "put", b"t", (b"v1", 100), 0, 1, (None, 0, 1))
    op(late, "get", b"t", (), 112, 113, (b"v1", 1))
    assert kinds(late) == ["ttl-expired"]


def counter_history(final: int) -> TableHistory:
    h = history(final_read_at_ns=100 * MS)
    op(h, "incr", b"x", (2,), 0, 1, 2, pkey=C)
    op(h, "incr", b"x", (3,), 2, None, None, pkey=C)
    op(h, "incr", b"x", (5,), 2, None, None, pkey=C)
    op(h, "get", b"x", (), 100, 101, final, pkey=C, process="verifier")
    return h


def test_a_counter_total_must_be_acknowledged_plus_a_subset_of_unknown():
    assert kinds(counter_history(2 + 5)) == []
    assert kinds(counter_history(2 + 3 + 5)) == []
    # 2 + 4: within the bounds of the sums, but no subset of {3, 5} adds up to 4.
    assert "counter-total" in kinds(counter_history(2 + 4))


def watch(name: str, start_after: int, events, *, lkeys=(b"a", b"b"), resumes=None) -> WatchLog:
    log = WatchLog(name, P, lkeys, start_after, 0, resumes=resumes)
    log.events = [(revision, lkey, kind, value, 50 * MS) for revision, lkey, kind, value in events]
    return log


def writes() -> TableHistory:
    h = history()
    op(h, "put", b"a", (b"v1", 0), 0, 1, (None, 0, 1))
    op(h, "put", b"b", (b"v2", 0), 2, 3, (None, 0, 2))
    op(h, "delete", b"a", (), 4, 5, (1, 3))
    return h


def test_a_watch_that_sees_every_change_once_in_order_passes():
    h = writes()
    # w/2 resumes at revision 2, the last w/1 delivered from (bkcore.table.watch_resume), and
    # skips what w/1 delivered of it.
    h.watches = [watch("w/1", 0, [(1, b"a", "put", b"v1"), (2, b"b", "put", b"v2")]),
                 watch("w/2", 1, [(3, b"a", "delete", None)], resumes="w/1")]
    assert kinds(h) == []
    h.watches[1].events.insert(0, (2, b"b", "put", b"v2", 50 * MS))
    assert kinds(h) == ["watch-twice"], "a change the resumed watch delivered again"


def test_watch_rules_each_fail():
    cases = {
        "watch-gap": [watch("w/1", 0, [(1, b"a", "put", b"v1"), (3, b"a", "delete", None)])],
        "watch-twice": [watch("w/1", 0, [(1, b"a", "put", b"v1"), (1, b"a", "put", b"v1")])],
        "watch-order": [watch("w/1", 0, [(2, b"b", "put", b"v2"), (1, b"a", "put", b"v1")])],
        "watch-start": [watch("w/1", 1, [(1, b"a", "put", b"v1")])],
        "watch-invented": [watch("w/1", 3, [(4, b"b", "put", b"never-written")])],
        "two-changes": [watch("w/1", 1, [(2, b"b", "put", b"v1")], lkeys=(b"b",))],
    }
    for kind, watches in cases.items():
        h = writes()
        h.watches = watches
        assert kind in kinds(h), (kind, kinds(h))


def test_a_resumed_watch_must_start_where_the_last_one_stopped():
    h = writes()
    h.watches = [watch("w/1", 0, [(1, b"a", "put", b"v1")]),
                 watch("w/2", 2, [(3, b"a", "delete", None)], resumes="w/1")]
    assert set(kinds(h)) == {"watch-gap"}


def test_drop_removes_the_op_itself_and_refuses_one_it_does_not_hold():
    h = history()
    first = op(h, "get", b"a", (), 0, None, None)
    twin = op(h, "get", b"a", (), 0, None, None)            # equal to `first`, another op
    kept = op(h, "put", b"a", (b"v1", 0), 1, 2, (None, 0, 1))
    h.drop(first)
    assert len(h.ops) == 2 and h.ops[0] is twin and h.ops[1] is kept
    try:
        h.drop(first)
    except ValueError:
        pass
    else:
        raise AssertionError("dropping an op twice must fail")
