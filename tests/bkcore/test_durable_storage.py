"""DurableLedgerStorage (write cache, entry logs, index, checkpoints), on the simulator's file
system with a memory index and on real files with lmdb: the same logic, the same tests."""

import random

import pytest

from bkcore.bookie.durable_storage import DurableLedgerStorage, StorageConfig, memory_key
from bkcore.bookie.index import ENTRY_PREFIX, MemoryIndexStore, entry_id_of, entry_key, ledger_id_of, unpack_location
from bkcore.bookie.storage import StorageIOError
from bksim.filesystem import SimFileSystem
from bksim.options import DiskOptions
from bktransports.filesystem import OsFileSystem
from bktransports.lmdb_index import LmdbIndexStore


class Stack:
    """A file system and an index that outlive storage objects, like a disk across restarts."""

    def __init__(self, kind: str, tmp_path) -> None:
        self.kind = kind
        if kind == "sim":
            self.fs = SimFileSystem(rng=random.Random(1), options=DiskOptions.none())
            self.index = MemoryIndexStore()
        else:
            self.fs = OsFileSystem(str(tmp_path / "bookie"))
            (tmp_path / "index").mkdir()
            self.index = LmdbIndexStore(str(tmp_path / "index"))

    def storage(self, **config) -> DurableLedgerStorage:
        return DurableLedgerStorage(fs=self.fs, index=self.index, config=StorageConfig(**config))


@pytest.fixture(params=["sim", "real"])
def stack(request, tmp_path):
    yield Stack(request.param, tmp_path)


def fill(storage, ledger_id: int, count: int, first: int = 0) -> None:
    storage.set_master_key(ledger_id, b"key-%d" % ledger_id)
    for entry_id in range(first, first + count):
        storage.add_entry(ledger_id, entry_id, b"L%d-E%d" % (ledger_id, entry_id))


def test_entries_are_readable_before_and_after_a_checkpoint_and_a_restart(stack):
    storage = stack.storage()
    fill(storage, 1, 10)
    fill(storage, 2, 5)
    storage.set_fenced(2)
    storage.set_explicit_lac(1, 8, b"lac-body")
    assert storage.get_entry(1, 3) == b"L1-E3" and storage.last_entry_id(1) == 9
    report = storage.checkpoint()
    assert report.entries_flushed_count == 15
    assert storage.get_entry(2, 4) == b"L2-E4"
    restarted = stack.storage()
    assert restarted.get_entry(1, 9) == b"L1-E9"
    assert restarted.last_entry_id(1) == 9 and restarted.last_entry_id(2) == 4
    assert restarted.is_fenced(2) and not restarted.is_fenced(1)
    assert restarted.master_key(1) == b"key-1"
    assert restarted.explicit_lac(1) == (8, b"lac-body")
    assert restarted.ledger_ids() == [1, 2]
    assert restarted.get_entry(1, 10) is None and restarted.get_entry(3, 0) is None


def test_a_run_of_entries_is_added_like_single_adds(stack):
    storage = stack.storage()
    storage.set_master_key(1, b"k")
    storage.add_entries(1, 0, [b"a" * 10, b"b" * 20, b"c" * 30])
    storage.add_entries(1, 2, [b"C" * 5, b"d" * 40])         # the same id again replaces the body
    assert [storage.get_entry(1, e) for e in range(4)] == [b"a" * 10, b"b" * 20, b"C" * 5, b"d" * 40]
    assert storage.write_cache_size == 75 and storage.last_entry_id(1) == 3
    storage.add_entries(9, 0, [b"x"])                         # no such ledger: dropped, as add_entry does
    assert storage.get_entry(9, 0) is None and storage.dropped_entries_count == 1
    assert storage.checkpoint().entries_flushed_count == 4
    assert stack.storage().get_entries(1, 0, 10, 1 << 20) == [b"a" * 10, b"b" * 20, b"C" * 5, b"d" * 40]


