"""CompactionTest in spirit: dead logs are deleted, sparse logs compacted by the minor and major
thresholds, space is reclaimed, and a crash at any point of compaction loses nothing and leaves
no entry with two live copies."""

import random

from bkcore.bookie.compaction import CompactionConfig, Compactor
from bkcore.bookie.durable_storage import DurableLedgerStorage, StorageConfig
from bkcore.bookie.index import MemoryIndexStore, entry_key, unpack_location
from bksim.filesystem import SimFileSystem, SimulatedCrash
from bksim.options import DiskOptions

CONFIG = StorageConfig(entry_log_size_max=400)


def body(ledger_id: int, entry_id: int) -> bytes:
    return b"L%d-E%d-" % (ledger_id, entry_id) + b"x" * 20


def filled(fs, index, ledgers=(1, 2, 3, 4), count=12) -> DurableLedgerStorage:
    storage = DurableLedgerStorage(fs=fs, index=index, config=CONFIG)
    for ledger_id in ledgers:
        storage.set_master_key(ledger_id, b"k")
    for entry_id in range(count):           # interleaved, so logs mix ledgers
        for ledger_id in ledgers:
            storage.add_entry(ledger_id, entry_id, body(ledger_id, entry_id))
        if entry_id % 3 == 2:
            storage.checkpoint()
    storage.checkpoint()
    return storage


def new_disk(seed=1):
    return SimFileSystem(rng=random.Random(seed), options=DiskOptions(torn_write_probability=1.0)), MemoryIndexStore()


def assert_all_readable(storage, ledgers, count=12):
    for ledger_id in ledgers:
        for entry_id in range(count):
            assert storage.get_entry(ledger_id, entry_id) == body(ledger_id, entry_id), (ledger_id, entry_id)


def log_bytes(storage) -> int:
    return sum(storage.fs.size(f"ledgers/{i:x}.log") for i in storage.entry_logger.log_ids())


def test_deleted_ledgers_free_their_logs_and_live_entries_move():
    fs, index = new_disk()
    storage = filled(fs, index)
    before = log_bytes(storage)
    for ledger_id in (1, 2, 3):
        storage.delete_ledger(ledger_id)
    storage.checkpoint()
    report = Compactor(storage=storage).run(threshold=0.8)
    assert report.logs_compacted_count + report.logs_deleted_count > 0
    assert report.bytes_reclaimed > 0 and log_bytes(storage) < before
    assert_all_readable(storage, [4])
    assert_all_readable(DurableLedgerStorage(fs=fs, index=index, config=CONFIG), [4])


def test_minor_threshold_leaves_half_full_logs_for_major():
    fs, index = new_disk()
    storage = filled(fs, index, ledgers=(1, 2))
    storage.delete_ledger(1)                 # every log is now about half live
    storage.checkpoint()
    compactor = Compactor(storage=storage, config=CompactionConfig())
    minor = compactor.run(threshold=compactor.config.minor_compaction_threshold)
    assert minor.logs_compacted_count == 0
    major = compactor.run(threshold=compactor.config.major_compaction_threshold)
    assert major.logs_compacted_count > 0 and major.entries_moved_count > 0
    assert_all_readable(storage, [2])
    assert all(u.live_fraction > 0.8 or u.live_size == 0 for u in compactor.usages()[:-1])


def test_a_log_with_an_unreadable_live_entry_is_kept():
    fs, index = new_disk()
    storage = filled(fs, index, ledgers=(1, 2))
    storage.delete_ledger(1)
    storage.checkpoint()
    first_log, offset = unpack_location(index.get(entry_key(2, 0)))   # a live entry's record
    path = f"ledgers/{first_log:x}.log"
    data = bytearray(fs.read(path))
    data[offset + 30] ^= 0xFF
    fs.delete(path)
    fs.append(path, bytes(data))
    fs.sync(path)
    report = Compactor(storage=storage).run(threshold=0.9)
    assert first_log in report.logs_skipped_unreadable and fs.exists(path)


def test_crash_anywhere_in_compaction_loses_nothing():
    # Count the operations one compaction takes, then crash at each of them in turn.
    fs, index = new_disk()
    storage = filled(fs, index)
    for ledger_id in (1, 2):
        storage.delete_ledger(ledger_id)
    storage.checkpoint()
    start = fs.operation_count
    Compactor(storage=storage).run(threshold=0.9)
    operations = fs.operation_count - start
    assert operations > 10
    for crash_offset in range(operations):
        fs, index = new_disk(seed=crash_offset)
        storage = filled(fs, index)
        for ledger_id in (1, 2):
            storage.delete_ledger(ledger_id)
        storage.checkpoint()
        fs.crash_at_operation_index = fs.operation_count + crash_offset
        try:
            Compactor(storage=storage).run(threshold=0.9)
        except SimulatedCrash:
            pass
        fs.crash_at_operation_index = None
        fs.crash()
        restarted = DurableLedgerStorage(fs=fs, index=index, config=CONFIG)
        assert_all_readable(restarted, [3, 4])
        Compactor(storage=restarted).run(threshold=0.9)     # the next round cleans up
        assert_all_readable(restarted, [3, 4])
        again = DurableLedgerStorage(fs=fs, index=index, config=CONFIG)
        assert_all_readable(again, [3, 4])
