"""Journal files: the bookie's write-ahead log on disk, its rolling, and the LastLogMark.

Layout (after BookKeeper):
  <journal dir>/<id hex>.txn   journal files; ids grow with time (the creation time in ms, or
                               the previous id + 1 if the clock went back), so names sort by age
  <ledger dir>/lastMark        LastLogMark = (journal id, position) + crc32c: everything journaled
                               before it is in ledger storage; written atomically to every ledger dir

Each journal file starts with a 16-byte header: magic b"BKJN", u32 format version, i64 id.
Records follow (see journal.py). Zero bytes where a record length should be mean the end of
written data (preallocated space), not corruption.

Preallocation (BookKeeper's journalPreAllocSizeMB): a journal file is grown ahead of its
records in chunks of journal_prealloc_size zeros, and records are written into that space at
their offsets, so the fdatasync after a group does not also have to persist a new file size
(the group commit's latency). The first chunk is made with the file (and synced with its
header); later chunks when a group would run past the preallocated end, made durable by that
group's sync. Preallocation stops at journal_max_size (unless one group runs past it), and
rolling counts written bytes, never preallocated ones. 0 turns it off: records are appended.

On start the bookie replays from the smallest LastLogMark across ledger dirs: every journal file
with an id >= the mark's, from the mark's position in the mark's own file. A torn tail at the
end of a file is reported and tolerated (it was a crash in the middle of a write); a bad record
followed by good data is corruption and stops the start with the file and offset. After replay
the bookie writes into a new journal file, so a torn tail is never appended to.

Dropping from the page cache (BookKeeper's journalRemoveFromPageCache, on by default): after each
sync, the OS is told it may forget the cached pages of the current file up to
PAGE_CACHE_DROP_LAG bytes behind its end (BookKeeper's cacheDropLagBytes, so that the page the
next group goes into stays), in whole PAGE_CACHE_DROP_ALIGN pieces. Journal data is read only
at replay, after a restart; its pages would otherwise push entry log pages, which readers do
read, out of memory, and the next writes would need fresh pages rather than those just freed.

Journals older than the LastLogMark are deleted, keeping the newest journal_max_backups of them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from bkcore.bookie.fs import FileSystem, write_atomically
from bkcore.bookie.journal import JournalCorrupted, JournalRecord, ScanResult, scan_records
from bkcore.wire import store_fields_directly

JOURNAL_MAGIC = b"BKJN"
JOURNAL_FORMAT_VERSION = 1
JOURNAL_HEADER = struct.Struct(">4sIq")
LAST_MARK_NAME = "lastMark"
LAST_MARK_FORMAT = struct.Struct(">qqI")   # journal id, position, crc32c of the first 16 bytes
JOURNAL_SUFFIX = ".txn"
# A read that fails a checksum is read again before anything is concluded from it: a disk can
# return a flipped bit once, and a checksum cannot tell a flipped last record from a torn one.
# A flip only ever makes a checksummed scan stop sooner, so the read that gets furthest wins.
REREAD_ATTEMPT_COUNT_MAX = 8
REREAD_TAIL_ATTEMPT_COUNT_MAX = 32
PAGE_CACHE_DROP_LAG = 8 * 1024 * 1024
# Ranges dropped start and end on this boundary: the page cache holds a file in naturally aligned
# folios of up to 2 MiB, and keeps one the range covers only in part.
PAGE_CACHE_DROP_ALIGN = 2 * 1024 * 1024


@store_fields_directly
@dataclass(frozen=True, slots=True, order=True)
class LogMark:
    journal_id: int
    position: int


ZERO_MARK = LogMark(0, 0)


@dataclass(frozen=True, slots=True)
class JournalConfig:
    journal_dir: str = "journal"
    ledger_dirs: tuple[str, ...] = ("ledgers",)
    journal_max_size: int = 2048 * 1024 * 1024       # journalMaxSizeMB
    journal_max_backups: int = 5                      # journalMaxBackups
    journal_prealloc_size: int = 16 * 1024 * 1024    # journalPreAllocSizeMB; 0: no preallocation
    journal_remove_from_page_cache: bool = True       # journalRemoveFromPageCache

    def __post_init__(self) -> None:
        if self.journal_prealloc_size < 0:
            raise ValueError(f"journal_prealloc_size must be >= 0, not {self.journal_prealloc_size}")


@dataclass(frozen=True, slots=True)
class JournalReplay:
    records: list[JournalRecord]
    start_mark: LogMark
    end_mark: LogMark
    files_scanned: list[str]
    tail_problems: list[str]


class JournalStartError(Exception):
    """The journal cannot be replayed; the message names the file, the offset and what to do."""


def journal_name(journal_id: int) -> str:
    return f"{journal_id:x}{JOURNAL_SUFFIX}"


def journal_id_of(name: str) -> int | None:
    if not name.endswith(JOURNAL_SUFFIX):
        return None
    try:
        return int(name[:-len(JOURNAL_SUFFIX)], 16)
    except ValueError:
        return None


class Journal:
    """Synchronous journal over a FileSystem. The driver calls append() then sync() for each
    group the Bookie emits (in a worker thread for real files) and checkpoints LastLogMarks."""

    def __init__(self, *, fs: FileSystem, config: JournalConfig) -> None:
        self.fs = fs
        self.config = config
        self.current_id: int | None = None
        self._current_path = ""     # _journal_path(current_id) once current_id is set
        self.current_size = 0       # bytes written to the current file (its header and records)
        # The current file's size on disk: >= current_size; larger by the preallocated zeros.
        self.allocated_size = 0
        self._dropped_size = 0      # the current file's bytes whose cached pages were let go
        self._unsynced_ids: list[int] = []

    # -- paths ----------------------------------------------------------------------------

    def _journal_path(self, journal_id: int) -> str:
        if journal_id == self.current_id:      # every append and sync: formatted once per file
            return self._current_path
        return f"{self.config.journal_dir}/{journal_name(journal_id)}"

    def journal_ids(self) -> list[int]:
        ids = [journal_id_of(name) for name in self.fs.list_dir(self.config.journal_dir)]
        return sorted(i for i in ids if i is not None)

    # -- LastLogMark ----------------------------------------------------------------------

    def read_last_marks(self) -> list[LogMark]:
        marks = []
        for ledger_dir in self.config.ledger_dirs:
            path = f"{ledger_dir}/{LAST_MARK_NAME}"
            if not self.fs.exists(path):
                marks.append(ZERO_MARK)
                continue
            marks.append(self._read_mark(path))
        return marks

    def _read_mark(self, path: str) -> LogMark:
        for _ in range(REREAD_ATTEMPT_COUNT_MAX):
            data = self.fs.read(path)
            if len(data) != LAST_MARK_FORMAT.size:
                raise JournalStartError(f"{path}: {len(data)} bytes, expected {LAST_MARK_FORMAT.size}; "
                                        f"the mark is written atomically, so this file was damaged — "
                                        f"delete it to replay every journal")
            journal_id, position, checksum = LAST_MARK_FORMAT.unpack(data)
            if crc32c.crc32c(data[:16]) == checksum:
                return LogMark(journal_id, position)
        raise JournalStartError(f"{path}: checksum mismatch in {REREAD_ATTEMPT_COUNT_MAX} reads; "
                                f"delete it to replay every journal")

    def write_last_mark(self, mark: LogMark) -> None:
        """Persist the mark in every ledger dir (temp, sync, rename, sync dir)."""
        head = struct.pack(">qq", mark.journal_id, mark.position)
        data = LAST_MARK_FORMAT.pack(mark.journal_id, mark.position, crc32c.crc32c(head))
        for ledger_dir in self.config.ledger_dirs:
            write_atomically(self.fs, f"{ledger_dir}/{LAST_MARK_NAME}", data)

    # -- start ----------------------------------------------------------------------------

    def open(self, *, now_ms: int) -> JournalReplay:
        """Make the directories, replay from the smallest LastLogMark, start a new journal."""
        self.fs.makedirs(self.config.journal_dir)
        for ledger_dir in self.config.ledger_dirs:
            self.fs.makedirs(ledger_dir)
        start = min(self.read_last_marks())
        records: list[JournalRecord] = []
        scanned: list[str] = []
        problems: list[str] = []
        end = start
        for journal_id in self.journal_ids():
            if journal_id < start.journal_id:
                continue
            path = self._journal_path(journal_id)
            scanned.append(path)
            scan = self._scan_file(path, journal_id, start)
            if scan is None:
                problems.append(f"{path}: header incomplete, treated as empty")
                continue
            records.extend(scan.records)
            if scan.tail_problem is not None:
                problems.append(f"{path}: {scan.tail_problem}")
            end = LogMark(journal_id, scan.valid_size)
        self._start_new_file(now_ms)
        return JournalReplay(records, start, end, scanned, problems)

    def scan_journal(self, journal_id: int):
        """The records of one journal file from its start (for tools such as readjournal);
        None if its header was never completely written."""
        return self._scan_file(self._journal_path(journal_id), journal_id, ZERO_MARK)

    def _scan_file(self, path: str, journal_id: int, start: LogMark):
        """Scan one journal file from its start (or the mark); None for a file whose header was
        never completely written. A scan that fails is retried: a bad record in the middle by
        reading the file again, a bad tail by reading again only from where the scan stopped
        (cheap even for a large file), keeping whatever checks out."""
        failure = None
        for _ in range(REREAD_ATTEMPT_COUNT_MAX):
            data = self.fs.read(path)
            if len(data) < JOURNAL_HEADER.size:
                return None
            magic, version, header_id = JOURNAL_HEADER.unpack_from(data)
            if magic != JOURNAL_MAGIC or version != JOURNAL_FORMAT_VERSION or header_id != journal_id:
                failure = (f"{path}: not a journal of this format (magic {magic!r}, version {version}, "
                           f"id {header_id}); move it out of {self.config.journal_dir}")
                continue
            offset = max(JOURNAL_HEADER.size, start.position) if journal_id == start.journal_id else JOURNAL_HEADER.size
            try:
                scan = scan_records(data, start_offset=offset)
            except JournalCorrupted as exc:
                failure = f"{path}: {exc}"
                continue
            return self._reread_tail(path, data, scan)
        raise JournalStartError(failure)

    def _reread_tail(self, path: str, data: bytes, scan: ScanResult) -> ScanResult:
        records = list(scan.records)
        for _ in range(REREAD_TAIL_ATTEMPT_COUNT_MAX):
            if scan.tail_problem is None:
                break
            good = data[:scan.valid_size]
            data = good + self.fs.read(path, scan.valid_size)
            try:
                scan = scan_records(data, start_offset=len(good))
            except JournalCorrupted:
                scan = ScanResult([], len(good), "unreadable tail")   # a flip in the re-read: again
                continue
            records.extend(scan.records)
        return ScanResult(records, scan.valid_size, scan.tail_problem)

    def _start_new_file(self, now_ms: int) -> None:
        existing = self.journal_ids()
        journal_id = max([now_ms] + [i + 1 for i in existing] + [(self.current_id or 0) + 1])
        path = self._journal_path(journal_id)
        self.fs.write_at(path, 0, JOURNAL_HEADER.pack(JOURNAL_MAGIC, JOURNAL_FORMAT_VERSION, journal_id))
        allocated_size = JOURNAL_HEADER.size
        if self.config.journal_prealloc_size:
            allocated_size = self._preallocate(path, JOURNAL_HEADER.size)     # the first chunk
        self.fs.sync(path)
        self.fs.sync_dir(self.config.journal_dir)
        self.current_id = journal_id
        self._current_path = path
        self.current_size = JOURNAL_HEADER.size
        self.allocated_size = allocated_size
        self._dropped_size = 0

    def _preallocate(self, path: str, end: int) -> int:
        """Grow the file in whole chunks to hold `end` bytes, stopping at journal_max_size;
        returns its new size."""
        chunk_size = self.config.journal_prealloc_size
        size = max(end, min(-(-end // chunk_size) * chunk_size, self.config.journal_max_size))
        self.fs.preallocate(path, size)
        return size

    # -- writing --------------------------------------------------------------------------

    def append(self, data: bytes, *, now_ms: int) -> LogMark:
        """Write one group after the last; returns the mark just after it. Rolls to a new file
        first when this group would take the current one past journal_max_size."""
        assert self.current_id is not None, "open() the journal first"
        if self.current_size > JOURNAL_HEADER.size and self.current_size + len(data) > self.config.journal_max_size:
            self.sync()   # the old file must be durable before anyone depends on the new one
            self._start_new_file(now_ms)
        path = self._current_path
        end = self.current_size + len(data)
        if end > self.allocated_size and self.config.journal_prealloc_size:
            self.allocated_size = self._preallocate(path, end)
        self.fs.write_at(path, self.current_size, data)
        self.current_size = end
        if end > self.allocated_size:         # (max(), spelled out: a builtin call per group)
            self.allocated_size = end
        return LogMark(self.current_id, end)

    def sync(self) -> None:
        path = self._current_path
        self.fs.sync(path)
        drop_end = (self.current_size - PAGE_CACHE_DROP_LAG) // PAGE_CACHE_DROP_ALIGN * PAGE_CACHE_DROP_ALIGN
        if drop_end > self._dropped_size and self.config.journal_remove_from_page_cache:
            self.fs.drop_cached(path, self._dropped_size, drop_end - self._dropped_size)
            self._dropped_size = drop_end

    # -- garbage collection ---------------------------------------------------------------

    def delete_old_journals(self, mark: LogMark) -> list[int]:
        """Delete journals wholly before `mark`, keeping the newest journal_max_backups of them."""
        older = [i for i in self.journal_ids() if i < mark.journal_id]
        doomed = older[:max(0, len(older) - self.config.journal_max_backups)]
        for journal_id in doomed:
            self.fs.delete(self._journal_path(journal_id))
        if doomed:
            self.fs.sync_dir(self.config.journal_dir)
        return doomed