def test_a_run_written_again_replaces_what_the_read_cache_holds(stack):
    storage = stack.storage(read_cache_count_max=4)
    fill(storage, 1, 6)
    storage.checkpoint()                                      # the tail (4, 5) stays in the read cache
    assert memory_key(1, 4) in storage._read_cache
    storage.add_entries(1, 4, [b"again-4", b"again-5"])       # a rewrite of cached entries
    storage.add_entries(1, 6, [b"new-%d" % e for e in range(6, 10)])
    storage.checkpoint()                                      # keeps 8 and 9; 4 and 5 come from the log
    assert [storage.get_entry(1, e) for e in (4, 5, 6, 3)] == [b"again-4", b"again-5", b"new-6", b"L1-E3"]
    assert stack.storage().get_entries(1, 4, 3, 1 << 20) == [b"again-4", b"again-5", b"new-6"]


def test_entry_logs_roll_at_their_size_limit(stack):
    storage = stack.storage(entry_log_size_max=200)
    fill(storage, 1, 30)
    storage.checkpoint()
    assert len(storage.entry_logger.log_ids()) > 3
    restarted = stack.storage(entry_log_size_max=200)
    assert [restarted.get_entry(1, e) for e in range(30)] == [b"L1-E%d" % e for e in range(30)]


def test_each_log_records_the_bytes_of_each_ledger_it_holds_across_rolls(stack):
    """The usage a checkpoint records per (log, ledger), which compaction's live fractions rest
    on, adds up to exactly the records each log holds, with ledgers interleaved and rolls
    falling inside a ledger's run; and every entry's index key and location find it."""
    storage = stack.storage(entry_log_size_max=200)      # about six records a log
    for ledger_id in (3, 1, 2):
        fill(storage, ledger_id, 9)
    storage.checkpoint()
    from bkcore.bookie.durable_storage import RECORD_OVERHEAD_SIZE
    expected: dict[int, dict[int, int]] = {}
    for ledger_id in (1, 2, 3):
        for entry_id in range(9):
            log_id, _ = unpack_location(stack.index.get(entry_key(ledger_id, entry_id)))
            size = RECORD_OVERHEAD_SIZE + len(b"L%d-E%d" % (ledger_id, entry_id))
            usage = expected.setdefault(log_id, {})
            usage[ledger_id] = usage.get(ledger_id, 0) + size
    assert len(expected) > 3 and any(len(usage) == 2 for usage in expected.values())   # rolls inside runs
    assert {log_id: storage.log_usage(log_id) for log_id in expected} == expected
    restarted = stack.storage(entry_log_size_max=200)
    assert [restarted.get_entry(2, e) for e in range(9)] == [b"L2-E%d" % e for e in range(9)]


def flip_bits_in_first_log(stack, storage, offset: int, mask: int) -> None:
    """Rewrite the first entry log with the byte at `offset` (negative: from the end) XORed."""
    path = f"ledgers/{storage.entry_logger.log_ids()[0]:x}.log"
    data = bytearray(stack.fs.read(path))
    data[offset] ^= mask
    stack.fs.delete(path)
    stack.fs.append(path, bytes(data))


def test_a_corrupt_record_is_an_io_error_not_a_missing_entry(stack):
    storage = stack.storage()
    fill(storage, 1, 3)
    storage.checkpoint()
    flip_bits_in_first_log(stack, storage, -2, 0xFF)         # inside the last record (entry 2)
    restarted = stack.storage()
    assert restarted.get_entry(1, 0) == b"L1-E0"
    with pytest.raises(StorageIOError, match="checksum"):
        restarted.get_entry(1, 2)


def test_deleted_ledgers_disappear_and_stay_gone(stack):
    storage = stack.storage()
    fill(storage, 1, 3)
    fill(storage, 2, 3)
    storage.checkpoint()
    storage.delete_ledger(1)
    assert not storage.has_ledger(1) and storage.get_entry(1, 0) is None
    storage.checkpoint()
    restarted = stack.storage()
    assert restarted.ledger_ids() == [2] and restarted.get_entry(1, 0) is None


def test_read_cache_is_bounded(stack):
    storage = stack.storage(read_cache_count_max=4)
    fill(storage, 1, 20)
    storage.checkpoint()
    for entry_id in range(20):
        storage.get_entry(1, entry_id)
    assert len(storage._read_cache) == 4


