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
from bisect import bisect_right
from itertools import accumulate, chain, repeat
from operator import add, sub
from typing import Callable, NamedTuple

import crc32c

from bkcore.bookie.fs import FileSystem, FileSystemError
from bkcore.bookie.index import pack_location, unpack_location
from bkcore.bookie.storage import StorageIOError
from bkcore.runs import leading_equal_count, run_format

ENTRY_LOG_MAGIC = b"BKLO"
ENTRY_LOG_FORMAT_VERSION = 1
ENTRY_LOG_HEADER = struct.Struct(">4sIq")
RECORD_HEADER = struct.Struct(">II")
ENTRY_KEY = struct.Struct(">qq")
RECORD_OVERHEAD_SIZE = RECORD_HEADER.size + ENTRY_KEY.size     # a record's bytes besides its body
ENTRY_LOG_SUFFIX = ".log"

# Entries in a bookie's read cache are keyed by one int, memory_key(ledger, entry) =
# ledger << 64 | entry. It orders as (ledger, entry) does and, unlike a tuple, is invisible to
# the cyclic garbage collector.
ENTRY_ID_BITS = 64


def memory_key(ledger_id: int, entry_id: int) -> int:
    """The in-memory key of an entry (entry ids are never negative in memory)."""
    return ledger_id << ENTRY_ID_BITS | entry_id


class Location(NamedTuple):
    log_id: int
    offset: int


class Appended(NamedTuple):
    """What append_many() wrote, in the forms a checkpoint indexes: per run appended, (ledger
    id, first entry id, its records' locations packed as the index stores them,
    index.pack_location); per (log id, ledger id) the bytes its records took."""
    runs: list[tuple[int, int, list[bytes]]]
    sizes: dict[tuple[int, int], int]


def entry_log_name(log_id: int) -> str:
    return f"{log_id:x}{ENTRY_LOG_SUFFIX}"


