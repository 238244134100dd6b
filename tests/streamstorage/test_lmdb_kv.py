"""The table range index in lmdb against the in-memory one: same answers for the same writes,
snapshots that do not see later writes, batches of writes that land together, rebuilds, dropped
tables, a full map."""

import random

import pytest

from bkcore.table.kv import MemoryKvIndex, RangeState
from bkcore.table.commands import Increment, Put, RangeRead, Stamped
from streamstorage.lmdb_kv import LONG_KEY_PREFIX_SIZE, IndexFull, LmdbRangeIndexes


@pytest.fixture
def indexes(tmp_path):
    indexes = LmdbRangeIndexes(str(tmp_path / "tables"))
    yield indexes
    indexes.close()


@pytest.mark.parametrize("prefix_size", [0, LONG_KEY_PREFIX_SIZE - 1, LONG_KEY_PREFIX_SIZE, 4000])
def test_random_writes_and_scans_agree_with_the_memory_index(indexes, prefix_size):
    """Keys after a common prefix of `prefix_size` bytes: short ones, ones about lmdb's key
    limit (some stored whole, some as prefix and hash) and ones far past it (sharing their
    stored prefix, so only the whole key orders them)."""
    rng = random.Random(7)
    lmdb_index, memory_index = indexes.index_for("ns/t", 0), MemoryKvIndex()
    prefix = b"p" * prefix_size
    keys = [prefix[:rng.choice([prefix_size, prefix_size - 1, prefix_size // 2])] +
            bytes([rng.randrange(4), rng.randrange(256)])[:rng.randrange(1, 3)] for _ in range(60)]
    for _ in range(300):
        changes = {rng.choice(keys): rng.choice([None, b"", b"v%d" % rng.randrange(100)]) for _ in range(3)}
        lmdb_index.write(changes)
        memory_index.write(changes)
        start, end = sorted([rng.choice(keys), rng.choice(keys)])
        assert list(lmdb_index.scan(start, end)) == list(memory_index.scan(start, end))
        with lmdb_index.snapshot() as snapshot:
            assert list(snapshot.scan(start, end)) == list(memory_index.scan(start, end))
        key = rng.choice(keys)
        assert lmdb_index.get(key) == memory_index.get(key)
    assert list(lmdb_index.items()) == memory_index.items()
    with lmdb_index.snapshot() as snapshot:
        assert list(snapshot.items()) == memory_index.items()
    rebuilt = indexes.index_for("ns/t", 1)
    rebuilt.replace_all(memory_index.items())
    assert list(rebuilt.items()) == memory_index.items()


def test_items_is_a_snapshot_taken_when_asked(indexes):
    index = indexes.index_for("ns/t", 0)
    index.write({b"a": b"1", b"b": b"2"})
    snapshot = index.items()
    index.write({b"a": None, b"c": b"3"})
    assert list(snapshot) == [(b"a", b"1"), (b"b", b"2")]
    assert list(index.items()) == [(b"b", b"2"), (b"c", b"3")]


def test_a_batch_lands_whole_at_its_end_and_its_reads_see_its_writes(indexes):
    index = indexes.index_for("ns/t", 0)
    index.write({b"a": b"1"})
    with index.batch():
        index.write({b"a": b"2", b"b": b"1"})
        index.write({b"c": b"1"})
        assert index.get(b"a") == b"2" and list(index.scan(b"a", b"z")) == [(b"a", b"2"), (b"b", b"1"), (b"c", b"1")]
        with index.snapshot() as before:              # another thread's view: not yet
            assert list(before.scan(b"a", b"z")) == [(b"a", b"1")]
    with index.snapshot() as after:
        assert list(after.scan(b"a", b"z")) == [(b"a", b"2"), (b"b", b"1"), (b"c", b"1")]
    with pytest.raises(ZeroDivisionError):
        with index.batch():
            index.write({b"a": None, b"d": b"1"})
            1 / 0
    assert list(index.scan(b"a", b"z")) == [(b"a", b"2"), (b"b", b"1"), (b"c", b"1")]     # none of it


def test_ranges_are_separate_and_a_new_owner_starts_empty(indexes):
    first, second = indexes.index_for("ns/t", 0), indexes.index_for("ns/t", 1)
    first.write({b"k": b"range 0"})
    second.write({b"k": b"range 1"})
    assert first.get(b"k") == b"range 0" and second.get(b"k") == b"range 1"
    assert indexes.index_for("ns/t", 0).get(b"k") is None       # reopened: rebuilt from the journal


def test_state_applied_to_lmdb_matches_state_applied_in_memory(indexes):
    on_disk, in_memory = RangeState(indexes.index_for("ns/t", 0)), RangeState(MemoryKvIndex())
    commands = [Put(b"dk%d" % (i % 7), b"v%d" % i, False, 0) for i in range(40)]
    commands += [Increment(b"dcount", i) for i in range(10)]
    for now_ms, command in enumerate(commands):
        for state in (on_disk, in_memory):
            state.apply(Stamped(command, now_ms), position=[1, now_ms, 0])
    assert on_disk.revision == in_memory.revision
    assert list(on_disk.index.items()) == in_memory.index.items()
    read = RangeRead(b"d", b"e", 0, False, False)
    assert on_disk.read(read, now_ms=100) == in_memory.read(read, now_ms=100)


def test_a_dropped_table_leaves_other_tables_alone(indexes):
    indexes.index_for("ns/t", 0).write({b"k": b"v"})
    indexes.index_for("ns/t", 1).write({b"k": b"v"})
    other = indexes.index_for("ns/t2", 0)
    other.write({b"k": b"kept"})
    indexes.drop_table("ns/t")
    with indexes.env.begin() as txn:
        names = sorted(bytes(key) for key, _ in txn.cursor())
    assert names == [b"ns/t2~0"]
    assert other.get(b"k") == b"kept"


def test_a_full_map_is_a_clear_error(tmp_path):
    small = LmdbRangeIndexes(str(tmp_path / "small"), map_size=64 * 1024)
    index = small.index_for("ns/t", 0)
    with pytest.raises(IndexFull, match="is full"):
        for i in range(1000):
            index.write({b"k%d" % i: bytes(1024)})
    small.close()


def test_a_snapshot_reads_one_moment_from_another_thread_and_is_read_only(indexes):
    import threading
    index = indexes.index_for("ns/t", 0)
    index.write({b"a": b"1", b"b": b"2"})
    with index.snapshot() as view:
        index.write({b"a": None, b"c": b"3"})
        seen = []
        reader = threading.Thread(target=lambda: seen.append((view.get(b"a"), list(view.scan(b"a", b"z")))))
        reader.start()
        reader.join()
        assert seen == [(b"1", [(b"a", b"1"), (b"b", b"2")])]
        with pytest.raises(TypeError):
            view.write({b"a": b"x"})
    assert MemoryKvIndex().snapshot() is None