def test_read_cache_is_bounded_by_bytes_too(stack):
    storage = stack.storage(read_cache_count_max=100, read_cache_size_max=3000, read_ahead_count_max=0)
    storage.set_master_key(1, b"k")
    bodies = [bytes([entry_id]) * 1000 for entry_id in range(10)] + [b"big" * 2000]
    storage.add_entries(1, 0, bodies)
    storage.checkpoint()
    storage._read_cache.clear()
    assert [storage.get_entry(1, entry_id) for entry_id in range(11)] == bodies
    # Each read kept, the least recently used out past 3000 bytes; the 6000-byte one not kept.
    assert len(storage._read_cache) == 3 and storage._read_cache.size == 3000
    assert [memory_key(1, entry_id) in storage._read_cache for entry_id in (7, 8, 9, 10)] == [True, True, True, False]


def test_crash_before_a_checkpoint_loses_only_the_write_cache():
    fs = SimFileSystem(rng=random.Random(2), options=DiskOptions.none())
    index = MemoryIndexStore()
    storage = DurableLedgerStorage(fs=fs, index=index)
    fill(storage, 1, 5)
    storage.checkpoint()
    fill(storage, 1, 5, first=5)            # in the write cache only (the journal has them)
    fs.crash()
    restarted = DurableLedgerStorage(fs=fs, index=index)
    assert restarted.last_entry_id(1) == 4
    assert [restarted.get_entry(1, e) for e in range(5)] == [b"L1-E%d" % e for e in range(5)]


def test_crash_between_log_flush_and_index_commit_keeps_the_old_index():
    fs = SimFileSystem(rng=random.Random(3), options=DiskOptions.none())
    index = MemoryIndexStore()
    storage = DurableLedgerStorage(fs=fs, index=index)
    fill(storage, 1, 3)
    storage.checkpoint()

    class Boom(Exception):
        pass

    def fail(puts, deletes):
        raise Boom()

    fill(storage, 1, 3, first=3)
    original = index.write
    index.write = fail
    with pytest.raises(Boom):
        storage.checkpoint()
    index.write = original
    fs.crash()
    restarted = DurableLedgerStorage(fs=fs, index=index)
    assert restarted.last_entry_id(1) == 2
    # The journal replays the lost entries; a second copy in the logs does no harm.
    fill(restarted, 1, 3, first=3)
    restarted.checkpoint()
    assert [restarted.get_entry(1, e) for e in range(6)] == [b"L1-E%d" % e for e in range(6)]


def test_a_write_that_fails_half_way_never_misplaces_later_entries(fs, monkeypatch):
    """A full disk in the middle of a checkpoint's entry-log write: the checkpoint fails, the
    entries stay in memory, and the next checkpoint writes them to a fresh log whose offsets are
    right (the failed log's tail is never computed on)."""
    import bkcore.bookie.entrylog as entrylog
    from bkcore.bookie.fs import DiskFullError
    from bkcore.bookie.index import MemoryIndexStore

    monkeypatch.setattr(entrylog, "APPEND_WRITE_SIZE", 300)     # several writes per checkpoint
    storage = DurableLedgerStorage(fs=fs, index=MemoryIndexStore())
    storage.set_master_key(1, b"k")
    for entry_id in range(10):
        storage.add_entry(1, entry_id, bytes([entry_id]) * 100)
    real_append, calls = fs.append, []

    def failing_append(path, data):
        calls.append(path)
        if len(calls) == 2:
            raise DiskFullError(f"{path}: no space left on device")
        return real_append(path, data)

    monkeypatch.setattr(fs, "append", failing_append)
    with pytest.raises(DiskFullError):
        storage.checkpoint()
    monkeypatch.setattr(fs, "append", real_append)
    for entry_id in range(10, 15):
        storage.add_entry(1, entry_id, bytes([entry_id]) * 100)
    storage.checkpoint()
    storage._read_cache.clear()
    assert [storage.get_entry(1, e) for e in range(15)] == [bytes([e]) * 100 for e in range(15)]


class ReadCounter:
    """Wraps a file system and counts entry-log reads (what read-ahead saves)."""

    def __init__(self, fs) -> None:
        self._fs = fs
        self.log_read_count = 0

    def read(self, path, offset=0, size=-1):
        if path.endswith(".log"):
            self.log_read_count += 1
        return self._fs.read(path, offset, size)

    def __getattr__(self, name):
        return getattr(self._fs, name)