# append_many() writes once it has collected this many bytes. Large enough that a syscall
# serves hundreds of records, small enough that the joined buffer stays in the CPU's cache and
# in malloc's heap: at 4 MiB each buffer came from a fresh mmap (page faults on the join, then
# a cache-cold copy into the page cache), about 1.5 us of kernel time per 1 KiB record more.
APPEND_WRITE_SIZE = 512 * 1024
# append_many() works on this many records at a time: each of its C loops then takes tens of
# microseconds, so a checkpoint thread holds the GIL about as long as the interpreter's switch
# interval lets any thread hold it.
APPEND_BATCH_COUNT = 1024


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
        self._pieces_size = 0       # bytes append_many has placed but not written yet
        self._on_written: Callable[[int], None] | None = None     # append_many's, while it runs
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
        return Location(*unpack_location(self.append_many([(ledger_id, entry_id, [body])]).runs[0][2][0]))

    def append_many(self, runs, *, on_written: Callable[[int], None] | None = None) -> Appended:
        """append() for runs of entries, (ledger id, first entry id, bodies) (a write cache's
        own runs, sorted by ledger), written in few large writes. What it returns is what the
        index needs, made in the same pass. on_written(size) is called after each write (and
        its sync, every flush_size bytes), with the bytes it wrote: a checkpoint paces itself
        there.

        The work per record is done by C loops (map, accumulate, join) over up to
        APPEND_BATCH_COUNT records of a run at a time, not by Python steps per record: a
        checkpoint appends tens of thousands of entries in a thread beside the bookie's event
        loop, and every Python step it takes is time the loop may wait for the GIL. A batch
        keeps each C call short (the GIL changes hands only between calls).

        current_size only ever counts bytes that were written: if a write fails (a full disk),
        the log's tail is uncertain, so the next append starts a new log rather than compute
        offsets in this one."""
        appended = Appended([], {})
        pieces: list[bytes] = []            # records not written yet: header, key, body, ...
        self._on_written = on_written
        try:
            for ledger_id, first_entry_id, bodies in runs:
                locations: list[bytes] = []
                for first in range(0, len(bodies), APPEND_BATCH_COUNT):
                    self._append_batch(ledger_id, first_entry_id + first, bodies[first:first + APPEND_BATCH_COUNT],
                                       pieces, locations, appended.sizes)
                appended.runs.append((ledger_id, first_entry_id, locations))
            self._write_pieces(pieces)
        except BaseException:
            self._needs_roll = True           # what was written of the pieces is uncertain
            self._pieces_size = 0
            raise
        finally:
            self._on_written = None
        return appended

    def _append_batch(self, ledger_id: int, first_entry_id: int, bodies: list[bytes], pieces: list[bytes],
                      locations: list[bytes], sizes: dict[tuple[int, int], int]) -> None:
        if self._needs_roll:
            self._roll()
        count = len(bodies)
        record_keys = list(map(ENTRY_KEY.pack, repeat(ledger_id, count), range(first_entry_id, first_entry_id + count)))
        lengths = list(map(add, map(len, bodies), repeat(ENTRY_KEY.size)))     # payload sizes
        # starts[i]: where record i starts, counted from the batch's first record; starts[-1]
        # is where the batch ends.
        starts = list(accumulate(map(add, lengths, repeat(RECORD_HEADER.size)), initial=0))
        # The checksum covers key then body, without joining them.
        headers = list(map(RECORD_HEADER.pack, lengths, map(crc32c.crc32c, bodies, map(crc32c.crc32c, record_keys))))
        first = 0
        while first < count:
            offset = self.current_size + self._pieces_size    # where record `first` goes
            shift = offset - starts[first]                     # record i goes at starts[i] + shift
            # The records that end by `stop` join the pieces of the next write. One that does not
            # fit even alone is written after what is pending; in an empty write it starts a
            # new log, unless the log is empty (a log holds at least one record, however
            # large), and is otherwise written alone.
            last = bisect_right(starts, self._stop() - shift, first + 1) - 1
            if last == first:
                if pieces:
                    self._write_pieces(pieces)
                    continue
                if offset > ENTRY_LOG_HEADER.size and starts[first + 1] + shift > self.entry_log_size_max:
                    self._roll()
                    continue
                last = first + 1
            log_id = self.current_id
            locations.extend(map(pack_location, repeat(log_id), map(add, starts[first:last], repeat(shift))))
            sizes[log_id, ledger_id] = sizes.get((log_id, ledger_id), 0) + starts[last] - starts[first]
            pieces.extend(chain.from_iterable(zip(headers[first:last], record_keys[first:last], bodies[first:last])))
            self._pieces_size += starts[last] - starts[first]
            first = last

    def _stop(self) -> int:
        """Where the pending write, which starts at current_size, must end at most:
        APPEND_WRITE_SIZE later, and not past the log's size limit."""
        return min(self.current_size + APPEND_WRITE_SIZE, self.entry_log_size_max)

    def _write_pieces(self, pieces: list[bytes]) -> None:
        if not pieces:
            return
        path = self._path(self.current_id)
        data = b"".join(pieces)
        pieces.clear()
        self._pieces_size = 0
        self.fs.append(path, data)
        self.current_size += len(data)
        self._unsynced_size += len(data)
        if self.flush_size and self._unsynced_size >= self.flush_size:
            self.fs.sync(path)
            self._unsynced_size = 0
        if self._on_written is not None:
            self._on_written(len(data))

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
        # The record's header and key, then its body on its own: the body read is the bytes
        # returned (no copy of a half-MiB stream entry out of a key+body read).
        try:
            head = self.fs.read(path, offset, RECORD_OVERHEAD_SIZE)
            if len(head) < RECORD_HEADER.size:
                raise StorageIOError(f"{_what(ledger_id, entry_id, path, offset)}: record header cut short")
            length, checksum = RECORD_HEADER.unpack_from(head)
            key = head[RECORD_HEADER.size:]
            body_size = length - ENTRY_KEY.size
            body = self.fs.read(path, offset + RECORD_OVERHEAD_SIZE, body_size) if body_size >= 0 else b""
        except StorageIOError:
            raise
        except Exception as exc:   # the FileSystem's own errors: missing file, I/O error
            raise StorageIOError(f"{_what(ledger_id, entry_id, path, offset)}: {exc}") from None
        if body_size < 0 or len(key) != ENTRY_KEY.size or len(body) != body_size \
                or crc32c.crc32c(body, crc32c.crc32c(key)) != checksum:
            raise StorageIOError(f"{_what(ledger_id, entry_id, path, offset)}: checksum mismatch")
        if ENTRY_KEY.unpack(key) != (ledger_id, entry_id):
            raise StorageIOError(f"{_what(ledger_id, entry_id, path, offset)}: holds entry {ENTRY_KEY.unpack(key)}")
        return body

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
        data = self._read_quietly(log_id, offset, size_max)
        return walk_records(data, offset, ledger_id=ledger_id, first_entry_id=first_entry_id, count_max=count_max)

    def read_run(self, log_id: int, offsets: list[int], *, ledger_id: int, first_entry_id: int,
                 size_max: int) -> list[bytes]:
        """A batch read's records: the bodies of ledger_id's entries first_entry_id,
        first_entry_id + 1, ... at `offsets` (where the index places them), with one read of
        size_max bytes from offsets[0]. Stops quietly, as read_following does, before the first
        record that does not start where the one before it ended, or that is not whole in what
        was read, fails its checksum or holds another entry: read() reports its problem."""
        if not offsets or size_max <= 0:
            return []
        data = self._read_quietly(log_id, offsets[0], size_max)
        return run_bodies(data, offsets, ledger_id=ledger_id, first_entry_id=first_entry_id)

    def _read_quietly(self, log_id: int, offset: int, size: int) -> bytes:
        """Up to size bytes of a log from offset; nothing if the log is gone or unreadable."""
        try:
            return self.fs.read(self._path(log_id), offset, size)
        except (OSError, FileSystemError):
            return b""


