"""Entry logs: where entries live once a checkpoint moves them out of the write cache.

  <ledger dir>/<id hex>.log    header: magic b"BKLO", u32 format version, i64 id (16 bytes)
  record                       u32 length | u32 crc32c(payload) | payload
  payload                      i64 ledger id | i64 entry id | packed entry body

A location is (log id, offset of the record). Logs roll at entry_log_size_max. Reads verify the
checksum and that the record is the entry asked for; anything else raises StorageIOError,
which a bookie answers with IO_ERROR, never "no such entry".
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import crc32c

from bkcore.bookie.fs import FileSystem, FileSystemError
from bkcore.bookie.index import pack_location, unpack_location
from bkcore.bookie.storage import StorageIOError

ENTRY_LOG_MAGIC = b"BKLO"
ENTRY_LOG_FORMAT_VERSION = 1
ENTRY_LOG_HEADER = struct.Struct(">4sIq")
RECORD_HEADER = struct.Struct(">II")
ENTRY_KEY = struct.Struct(">qq")
ENTRY_LOG_SUFFIX = ".log"


class Location(NamedTuple):
    log_id: int
    offset: int


class Appended(NamedTuple):
    """What append_many() wrote, in the forms a checkpoint indexes: per record its key as the
    log holds it (i64 ledger, i64 entry: for the non-negative ids stored, the bytes of the
    index's u64 pair) and its location packed as the index stores it (index.pack_location);
    per (log id, ledger id) the bytes its records took."""
    keys: list[bytes]
    locations: list[bytes]
    sizes: dict[tuple[int, int], int]


def entry_log_name(log_id: int) -> str:
    return f"{log_id:x}{ENTRY_LOG_SUFFIX}"


# append_many() writes once it has collected this many bytes. Large enough that a syscall
# serves hundreds of records, small enough that the joined buffer stays in the CPU's cache and
# in malloc's heap: at 4 MiB each buffer came from a fresh mmap (page faults on the join, then
# a cache-cold copy into the page cache), about 1.5 us of kernel time per 1 KiB record more.
APPEND_WRITE_SIZE = 512 * 1024


class EntryLogger:
    def __init__(self, *, fs: FileSystem, ledger_dir: str, entry_log_size_max: int, flush_size: int = 0) -> None:
        self.fs = fs
        self.ledger_dir = ledger_dir
        self.entry_log_size_max = entry_log_size_max
        # Sync the log being written every flush_size bytes (0: only in flush()), so that a
        # checkpoint's writes reach the disk a slice at a time: one fdatasync of all of them at
        # the end would make every journal fdatasync meanwhile wait behind the whole checkpoint.
        self.flush_size = flush_size
        self._unsynced_size = 0
        self.current_id: int | None = None
        self.current_size = 0
        self._needs_roll = False    # set when a write failed: the current log's tail is uncertain
        self._unflushed_ids: list[int] = []
        # The highest log id on disk or ever tried: listed by open(), then kept up to date by
        # _roll() (only this logger creates logs in its directory), so a roll needs no listing.
        self._highest_id = 0
        # (log id, path) of the log _path() was last asked about: formatting a path costs more
        # than a read. One tuple, replaced whole: a real bookie's checkpoint thread writes logs
        # while its event loop reads them, and two attributes could be seen half-updated.
        self._path_cache: tuple[int | None, str] = (None, "")

    def _path(self, log_id: int) -> str:
        cached_log_id, cached_path = self._path_cache
        if log_id == cached_log_id:          # reads and writes mostly stay in one log
            return cached_path
        path = f"{self.ledger_dir}/{entry_log_name(log_id)}"
        self._path_cache = (log_id, path)
        return path

    def log_ids(self) -> list[int]:
        ids = []
        for name in self.fs.list_dir(self.ledger_dir):
            if name.endswith(ENTRY_LOG_SUFFIX):
                try:
                    ids.append(int(name[:-len(ENTRY_LOG_SUFFIX)], 16))
                except ValueError:
                    continue
        return sorted(ids)

    def open(self) -> None:
        """Start writing into a new log after every existing one (a log written before a crash
        may end torn; it is never appended to)."""
        self.fs.makedirs(self.ledger_dir)
        self._highest_id = max(self.log_ids(), default=0)
        self._roll()

    def _roll(self) -> None:
        """Start the next log. Ids already on disk are skipped: a log whose header write failed
        half-way is never appended to."""
        log_id = max(self.current_id or 0, self._highest_id) + 1
        self._highest_id = log_id
        self._needs_roll = True
        self.fs.append(self._path(log_id), ENTRY_LOG_HEADER.pack(ENTRY_LOG_MAGIC, ENTRY_LOG_FORMAT_VERSION, log_id))
        self._unflushed_ids.append(log_id)
        self.current_id = log_id
        self.current_size = ENTRY_LOG_HEADER.size
        self._unsynced_size = 0           # the old log's rest is synced by flush()
        self._needs_roll = False

    def append(self, ledger_id: int, entry_id: int, body: bytes) -> Location:
        return Location(*unpack_location(self.append_many([((ledger_id, entry_id), body)]).locations[0]))

    def append_many(self, items) -> Appended:
        """append() for many ((ledger id, entry id), body) items (a write cache's own items),
        written in few large writes; what it returns is what the index needs, made in the same
        pass (a Location, or even a tuple, per record would cost more than the write).

        current_size only ever counts bytes that were written: if a write fails (a full disk),
        the log's tail is uncertain, so the next append starts a new log rather than compute
        offsets in this one."""
        if self._needs_roll:
            self._roll()
        keys: list[bytes] = []
        locations: list[bytes] = []
        sizes: dict[tuple[int, int], int] = {}
        chunks: list[bytes] = []
        # The loop runs once per entry: names bound once, and one comparison (`end > stop`)
        # stands for both "write the buffer out" and "roll the log"; the rest is _make_room's.
        add_key, add_location, add_chunks = keys.append, locations.append, chunks.extend
        pack_key, pack_header, checksum = ENTRY_KEY.pack, RECORD_HEADER.pack, crc32c.crc32c
        header_size, key_size = RECORD_HEADER.size, ENTRY_KEY.size
        log_id, offset = self.current_id, self.current_size
        stop = self._stop(offset)
        # Bytes per (log, ledger), summed over runs of one ledger: items come sorted by ledger.
        run_ledger_id, run_offset = None, offset
        for (ledger_id, entry_id), body in items:
            # header | key | body without copying the body: the checksum runs over key then body.
            key = pack_key(ledger_id, entry_id)
            length = key_size + len(body)
            end = offset + header_size + length
            if end > stop or ledger_id != run_ledger_id:
                _add_size(sizes, log_id, run_ledger_id, offset - run_offset)
                if end > stop:
                    offset = self._make_room(chunks, offset, header_size + length)
                    log_id, stop = self.current_id, self._stop(offset)
                    end = offset + header_size + length
                run_ledger_id, run_offset = ledger_id, offset
            add_key(key)
            add_location(pack_location(log_id, offset))
            add_chunks((pack_header(length, checksum(body, checksum(key))), key, body))
            offset = end
        _add_size(sizes, log_id, run_ledger_id, offset - run_offset)
        self._write_out(chunks, offset)
        return Appended(keys, locations, sizes)

    def _stop(self, offset: int) -> int:
        """Where the record being added must end, at most, before append_many writes out what
        it collected (APPEND_WRITE_SIZE after the last write) or rolls the log."""
        return min(offset + APPEND_WRITE_SIZE, self.entry_log_size_max)

    def _make_room(self, chunks: list[bytes], offset: int, record_size: int) -> int:
        """Write out the records collected (emptying `chunks`), and roll the log if a record of
        record_size at `offset` would pass entry_log_size_max (a log holds at least one record,
        however large). Returns the offset at which the record goes."""
        self._write_out(chunks, offset)
        chunks.clear()
        if offset > ENTRY_LOG_HEADER.size and offset + record_size > self.entry_log_size_max:
            self._roll()
            return self.current_size
        return offset

    def _write_out(self, chunks: list[bytes], end_offset: int) -> None:
        if not chunks:
            return
        path = self._path(self.current_id)
        try:
            self.fs.append(path, data := b"".join(chunks))
        except BaseException:
            self._needs_roll = True
            raise
        self.current_size = end_offset
        self._unsynced_size += len(data)
        if self.flush_size and self._unsynced_size >= self.flush_size:
            self.fs.sync(path)
            self._unsynced_size = 0

    def is_finished(self, log_id: int) -> bool:
        """Flushed and no longer written to: only such logs may be compacted or deleted."""
        return log_id not in self._unflushed_ids and log_id != self.current_id

    def flush(self) -> None:
        """Make every log written since the last flush durable, names included."""
        for log_id in self._unflushed_ids:
            self.fs.sync(self._path(log_id))
        if self._unflushed_ids:
            self.fs.sync_dir(self.ledger_dir)
        self._unflushed_ids = [self.current_id]

    def scan(self, log_id: int):
        """Every record of a log in order, for tools: yields (offset, ledger, entry, body size);
        stops at the first record that is cut short or fails its checksum, yielding
        (offset, None, None, problem) for it."""
        path = self._path(log_id)
        data = self.fs.read(path)
        if len(data) < ENTRY_LOG_HEADER.size or data[:4] != ENTRY_LOG_MAGIC:
            yield 0, None, None, f"{path}: not an entry log (bad header)"
            return
        offset = ENTRY_LOG_HEADER.size
        while offset + RECORD_HEADER.size <= len(data):
            length, checksum = RECORD_HEADER.unpack_from(data, offset)
            payload = data[offset + RECORD_HEADER.size:offset + RECORD_HEADER.size + length]
            if len(payload) != length or length < ENTRY_KEY.size or crc32c.crc32c(payload) != checksum:
                yield offset, None, None, f"bad or torn record at offset {offset}"
                return
            ledger_id, entry_id = ENTRY_KEY.unpack_from(payload)
            yield offset, ledger_id, entry_id, length - ENTRY_KEY.size
            offset += RECORD_HEADER.size + length

    def read(self, location: Location | tuple[int, int], *, ledger_id: int, entry_id: int) -> bytes:
        """The body of the entry at `location` (a Location or a plain (log id, offset) pair)."""
        log_id, offset = location
        path = self._path(log_id)
        try:
            header = self.fs.read(path, offset, RECORD_HEADER.size)
            if len(header) != RECORD_HEADER.size:
                raise StorageIOError(f"{_what(ledger_id, entry_id, path, offset)}: record header cut short")
            length, checksum = RECORD_HEADER.unpack(header)
            payload = self.fs.read(path, offset + RECORD_HEADER.size, length)
        except StorageIOError:
            raise
        except Exception as exc:   # the FileSystem's own errors: missing file, I/O error
            raise StorageIOError(f"{_what(ledger_id, entry_id, path, offset)}: {exc}") from None
        if len(payload) != length or crc32c.crc32c(payload) != checksum:
            raise StorageIOError(f"{_what(ledger_id, entry_id, path, offset)}: checksum mismatch")
        if ENTRY_KEY.unpack_from(payload) != (ledger_id, entry_id):
            raise StorageIOError(f"{_what(ledger_id, entry_id, path, offset)}: holds entry "
                                 f"{ENTRY_KEY.unpack_from(payload)}")
        return payload[ENTRY_KEY.size:]

    def read_following(self, log_id: int, offset: int, *, ledger_id: int, first_entry_id: int,
                       count_max: int, size_max: int) -> list[tuple[int, int, bytes]]:
        """Read-ahead: the records from `offset` on, as long as they hold ledger_id's next
        entries in order (first_entry_id, first_entry_id + 1, ...), at most count_max of them
        within size_max bytes, as (entry id, offset, body) in one read of the log.

        It is a guess, so it stops quietly at anything else: another ledger, a gap, a checksum
        that fails, a record cut off by size_max, the end of the log, a log that is gone. An
        entry it stopped at is read (and its problem reported) by read() when someone asks."""
        if count_max <= 0 or size_max <= 0:
            return []
        try:
            data = memoryview(self.fs.read(self._path(log_id), offset, size_max))
        except (OSError, FileSystemError):
            return []
        found = []
        position, entry_id, end_of_data = 0, first_entry_id, len(data)
        header_size, key_size, unpack_key = RECORD_HEADER.size, ENTRY_KEY.size, ENTRY_KEY.unpack_from
        while len(found) < count_max and position + header_size <= end_of_data:
            length, checksum = RECORD_HEADER.unpack_from(data, position)
            start, end = position + header_size, position + header_size + length
            if length < key_size or end > end_of_data:
                break
            if crc32c.crc32c(data[start:end]) != checksum or unpack_key(data, start) != (ledger_id, entry_id):
                break
            found.append((entry_id, offset + position, bytes(data[start + key_size:end])))
            entry_id += 1
            position = end
        return found


def _add_size(sizes: dict[tuple[int, int], int], log_id: int, ledger_id: int | None, size: int) -> None:
    """Count a run of one ledger's records (size bytes) in the log's usage."""
    if size:
        sizes[log_id, ledger_id] = sizes.get((log_id, ledger_id), 0) + size


def _what(ledger_id: int, entry_id: int, path: str, offset: int) -> str:
    """The entry a read error is about (built only when there is one)."""
    return f"ledger {ledger_id} entry {entry_id} at {path}:{offset}"