def test_a_sequential_reader_finds_the_next_entries_read_ahead(stack):
    storage = stack.storage(read_ahead_count_max=10)
    fill(storage, 1, 30)
    fill(storage, 2, 5)                   # after ledger 1 in the log: read-ahead stops there
    storage.checkpoint()
    restarted = stack.storage(read_ahead_count_max=10)
    restarted.entry_logger.fs = counter = ReadCounter(stack.fs)
    assert [restarted.get_entry(1, e) for e in range(30)] == [b"L1-E%d" % e for e in range(30)]
    # Misses at 0, 11 and 22 read their entry (header, then body) and the next ten at once.
    assert counter.log_read_count == 3 * 3
    assert restarted.read_ahead_entries_count == 10 + 10 + 7
    assert memory_key(2, 0) not in restarted._read_cache
    assert restarted.get_entry(2, 0) == b"L2-E0"


def test_a_striped_ledgers_reads_do_not_read_ahead_where_the_next_entry_is_on_another_bookie(stack):
    # E3 Qw2: this bookie holds entries 0, 2, 3, 5, 6, ... and readers ask it for 0, 3, 6, ...
    storage = stack.storage()
    storage.set_master_key(1, b"key-1")
    held = [e for e in range(12) if e % 3 != 1]
    for entry_id in held:
        storage.add_entry(1, entry_id, b"L1-E%d" % entry_id)
    storage.checkpoint()
    restarted = stack.storage()
    restarted.entry_logger.fs = counter = ReadCounter(stack.fs)
    assert [restarted.get_entry(1, e) for e in (0, 3, 6, 9)] == [b"L1-E%d" % e for e in (0, 3, 6, 9)]
    # Each read: its header, then its body. The record after each is not the next entry (1, 4,
    # 7, 10 are elsewhere), which the index says without reading the log.
    assert counter.log_read_count == 4 * 2 and restarted.read_ahead_entries_count == 0
    assert restarted.get_entry(1, 2) == b"L1-E2"          # here the next record is entry 3
    assert counter.log_read_count == 4 * 2 + 3 and restarted.read_ahead_entries_count == 1


def test_read_ahead_off_reads_every_entry_from_the_log(stack):
    storage = stack.storage(read_ahead_count_max=0)
    fill(storage, 1, 5)
    storage.checkpoint()
    restarted = stack.storage(read_ahead_count_max=0)
    restarted.entry_logger.fs = counter = ReadCounter(stack.fs)
    assert [restarted.get_entry(1, e) for e in range(5)] == [b"L1-E%d" % e for e in range(5)]
    assert counter.log_read_count == 5 * 2 and restarted.read_ahead_entries_count == 0


def test_read_ahead_stops_before_a_corrupt_record_which_stays_an_io_error(stack):
    storage = stack.storage()
    fill(storage, 1, 6)
    storage.checkpoint()
    _, offset = unpack_location(storage.index.get(entry_key(1, 3)))
    flip_bits_in_first_log(stack, storage, offset + 20, 0x01)   # inside entry 3's record
    restarted = stack.storage()
    assert restarted.get_entry(1, 0) == b"L1-E0"
    assert restarted.read_ahead_entries_count == 2          # entries 1 and 2, not 3 or beyond
    with pytest.raises(StorageIOError, match="checksum"):
        restarted.get_entry(1, 3)
    assert restarted.get_entry(1, 5) == b"L1-E5"


def restarted_over_unindexed_copies() -> DurableLedgerStorage:
    """Storage of ledger 1, entries 0-4, whose log also holds copies of 3 and 4 right after 2
    that the index never named (a checkpoint that crashed before its index commit)."""
    fs = SimFileSystem(rng=random.Random(4), options=DiskOptions.none())
    index = MemoryIndexStore()
    storage = DurableLedgerStorage(fs=fs, index=index)
    fill(storage, 1, 3)
    storage.checkpoint()
    storage.entry_logger.append_many([(1, 3, [b"never-indexed-3", b"never-indexed-4"])])
    storage.entry_logger.flush()
    fill(storage, 1, 2, first=3)         # the journal's replay writes them again, elsewhere
    storage.checkpoint()
    return DurableLedgerStorage(fs=fs, index=index)


def test_read_ahead_keeps_only_what_the_index_places_there():
    """Read-ahead must not serve records the index never named, even when they hold the next
    entry ids."""
    restarted = restarted_over_unindexed_copies()
    assert restarted.get_entry(1, 2) == b"L1-E2"
    assert memory_key(1, 3) not in restarted._read_cache
    assert [restarted.get_entry(1, e) for e in (3, 4)] == [b"L1-E3", b"L1-E4"]


