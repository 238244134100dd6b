"""Journal files, rolling and LastLogMark: BookKeeper's BookieJournalTest and
BookieJournalRollingTest scenarios, each on the simulator's file system and on real files."""

import random

import pytest

from bkcore.bookie.journal import EntryRecord, FenceRecord, encode_record
from bkcore.bookie.journal_files import (
    JOURNAL_HEADER, PAGE_CACHE_DROP_ALIGN, PAGE_CACHE_DROP_LAG, Journal, JournalConfig, JournalStartError, LogMark,
    journal_name,
)
from bksim.filesystem import SimFileSystem
from bksim.options import DiskOptions

MIB = 1024 * 1024


def entries(first: int, count: int, size: int = 10) -> list[EntryRecord]:
    return [EntryRecord(1, i, bytes([i % 256]) * size) for i in range(first, first + count)]


def group(records) -> bytes:
    return b"".join(encode_record(r) for r in records)


def write(journal: Journal, records, now_ms: int = 1) -> LogMark:
    mark = journal.append(group(records), now_ms=now_ms)
    journal.sync()
    return mark


def reopen(fs, config=JournalConfig(), now_ms: int = 1000):
    journal = Journal(fs=fs, config=config)
    return journal, journal.open(now_ms=now_ms)


def test_empty_journal_directory(fs):
    _, replay = reopen(fs)
    assert replay.records == [] and replay.tail_problems == []


def test_header_only_journal(fs):
    journal, _ = reopen(fs)
    _, replay = reopen(fs)
    assert replay.records == [] and replay.tail_problems == []
    assert len(journal.journal_ids()) == 2, "every start writes into a new journal file"


def test_records_survive_a_restart(fs):
    journal, _ = reopen(fs)
    write(journal, entries(0, 5))
    write(journal, [FenceRecord(1)])
    _, replay = reopen(fs)
    assert replay.records == entries(0, 5) + [FenceRecord(1)]


@pytest.mark.parametrize("tail", [b"\x07" * 40, b"\x00\x00\x01", encode_record(EntryRecord(1, 99, b"z" * 50))[:-7],
                                  encode_record(EntryRecord(1, 99, b"z" * 50))[:5]],
                         ids=["junk-ended", "truncated-length", "truncated-entry", "truncated-header"])
def test_torn_or_junk_tail_is_tolerated_and_reported(fs, tail):
    journal, _ = reopen(fs)
    write(journal, entries(0, 3))
    # Where the next record would have gone: before the file's preallocated zeros.
    fs.write_at(f"journal/{journal_name(journal.current_id)}", journal.current_size, tail)
    _, replay = reopen(fs)
    assert replay.records == entries(0, 3)
    assert len(replay.tail_problems) == 1
    # The torn file is not appended to again: a later start still replays cleanly.
    journal, _ = reopen(fs, now_ms=2000)
    write(journal, entries(3, 2))
    _, replay = reopen(fs, now_ms=3000)
    assert replay.records == entries(0, 5)


def test_corruption_in_the_middle_names_file_and_offset(fs, tmp_path):
    journal, _ = reopen(fs)
    write(journal, entries(0, 3))
    path = f"journal/{journal_name(journal.current_id)}"
    data = bytearray(fs.read(path))
    offset = JOURNAL_HEADER.size + len(encode_record(entries(0, 1)[0])) + 9
    data[offset] ^= 0xFF
    fs.delete(path)
    fs.append(path, bytes(data))
    with pytest.raises(JournalStartError, match=rf"{journal_name(journal.current_id)}.*offset {offset - 9}"):
        reopen(fs)


def test_rolling_at_the_size_limit(fs):
    config = JournalConfig(journal_max_size=250)
    journal, _ = reopen(fs, config)
    for index in range(10):
        write(journal, entries(index * 4, 4), now_ms=10 + index)
    assert len(journal.journal_ids()) > 2
    _, replay = reopen(fs, config, now_ms=5000)
    assert replay.records == entries(0, 40)


def test_replay_starts_at_the_smallest_last_mark(fs):
    config = JournalConfig(ledger_dirs=("ledgers0", "ledgers1"))
    journal, _ = reopen(fs, config)
    write(journal, entries(0, 3))
    mark = write(journal, entries(3, 3))
    write(journal, entries(6, 3))
    journal.write_last_mark(mark)
    _, replay = reopen(fs, config, now_ms=2000)
    assert replay.records == entries(6, 3) and replay.start_mark == mark
    # One ledger dir lags behind: replay from its older mark.
    Journal(fs=fs, config=JournalConfig(ledger_dirs=("ledgers1",))).write_last_mark(LogMark(0, 0))
    _, replay = reopen(fs, config, now_ms=3000)
    assert replay.records == entries(0, 9)


