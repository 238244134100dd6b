"""WriteCache against a plain dict model: runs in any order, overlapping, with gaps."""

from hypothesis import given, settings
from hypothesis import strategies as st

from bkcore.bookie.write_cache import WriteCache

adds = st.lists(st.tuples(st.integers(1, 3), st.integers(0, 40), st.integers(1, 6), st.integers(0, 9)), max_size=40)


def body(ledger_id: int, entry_id: int, version: int) -> bytes:
    return b"%d-%d-%d" % (ledger_id, entry_id, version) * (1 + entry_id % 3)


def apply(cache: WriteCache, model: dict, ledger_id: int, first: int, count: int, version: int) -> None:
    bodies = [body(ledger_id, entry_id, version) for entry_id in range(first, first + count)]
    if count == 1 and version % 2:
        cache.add_one(ledger_id, first, bodies[0])          # the single-add path
    else:
        cache.add(ledger_id, first, bodies)
    for entry_id, entry_body in enumerate(bodies, first):
        model[ledger_id, entry_id] = entry_body


def check(cache: WriteCache, model: dict) -> None:
    assert cache.count == len(cache) == len(model)
    assert cache.size == sum(map(len, model.values()))
    flattened = [((ledger_id, entry_id), entry_body) for ledger_id, first, run in cache.runs()
                 for entry_id, entry_body in enumerate(run, first)]
    assert flattened == sorted(model.items())
    runs = list(cache.runs())
    for (ledger_a, first_a, run_a), (ledger_b, first_b, _) in zip(runs, runs[1:]):
        # Runs of a ledger neither overlap nor touch: touching ones are merged.
        assert ledger_a < ledger_b or first_a + len(run_a) < first_b
    for ledger_id in (1, 2, 3):
        for entry_id in range(-1, 50):
            assert cache.get(ledger_id, entry_id) == model.get((ledger_id, entry_id))
        held = [entry_id for (ledger, entry_id) in model if ledger == ledger_id]
        assert cache.last_entry_id(ledger_id) == (max(held) if held else None)
        for first in range(-1, 50, 3):
            for end in (first, first + 1, first + 4, first + 30):
                assert cache.holds_any(ledger_id, first, end) == any(first <= e < end for e in held)


@settings(max_examples=300, deadline=None)
@given(adds)
def test_the_cache_holds_what_a_dict_would(operations):
    cache, model = WriteCache(), {}
    for ledger_id, first, count, version in operations:
        apply(cache, model, ledger_id, first, count, version)
        check(cache, model)
    cache.drop_ledger(2)
    for key in [key for key in model if key[0] == 2]:
        del model[key]
    check(cache, model)


@settings(max_examples=200, deadline=None)
@given(adds, adds)
def test_add_missing_keeps_newer_entries_and_skips_ledgers(older_operations, newer_operations):
    older, newer, older_model, newer_model = WriteCache(), WriteCache(), {}, {}
    for operation in older_operations:
        apply(older, older_model, *operation)
    for operation in newer_operations:
        apply(newer, newer_model, *operation)
    newer.add_missing(older, skip_ledgers={3})
    expected = {key: entry_body for key, entry_body in older_model.items() if key[0] != 3}
    expected.update(newer_model)
    check(newer, expected)


def test_consecutive_adds_are_one_run_and_the_newest_are_shared_among_ledgers():
    cache = WriteCache()
    for entry_id in range(10):
        cache.add(1, entry_id, [b"a%d" % entry_id])
    cache.add(2, 0, [b"b0", b"b1", b"b2"])
    assert [(ledger_id, first, len(run)) for ledger_id, first, run in cache.runs()] == [(1, 0, 10), (2, 0, 3)]
    assert cache.newest(4) == [(1, 8, b"a8"), (1, 9, b"a9"), (2, 1, b"b1"), (2, 2, b"b2")]
    assert cache.newest(0) == [] and WriteCache().newest(4) == []


def test_release_gradually_empties_the_cache():
    cache = WriteCache()
    cache.add(1, 0, [b"x"] * 5000)
    cache.add(2, 7, [b"y"] * 3)
    cache.release_gradually(step_count=1000)
    assert len(cache) == 0 and cache.size == 0 and list(cache.runs()) == [] and cache.get(1, 0) is None


@settings(max_examples=300, deadline=None)
@given(adds, st.integers(0, 40))
def test_runs_in_parts_cut_the_runs_into_parts_of_at_least_the_size_asked(operations, part_size):
    """A checkpoint's parts (DurableLedgerStorage.write_checkpoint): together they are runs()
    exactly; each but the last holds at least part_size bytes of bodies, and would hold less
    without its last body (a run crossing the line is cut right there)."""
    cache, model = WriteCache(), {}
    for operation in operations:
        apply(cache, model, *operation)
    parts = list(cache.runs_in_parts(part_size))
    entries = [((ledger_id, entry_id), entry_body) for part in parts for ledger_id, first, run in part
               for entry_id, entry_body in enumerate(run, first)]
    assert entries == sorted(model.items())
    assert all(run for part in parts for _, _, run in part)
    sizes = [sum(len(entry_body) for _, _, run in part for entry_body in run) for part in parts]
    if part_size == 0:
        assert len(parts) == (1 if model else 0)
        return
    for part, size in zip(parts[:-1], sizes):
        assert size - len(part[-1][2][-1]) < part_size <= size
    assert not parts or 0 < sizes[-1] and sizes[-1] - len(parts[-1][-1][2][-1]) < part_size