def test_read_ahead_is_bounded_by_count_and_by_half_the_read_cache(stack):
    storage = stack.storage(read_ahead_count_max=50, read_cache_count_max=8)
    fill(storage, 1, 40)
    storage.checkpoint()
    restarted = stack.storage(read_ahead_count_max=50, read_cache_count_max=8)
    restarted.get_entry(1, 0)
    assert restarted.read_ahead_entries_count == 4 and len(restarted._read_cache) == 5
    small = stack.storage(read_ahead_count_max=50, read_ahead_size_max=3 * 30 + 10)   # records of 30 bytes
    small.get_entry(1, 10)
    assert small.read_ahead_entries_count == 3


# -- batch reads (get_entries) -----------------------------------------------------------------

def test_get_entries_reads_runs_from_memory_and_logs_in_order(stack):
    storage = stack.storage()
    fill(storage, 1, 20)
    fill(storage, 2, 3)
    storage.checkpoint()
    fill(storage, 1, 5, first=20)          # in the write cache, after 20 logged entries
    restarted = stack.storage()
    fill(restarted, 1, 5, first=20)        # (the journal's replay after the restart)
    restarted.entry_logger.fs = counter = ReadCounter(stack.fs)
    assert restarted.get_entries(1, 3, 100, 1 << 20) == [b"L1-E%d" % e for e in range(3, 25)]
    assert counter.log_read_count == 1, "the logged run is one read of the log"
    assert restarted.get_entries(1, 24, 10, 1 << 20) == [b"L1-E24"]
    assert restarted.get_entries(1, 25, 10, 1 << 20) == []
    assert restarted.get_entries(2, 0, 2, 1 << 20) == [b"L2-E0", b"L2-E1"]
    assert restarted.get_entries(3, 0, 2, 1 << 20) == []
    assert len(restarted._read_cache) == 0, "a scan does not fill the read cache"


def test_get_entries_keeps_within_size_max_but_always_returns_the_first(stack):
    storage = stack.storage()
    fill(storage, 1, 10)
    storage.checkpoint()
    restarted = stack.storage()
    assert restarted.get_entries(1, 0, 10, 1) == [b"L1-E0"]
    assert restarted.get_entries(1, 0, 10, 3 * 5) == [b"L1-E0", b"L1-E1", b"L1-E2"]    # bodies of 5 bytes
    assert restarted.get_entries(1, 0, 10, 3 * 5 - 1) == [b"L1-E0", b"L1-E1"]
    fill(restarted, 1, 2, first=10)                               # in the write cache, after the log
    assert restarted.get_entries(1, 8, 10, 11) == [b"L1-E8", b"L1-E9"]


def test_get_entries_stops_before_a_corrupt_record_which_is_an_io_error_when_first(stack):
    storage = stack.storage()
    fill(storage, 1, 6)
    storage.checkpoint()
    _, offset = unpack_location(storage.index.get(entry_key(1, 3)))
    flip_bits_in_first_log(stack, storage, offset + 20, 0x01)
    restarted = stack.storage()
    assert restarted.get_entries(1, 0, 6, 1 << 20) == [b"L1-E0", b"L1-E1", b"L1-E2"]
    with pytest.raises(StorageIOError, match="checksum"):
        restarted.get_entries(1, 3, 3, 1 << 20)
    assert restarted.get_entries(1, 4, 3, 1 << 20) == [b"L1-E4", b"L1-E5"]


def test_get_entries_takes_only_what_the_index_places_there():
    restarted = restarted_over_unindexed_copies()
    assert restarted.get_entries(1, 0, 10, 1 << 20) == [b"L1-E%d" % e for e in range(5)]


def test_get_entries_reads_a_run_across_entry_logs_and_checkpoints(stack):
    # Ledger 1's entries lie in three logs (they roll at 200 bytes) and, between checkpoints,
    # apart from each other (ledger 2's entries and the next checkpoint's come between).
    storage = stack.storage(entry_log_size_max=200)
    fill(storage, 1, 7)
    fill(storage, 2, 3)
    storage.checkpoint()
    fill(storage, 1, 6, first=7)
    fill(storage, 2, 3, first=3)
    storage.checkpoint()
    assert len(storage.entry_logger.log_ids()) > 3
    restarted = stack.storage(entry_log_size_max=200)
    assert restarted.get_entries(1, 0, 100, 1 << 20) == [b"L1-E%d" % e for e in range(13)]
    assert restarted.get_entries(1, 5, 4, 1 << 20) == [b"L1-E%d" % e for e in range(5, 9)]
    assert restarted.get_entries(2, 1, 100, 1 << 20) == [b"L2-E%d" % e for e in range(1, 6)]


