"""Journal preallocation (BookKeeper's journalPreAllocSizeMB): files grow ahead of their records
in chunks, rolling counts written bytes, and replay of a preallocated file tells its zero tail
(the clean end) from a torn last record (tolerated, reported) and from a bad record with real
data after it (refused, naming file and offset). On the simulator's file system and real files."""

import random

import pytest

from bkcli.bookie_config import ConfigError, bookie_config_from_mapping
from bkcore.bookie.journal import EntryRecord, encode_record
from bkcore.bookie.journal_files import JOURNAL_HEADER, Journal, JournalConfig, JournalStartError, journal_name
from bksim.filesystem import SimFileSystem
from bksim.options import DiskOptions

CHUNK_SIZE = 4096
CONFIG = JournalConfig(journal_max_size=64 * 1024, journal_prealloc_size=CHUNK_SIZE)


def entries(first: int, count: int, size: int = 10) -> list[EntryRecord]:
    return [EntryRecord(1, i, bytes([i % 256]) * size) for i in range(first, first + count)]


def group(records) -> bytes:
    return b"".join(encode_record(r) for r in records)


def write(journal: Journal, records, now_ms: int = 1) -> None:
    journal.append(group(records), now_ms=now_ms)
    journal.sync()


def reopen(fs, config=CONFIG, now_ms: int = 1000):
    journal = Journal(fs=fs, config=config)
    return journal, journal.open(now_ms=now_ms)


def current_path(journal: Journal) -> str:
    return f"journal/{journal_name(journal.current_id)}"


def test_a_new_journal_file_starts_with_one_preallocated_chunk(fs):
    journal, _ = reopen(fs)
    assert fs.size(current_path(journal)) == CHUNK_SIZE == journal.allocated_size
    assert journal.current_size == JOURNAL_HEADER.size
    assert fs.read(current_path(journal))[JOURNAL_HEADER.size:] == bytes(CHUNK_SIZE - JOURNAL_HEADER.size)


def test_records_go_inside_the_chunk_and_the_next_chunk_comes_when_a_group_needs_it(fs):
    journal, _ = reopen(fs)
    path = current_path(journal)
    records = entries(0, 20, size=100)              # ~130 bytes each
    write(journal, records)
    assert fs.size(path) == CHUNK_SIZE and journal.current_size < CHUNK_SIZE
    while journal.current_size <= CHUNK_SIZE:
        write(journal, records)
    assert fs.size(path) == 2 * CHUNK_SIZE == journal.allocated_size
    big = entries(0, 1, size=3 * CHUNK_SIZE)         # one group larger than a chunk: whole chunks
    write(journal, big)
    assert journal.allocated_size % CHUNK_SIZE == 0 and journal.allocated_size >= journal.current_size
    assert fs.size(path) == journal.allocated_size


def test_preallocation_stops_at_journal_max_size(fs):
    config = JournalConfig(journal_max_size=6000, journal_prealloc_size=CHUNK_SIZE)
    journal, _ = reopen(fs, config)
    write(journal, entries(0, 40, size=100))
    assert journal.current_size > CHUNK_SIZE and fs.size(current_path(journal)) == 6000