def test_old_journals_are_deleted_after_the_mark_keeping_backups(fs):
    config = JournalConfig(journal_max_size=300, journal_max_backups=2)
    journal, _ = reopen(fs, config)
    for index in range(8):
        write(journal, entries(index * 3, 3), now_ms=10 + index)
    ids = journal.journal_ids()
    mark = LogMark(ids[-1], 0)
    deleted = journal.delete_old_journals(mark)
    assert journal.journal_ids() == ids[len(deleted):]
    assert len([i for i in journal.journal_ids() if i < mark.journal_id]) == 2


def test_journal_ids_grow_even_if_the_clock_goes_back(fs):
    journal, _ = reopen(fs, now_ms=5000)
    first = journal.current_id
    journal, _ = reopen(fs, now_ms=10)
    assert journal.current_id > first


def test_damaged_last_mark_refuses_to_start(fs):
    reopen(fs)
    fs.append("ledgers/lastMark", b"short")
    with pytest.raises(JournalStartError, match="lastMark"):
        reopen(fs)


def test_crash_loses_unsynced_groups_and_unsynced_names():
    fs = SimFileSystem(rng=random.Random(2), options=DiskOptions.none())
    journal, _ = reopen(fs)
    write(journal, entries(0, 2))
    journal.append(group(entries(2, 2)), now_ms=1)    # never synced
    fs.append("ledgers/lastMark.tmp", b"x" * 16)       # name never synced
    fs.crash()
    assert not fs.exists("ledgers/lastMark.tmp")
    _, replay = reopen(fs)
    assert replay.records == entries(0, 2)


def test_last_mark_is_replaced_atomically():
    fs = SimFileSystem(rng=random.Random(3), options=DiskOptions.none())
    journal, _ = reopen(fs)
    journal.write_last_mark(LogMark(5, 100))
    # A crash in the middle of the next update leaves the old mark.
    fs.append("ledgers/lastMark.tmp", b"\x00" * 16)
    fs.sync("ledgers/lastMark.tmp")
    fs.crash()
    assert journal.read_last_marks() == [LogMark(5, 100)]


def test_last_mark_checksum_catches_damage(fs):
    journal, _ = reopen(fs)
    journal.write_last_mark(LogMark(1, 100))
    data = bytearray(fs.read("ledgers/lastMark"))
    data[3] ^= 0x40
    fs.delete("ledgers/lastMark")
    fs.append("ledgers/lastMark", bytes(data))
    with pytest.raises(JournalStartError, match="checksum"):
        reopen(fs)


class RecordingDrops:
    """A file system that passes everything on and notes each drop_cached asked of it."""

    def __init__(self, fs) -> None:
        self._fs = fs
        self.drops: list[tuple[str, int, int]] = []

    def drop_cached(self, path: str, offset: int, size: int) -> None:
        self.drops.append((path, offset, size))
        self._fs.drop_cached(path, offset, size)

    def __getattr__(self, name):
        return getattr(self._fs, name)


@pytest.mark.parametrize("remove_from_page_cache", [True, False])
def test_syncs_let_the_journal_pages_go_up_to_8_mib_behind_its_end(fs, remove_from_page_cache):
    """BookKeeper's JournalChannel.forceWrite: with journalRemoveFromPageCache (its default),
    after each sync the pages from the last drop to cacheDropLagBytes (8 MiB) before the synced
    end are dropped (POSIX_FADV_DONTNEED), each byte once; a new file starts from its start.
    Here the ranges also start and end on 2 MiB boundaries (whole page cache folios)."""
    recording = RecordingDrops(fs)
    config = JournalConfig(journal_max_size=24 * MIB, journal_remove_from_page_cache=remove_from_page_cache)
    journal, _ = reopen(recording, config)
    records = [EntryRecord(1, i, bytes([i]) * (MIB - 64)) for i in range(40)]
    ends: list[tuple[int, int]] = []              # (journal id, its end) after each sync
    for record in records:
        write(journal, [record])
        ends.append((journal.current_id, journal.current_size))
    if not remove_from_page_cache:
        assert recording.drops == []
    else:
        first_file = journal_name(ends[0][0])
        assert len({journal_id for journal_id, _ in ends}) == 2     # it rolled once
        expected, dropped = [], {}
        for journal_id, end in ends:
            start = dropped.get(journal_id, 0)
            drop_end = (end - PAGE_CACHE_DROP_LAG) // PAGE_CACHE_DROP_ALIGN * PAGE_CACHE_DROP_ALIGN
            if drop_end > start:
                expected.append((f"journal/{journal_name(journal_id)}", start, drop_end - start))
                dropped[journal_id] = drop_end
        assert recording.drops == expected
        assert recording.drops[0] == (f"journal/{first_file}", 0, PAGE_CACHE_DROP_ALIGN)
        assert all(offset % PAGE_CACHE_DROP_ALIGN == size % PAGE_CACHE_DROP_ALIGN == 0
                   for _, offset, size in recording.drops)
    _, replay = reopen(fs, config, now_ms=5000)
    assert replay.records == records               # a hint: nothing written is lost