def test_get_entries_takes_an_entry_written_again_from_memory_inside_a_logged_run(stack):
    storage = stack.storage()
    fill(storage, 1, 8)
    storage.checkpoint()
    restarted = stack.storage()
    restarted.add_entries(1, 4, [b"again-4"])            # (a recovery writing it again)
    restarted.add_entries(1, 8, [b"new-8", b"new-9"])    # not logged yet
    expected = [b"L1-E%d" % e for e in range(8)] + [b"new-8", b"new-9"]
    expected[4] = b"again-4"
    assert restarted.get_entries(1, 0, 100, 1 << 20) == expected
    plan = restarted.begin_checkpoint()                  # and while a checkpoint writes them out
    assert restarted.get_entries(1, 0, 100, 1 << 20) == expected
    restarted.write_checkpoint(plan)
    restarted.finish_checkpoint(plan)
    assert stack.storage().get_entries(1, 0, 100, 1 << 20) == expected


def test_get_entries_of_a_deleted_ledger_finds_nothing(stack):
    storage = stack.storage()
    fill(storage, 1, 4)
    storage.checkpoint()
    storage.delete_ledger(1)
    assert storage.get_entries(1, 0, 4, 1 << 20) == []


def test_a_checkpoint_finishes_in_steps_with_its_entries_readable_between_them(stack):
    # The driver serves other inputs between the steps (a bookie's loop is not held for the
    # whole read cache fill): every flushed entry stays readable, a ledger deleted between two
    # steps is not put back into the read cache, and only the last step ends the checkpoint.
    storage = stack.storage(read_cache_count_max=4096)
    fill(storage, 1, 1500)
    fill(storage, 2, 1500)
    plan = storage.begin_checkpoint()
    storage.write_checkpoint(plan)
    steps = storage.finish_checkpoint_steps(plan, step_count=256)
    next(steps)
    assert storage.get_entry(1, 0) == b"L1-E0" and storage.get_entry(2, 1499) == b"L2-E1499"
    storage.delete_ledger(2)
    pauses = 1 + sum(1 for _ in steps)
    assert pauses == 7                 # 2,048 of the newest entries in 8 steps of 256
    assert storage.get_entry(1, 1499) == b"L1-E1499" and storage.get_entry(2, 1499) is None
    assert storage.begin_checkpoint() is not None         # the next checkpoint may begin


@pytest.mark.parametrize("flush_size", [0, 1])
def test_a_checkpoint_syncs_its_entry_log_a_slice_at_a_time(flush_size):
    """flushEntrylogBytes: with a flush size, every write-out that brings the unsynced bytes to
    it syncs the log at once; without, the log is synced once, when the checkpoint flushes."""
    from bkcore.bookie.entrylog import APPEND_WRITE_SIZE
    fs = SimFileSystem(rng=random.Random(1), options=DiskOptions.none())
    storage = DurableLedgerStorage(fs=fs, index=MemoryIndexStore(), config=StorageConfig(entry_log_flush_size=flush_size))
    synced: list[str] = []
    sync = fs.sync
    fs.sync = lambda path: (synced.append(path), sync(path))[1]
    storage.set_master_key(1, b"key")
    body = bytes(64 * 1024)
    count = 3 * APPEND_WRITE_SIZE // len(body) + 2           # three write-outs and a remainder
    for entry_id in range(count):
        storage.add_entry(1, entry_id, body)
    storage.checkpoint()
    log_syncs = [path for path in synced if path.endswith(".log")]
    assert len(log_syncs) == (1 if flush_size == 0 else 4 + 1)     # (+ the checkpoint's own)
    assert storage.get_entry(1, count - 1) == body