def test_rolling_counts_written_bytes_not_preallocated_ones(fs):
    # Every file is preallocated to its full 1000 bytes at once: rolling on the file's size
    # would give one group per file.
    config = JournalConfig(journal_max_size=1000, journal_prealloc_size=CHUNK_SIZE)
    journal, _ = reopen(fs, config)
    first_id = journal.current_id
    one_group = group(entries(0, 2))
    for index in range(6):
        write(journal, entries(index * 2, 2))
    assert journal.current_id == first_id
    assert journal.current_size == JOURNAL_HEADER.size + 6 * len(one_group)
    assert fs.size(current_path(journal)) == 1000
    for index in range(6, 40):
        write(journal, entries(index * 2, 2), now_ms=10 + index)
    groups_per_file = (1000 - JOURNAL_HEADER.size) // len(one_group)
    assert groups_per_file > 10 and len(journal.journal_ids()) == -(-40 // groups_per_file)
    _, replay = reopen(fs, config, now_ms=5000)
    assert replay.records == entries(0, 80) and replay.tail_problems == []


def test_without_preallocation_the_file_holds_only_what_was_written(fs):
    config = JournalConfig(journal_prealloc_size=0)
    journal, _ = reopen(fs, config)
    write(journal, entries(0, 5))
    assert fs.size(current_path(journal)) == journal.current_size == journal.allocated_size


def test_replay_stops_cleanly_at_the_zero_tail(fs):
    journal, _ = reopen(fs)
    write(journal, entries(0, 5))
    written_size = journal.current_size
    _, replay = reopen(fs)
    assert replay.records == entries(0, 5) and replay.tail_problems == []
    assert replay.end_mark.position == written_size < fs.size(current_path(journal))


@pytest.mark.parametrize("cut", [4, 6, 9, -1], ids=["length", "checksum-part", "payload-byte", "all-but-last-byte"])
def test_a_torn_record_before_the_zeros_is_a_reported_tail(fs, cut):
    journal, _ = reopen(fs)
    write(journal, entries(0, 3))
    torn = encode_record(EntryRecord(1, 3, b"z" * 50))[:cut]
    fs.write_at(current_path(journal), journal.current_size, torn)
    _, replay = reopen(fs)
    assert replay.records == entries(0, 3)
    assert len(replay.tail_problems) == 1 and "torn record" in replay.tail_problems[0]
    # A later start writes a new file and replays everything cleanly.
    journal, _ = reopen(fs, now_ms=2000)
    write(journal, entries(3, 2))
    _, replay = reopen(fs, now_ms=3000)
    assert replay.records == entries(0, 5)


def test_a_torn_write_that_left_only_zero_bytes_is_the_clean_end(fs):
    journal, _ = reopen(fs)
    write(journal, entries(0, 3))
    record = encode_record(EntryRecord(1, 3, b"z" * 50))
    assert record[:3] == bytes(3)                   # the high bytes of a small length
    fs.write_at(current_path(journal), journal.current_size, record[:3])
    _, replay = reopen(fs)
    assert replay.records == entries(0, 3) and replay.tail_problems == []


@pytest.mark.parametrize("damage", ["garbage", "zeros"])
def test_a_bad_record_followed_by_records_is_an_error_naming_file_and_offset(fs, damage):
    journal, _ = reopen(fs)
    write(journal, entries(0, 2))
    offset = journal.current_size
    write(journal, entries(2, 1))
    write(journal, entries(3, 2))
    path = current_path(journal)
    record = encode_record(entries(2, 1)[0])
    if damage == "garbage":        # the header stands, the payload is junk: its checksum fails
        fs.write_at(path, offset + JOURNAL_HEADER.size, b"\x5a" * (len(record) - JOURNAL_HEADER.size))
    else:                          # the whole record reads as zeros, real records after it
        fs.write_at(path, offset, bytes(len(record)))
    with pytest.raises(JournalStartError, match=rf"{journal_name(journal.current_id)}.*offset {offset}\b"):
        reopen(fs)


def test_a_crash_loses_the_unsynced_group_inside_the_preallocated_space():
    fs = SimFileSystem(rng=random.Random(4), options=DiskOptions.none())
    journal, _ = reopen(fs)
    write(journal, entries(0, 2))
    journal.append(group(entries(2, 2)), now_ms=1)      # never synced
    fs.crash()
    _, replay = reopen(fs)
    assert replay.records == entries(0, 2) and replay.tail_problems == []


def test_the_preallocation_size_is_a_bookie_option():
    base = {"metadataServiceUri": "memory://x", "dataDir": "/tmp/b"}
    _, config = bookie_config_from_mapping(base)
    assert config.journal.journal_prealloc_size == 16 * 1024 * 1024     # BookKeeper's default
    _, config = bookie_config_from_mapping({**base, "journalPreAllocSizeMB": 0})
    assert config.journal.journal_prealloc_size == 0
    with pytest.raises(ConfigError, match="journal_prealloc_size"):
        bookie_config_from_mapping({**base, "journalPreAllocSizeMB": -1})
