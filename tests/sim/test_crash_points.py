"""Crash the bookie at every file-system operation of a workload (every append, positional write,
preallocation, sync, directory sync, rename, delete): unsynced bytes are dropped, the interrupted
write may land torn, unsynced names revert. Each runs with journal preallocation off, in chunks,
and of whole files at once. After a restart every acknowledged entry must read back with the right bytes and
every acknowledged fence must hold. (BookKeeper's LedgerStorageCheckpointTest and
BookieJournalTest in spirit, exhaustively over crash points.)"""

import dataclasses
import random

import pytest
from hypothesis import given, settings, strategies as st

from bkcore.bookie.bookie import BookieConfig
from bkcore.bookie.durable_storage import StorageConfig
from bkcore.bookie.index import MemoryIndexStore
from bkcore.bookie.journal_files import JournalConfig, journal_name
from bkcore.bookie.stack import BookieStack
from bkcore.digest import Digester, DigestType
from bkcore.effects import JournalWrite, Send
from bkcore.errors import Code
from bkcore.wire import AddRequest, AddResponse, ReadRequest, ReadResponse
from bksim.filesystem import SimFileSystem, SimulatedCrash
from bksim.options import DiskOptions

KEY = b"k" * 32
JOURNAL_CONFIG = JournalConfig(journal_max_size=700, journal_max_backups=1, journal_prealloc_size=0)
# Preallocation: chunks of 256 bytes (three per file), or one chunk past journal_max_size (so
# each file is preallocated whole when it is made).
JOURNAL_CONFIGS = {"no-prealloc": JOURNAL_CONFIG,
                   "prealloc-chunks": dataclasses.replace(JOURNAL_CONFIG, journal_prealloc_size=256),
                   "prealloc-whole": dataclasses.replace(JOURNAL_CONFIG, journal_prealloc_size=4096)}
STORAGE_CONFIG = StorageConfig(entry_log_size_max=600, checkpoint_part_size=200)   # crashes between parts too


class BookieProcess:
    """A BookieStack over a SimFileSystem and an index that outlive it (its disk), driven
    synchronously: every group is written and synced at once."""

    def __init__(self, fs: SimFileSystem, index: MemoryIndexStore, now_ms: int,
                 journal_config: JournalConfig = JOURNAL_CONFIG) -> None:
        self.stack = BookieStack(bookie_id="b", fs=fs, index=index,
                                 bookie_config=BookieConfig(journal_flush_when_queue_empty=True),
                                 journal_config=journal_config, storage_config=STORAGE_CONFIG)
        self.stack.start(now_ms=now_ms, new_instance_id="i")
        self.storage = self.stack.storage
        self.now_ms = now_ms
        self.answers: list = []

    def send(self, message) -> None:
        core = self.stack.core
        core.receive(message, source="client", now_ns=self.now_ms * 1_000_000)
        while effects := core.take_effects():
            for effect in effects:
                if isinstance(effect, JournalWrite):
                    self.stack.write_journal(effect, now_ms=self.now_ms)
                    self.stack.sync_journal(effect.token)
                    core.on_persisted(effect.token, self.now_ms * 1_000_000)
                else:
                    assert isinstance(effect, Send)
                    self.answers.append(effect.message)

    def checkpoint(self) -> None:
        self.stack.checkpoint()


def body(ledger_id: int, entry_id: int) -> bytes:
    digester = Digester(ledger_id=ledger_id, digest_type=DigestType.CRC32C, password=b"pw")
    return digester.pack_entry(entry_id=entry_id, lac=entry_id - 1, length=entry_id + 1,
                               payload=b"L%d-E%d-" % (ledger_id, entry_id) + b"x" * (entry_id % 7))


def run_workload(process: BookieProcess, acked: dict, fenced: set, *, steps: int) -> None:
    """Adds to two ledgers, a fence, checkpoints now and then; records what was acknowledged."""
    next_entry = {1: 0, 2: 0}
    for step in range(steps):
        ledger_id = 1 + step % 2
        if ledger_id == 2 and step == steps // 2:
            process.send(ReadRequest(request_id=10_000 + step, ledger_id=2, entry_id=-1, master_key=KEY, is_fencing=True))
        else:
            entry_id = next_entry[ledger_id]
            next_entry[ledger_id] += 1
            process.send(AddRequest(request_id=step, ledger_id=ledger_id, entry_id=entry_id, master_key=KEY,
                                    body=body(ledger_id, entry_id), is_recovery=ledger_id == 2))
        for answer in process.answers:
            if isinstance(answer, AddResponse) and answer.code == Code.OK:
                acked[answer.ledger_id, answer.entry_id] = body(answer.ledger_id, answer.entry_id)
            elif isinstance(answer, ReadResponse) and answer.request_id >= 10_000:
                fenced.add(answer.ledger_id)
        process.answers.clear()
        if step % 5 == 4:
            process.checkpoint()