def test_entries_in_memory_are_keyed_by_ints_that_sort_as_ledger_then_entry():
    """Memory keys (the read cache's, append_many's) order like (ledger, entry) and are invisible
    to the cyclic collector; the write cache holds a ledger's consecutive entries as one run, so
    the tens of thousands a bookie holds until a checkpoint never fill a young collection."""
    import gc
    pairs = [(2, 0), (1, 5), (1, 2**63 - 1), (0, 7), (2**62, 3), (1, 0)]
    assert [p for _, p in sorted((memory_key(*p), p) for p in pairs)] == sorted(pairs)
    storage = DurableLedgerStorage(fs=SimFileSystem(rng=random.Random(1), options=DiskOptions.none()),
                                   index=MemoryIndexStore())
    fill(storage, 1, 100)
    storage.add_entries(1, 100, [b"x"] * 50)
    assert len(storage._write_cache) == 150
    assert [(ledger_id, first, len(run)) for ledger_id, first, run in storage._write_cache.runs()] == [(1, 0, 150)]

def test_a_checkpoint_indexes_each_part_once_its_logs_are_synced_and_paces_its_writes(stack):
    """write_checkpoint in parts: every index transaction but the last holds the locations of
    one part, committed after a sync of the log they point into; pace() sees the fraction
    written grow to 1.0; everything reads back after a restart."""
    storage = stack.storage(checkpoint_part_size=40 * 1024, entry_log_flush_size=0)
    body = bytes(range(256)) * 4                             # 1 KiB
    storage.set_master_key(1, b"k1")
    storage.set_master_key(2, b"k2")
    for entry_id in range(100):
        storage.add_entry(1, entry_id, body)
    for entry_id in range(30):
        storage.add_entry(2, entry_id, body)
    events: list[tuple] = []
    sync, write = stack.fs.sync, stack.index.write
    stack.fs.sync = lambda path: (events.append(("sync", path)), sync(path))[1]

    def recording_write(puts, deletes):
        puts = list(puts.items() if isinstance(puts, dict) else puts)
        events.append(("index", sorted((ledger_id_of(key), entry_id_of(key)) for key, _ in puts
                                       if key.startswith(ENTRY_PREFIX))))
        write(puts, deletes)

    stack.index.write = recording_write
    fractions: list[float] = []
    plan = storage.begin_checkpoint()
    storage.write_checkpoint(plan, pace=fractions.append)
    storage.finish_checkpoint(plan)
    stack.index.write = write
    commits = [entries for kind, entries in events if kind == "index"]
    assert [len(entries) for entries in commits] == [40, 40, 40, 10, 0]   # 40 KiB parts, then the ledgers
    assert sum(commits, []) == [(1, e) for e in range(100)] + [(2, e) for e in range(30)]
    for position, event in enumerate(events):
        if event[0] == "index" and event[1]:
            assert events[position - 1][0] == "sync" and events[position - 1][1].endswith(".log")
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and len(fractions) >= 4
    restarted = stack.storage()
    assert [restarted.get_entry(2, e) for e in (0, 29)] == [body, body]
    assert restarted.last_entry_id(1) == 99


def test_a_crash_between_two_parts_keeps_the_first_and_replay_writes_the_rest():
    fs = SimFileSystem(rng=random.Random(4), options=DiskOptions.none())
    index = MemoryIndexStore()
    storage = DurableLedgerStorage(fs=fs, index=index, config=StorageConfig(checkpoint_part_size=64))
    fill(storage, 1, 30)                    # bodies of 5-6 bytes: about 11 a part

    class Boom(Exception):
        pass

    original = index.write
    commits = []

    def fail_second(puts, deletes):
        commits.append(1)
        if len(commits) == 2:
            raise Boom()
        original(puts, deletes)

    index.write = fail_second
    with pytest.raises(Boom):
        storage.checkpoint()
    index.write = original
    fs.crash()
    restarted = DurableLedgerStorage(fs=fs, index=index, config=StorageConfig(checkpoint_part_size=64))
    first_part = [entry_id for entry_id in range(30) if restarted.get_entry(1, entry_id) is not None]
    assert first_part == list(range(len(first_part))) and 5 < len(first_part) < 30
    assert [restarted.get_entry(1, e) for e in first_part] == [b"L1-E%d" % e for e in first_part]
    fill(restarted, 1, 30)                  # the journal replays the checkpoint's entries
    restarted.checkpoint()
    fs.crash()
    again = DurableLedgerStorage(fs=fs, index=index)
    assert [again.get_entry(1, e) for e in range(30)] == [b"L1-E%d" % e for e in range(30)]