def walk_records(data: bytes, base_offset: int, *, ledger_id: int, first_entry_id: int,
                 count_max: int) -> list[tuple[int, int, bytes]]:
    """The records at the start of `data` (read from base_offset of a log) that hold ledger_id's
    entries first_entry_id, first_entry_id + 1, ... whole, with good checksums, one after
    another: (entry id, offset, body) of each, count_max at most."""
    view = memoryview(data)
    found = []
    position, entry_id, end_of_data = 0, first_entry_id, len(view)
    header_size, key_size, unpack_key = RECORD_HEADER.size, ENTRY_KEY.size, ENTRY_KEY.unpack_from
    while len(found) < count_max and position + header_size <= end_of_data:
        length, checksum = RECORD_HEADER.unpack_from(view, position)
        start, end = position + header_size, position + header_size + length
        if length < key_size or end > end_of_data:
            break
        # The key first: a record of another entry (the next one is elsewhere) ends the walk
        # without a checksum over its whole body.
        if unpack_key(view, start) != (ledger_id, entry_id) or crc32c.crc32c(view[start:end]) != checksum:
            break
        found.append((entry_id, base_offset + position, bytes(view[start + key_size:end])))
        entry_id += 1
        position = end
    return found


def run_bodies_plain(data: bytes, offsets: list[int], *, ledger_id: int, first_entry_id: int) -> list[bytes]:
    """What run_bodies returns, a record at a time: the reference it is tested against."""
    bodies = []
    for (_, offset, body), placed in zip(walk_records(data, offsets[0] if offsets else 0, ledger_id=ledger_id,
                                                      first_entry_id=first_entry_id, count_max=len(offsets)),
                                         offsets):
        if offset != placed:
            break
        bodies.append(body)
    return bodies


def run_bodies(data: bytes, offsets: list[int], *, ledger_id: int, first_entry_id: int) -> list[bytes]:
    """The bodies of ledger_id's entries first_entry_id, first_entry_id + 1, ... at `offsets` of
    a log, from `data` read at offsets[0] of it: the records walk_records would walk, up to the
    first one that is not where offsets place it (run_bodies_plain's answer).

    How: if the records lie one after another, as a checkpoint writes a ledger's entries, the
    offsets give every record's size but the last one's, so one struct format describes the
    whole run and one unpack splits it into headers, keys and bodies; lengths, keys and
    checksums are then checked a tuple at a time. From the first record where any of them
    differs (a record that fails, or one followed by a gap) the run is walked one record at a
    time. So a run costs a few C calls per record and no Python step, nor a tuple, slice or
    memoryview per record (tests/bkcore/test_entrylog.py compares it with the walk on damaged
    runs)."""
    if not offsets:
        return []
    starts = list(map(sub, offsets, repeat(offsets[0])))
    # The records that end where the next one starts, in data (for starts in order, as those of
    # a run that passes are; for others the checks below fail), then the last one, its size
    # from its header.
    count = max(0, bisect_right(starts, len(data)) - 1)
    sizes = list(map(sub, starts[1:count + 1], starts[:count]))
    if count == len(offsets) - 1 and 0 <= starts[-1] <= len(data) - RECORD_HEADER.size:
        last_size = RECORD_HEADER.size + RECORD_HEADER.unpack_from(data, starts[-1])[0]
        if starts[-1] + last_size <= len(data):
            sizes.append(last_size)
            count += 1
    bodies: list[bytes] = []
    try:
        # header | key | body of every record, each body of the size the offsets say (a size too
        # small for a record, or records past the end of data, raise struct.error)
        body_sizes = tuple(map(sub, sizes, repeat(RECORD_OVERHEAD_SIZE)))
        fields = struct.unpack_from(run_format("II16s%ds", body_sizes), data)
    except struct.error:
        count = 0
    else:
        lengths, checksums, keys, found = fields[0::4], fields[1::4], fields[2::4], fields[3::4]
        count = min(
            leading_equal_count(lengths, tuple(map(sub, sizes, repeat(RECORD_HEADER.size)))),
            leading_equal_count(keys, tuple(map(ENTRY_KEY.pack, repeat(ledger_id, count),
                                                range(first_entry_id, first_entry_id + count)))),
            leading_equal_count(tuple(map(crc32c.crc32c, found, map(crc32c.crc32c, keys))), checksums))
        bodies = list(found[:count])
    if count == len(offsets):
        return bodies
    # The first record that did not pass (most often one followed by a gap) and the rest.
    rest_start = starts[count]
    if not 0 <= rest_start <= len(data):
        return bodies
    return bodies + run_bodies_plain(memoryview(data)[rest_start:], offsets[count:], ledger_id=ledger_id,
                                     first_entry_id=first_entry_id + count)


def _what(ledger_id: int, entry_id: int, path: str, offset: int) -> str:
    """The entry a read error is about (built only when there is one)."""
    return f"ledger {ledger_id} entry {entry_id} at {path}:{offset}"