def verify(fs: SimFileSystem, index: MemoryIndexStore, acked: dict, fenced: set,
           journal_config: JournalConfig) -> None:
    restarted = BookieProcess(fs, index, now_ms=10_000, journal_config=journal_config)
    for (ledger_id, entry_id), expected in sorted(acked.items()):
        assert restarted.storage.get_entry(ledger_id, entry_id) == expected, (ledger_id, entry_id)
    for ledger_id in fenced:
        assert restarted.storage.is_fenced(ledger_id)
    # The restarted bookie keeps working and survives a clean restart too.
    run_workload(restarted, acked, fenced, steps=6)
    again = BookieProcess(fs, index, now_ms=20_000, journal_config=journal_config)
    for (ledger_id, entry_id), expected in sorted(acked.items()):
        assert again.storage.get_entry(ledger_id, entry_id) == expected, (ledger_id, entry_id)


def operation_count(steps: int, journal_config: JournalConfig = JOURNAL_CONFIG) -> int:
    fs = SimFileSystem(rng=random.Random(0), options=DiskOptions.none())
    run_workload(BookieProcess(fs, MemoryIndexStore(), now_ms=1, journal_config=journal_config), {}, set(),
                 steps=steps)
    return fs.operation_count


def crash_at(crash_index: int, *, steps: int, seed: int, journal_config: JournalConfig = JOURNAL_CONFIG) -> None:
    fs = SimFileSystem(rng=random.Random(seed), options=DiskOptions(torn_write_probability=1.0))
    index = MemoryIndexStore()
    acked: dict = {}
    fenced: set = set()
    fs.crash_at_operation_index = crash_index
    try:
        run_workload(BookieProcess(fs, index, now_ms=1, journal_config=journal_config), acked, fenced, steps=steps)
    except SimulatedCrash:
        pass
    fs.crash_at_operation_index = None
    fs.crash()
    verify(fs, index, acked, fenced, journal_config)


STEPS = 24


@pytest.mark.parametrize("journal_config", JOURNAL_CONFIGS.values(), ids=JOURNAL_CONFIGS.keys())
def test_crash_at_every_operation_boundary(journal_config):
    total = operation_count(STEPS, journal_config)
    assert total > 100, "the workload should exercise many file operations"
    for crash_index in range(total):
        crash_at(crash_index, steps=STEPS, seed=crash_index, journal_config=journal_config)


def test_preallocating_configs_preallocate():
    """The preallocating runs above do preallocate: files larger than their records."""
    for name, journal_config in JOURNAL_CONFIGS.items():
        fs = SimFileSystem(rng=random.Random(0), options=DiskOptions.none())
        process = BookieProcess(fs, MemoryIndexStore(), now_ms=1, journal_config=journal_config)
        run_workload(process, {}, set(), steps=STEPS)
        journal = process.stack.journal
        path = f"{journal.config.journal_dir}/{journal_name(journal.current_id)}"
        is_ahead = fs.size(path) > journal.current_size
        assert is_ahead == (journal_config.journal_prealloc_size > 0), name


@settings(max_examples=60, deadline=None)
@given(steps=st.integers(min_value=1, max_value=40), crash_fraction=st.floats(min_value=0, max_value=1),
       seed=st.integers(min_value=0, max_value=2**16))
def test_crash_anywhere_in_random_workloads(steps, crash_fraction, seed):
    for journal_config in JOURNAL_CONFIGS.values():
        crash_at(int(operation_count(steps, journal_config) * crash_fraction), steps=steps, seed=seed,
                 journal_config=journal_config)


def test_a_checkpoint_between_a_sync_and_the_core_hearing_of_it_does_not_cover_that_write():
    """A threaded driver syncs in its journal thread and tells the core later, from its loop; a
    checkpoint beginning in between must not move the LastLogMark past the write (storage does
    not hold it yet), or a crash after that checkpoint loses an acknowledged entry."""
    fs = SimFileSystem(rng=random.Random(0), options=DiskOptions.none())
    index = MemoryIndexStore()
    process = BookieProcess(fs, index, now_ms=1)
    stack, core = process.stack, process.stack.core
    core.receive(AddRequest(request_id=1, ledger_id=1, entry_id=0, master_key=KEY, body=body(1, 0)),
                 source="client", now_ns=1_000_000)
    (write,) = core.take_effects()
    assert isinstance(write, JournalWrite)
    stack.write_journal(write, now_ms=1)
    stack.sync_journal(write.token)                  # (the journal thread)
    mark = stack.checkpoint()                        # (the loop, before it hears of the sync)
    assert mark == stack.persisted_mark and stack.storage.get_entry(1, 0) is None
    core.on_persisted(write.token, 2_000_000)
    assert [effect.message.code for effect in core.take_effects()] == [Code.OK]
    next_mark = stack.persisted_mark
    fs.crash()
    restarted = BookieProcess(fs, index, now_ms=10_000)
    assert restarted.storage.get_entry(1, 0) == body(1, 0)
    assert next_mark.position > mark.position        # once applied, the next checkpoint covers it
