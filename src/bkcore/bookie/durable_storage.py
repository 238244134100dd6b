"""DurableLedgerStorage: entry logs + an index, with a write cache in front, and checkpoints.

Entries arrive (already durable in the journal) into the write cache and are readable at once.
A checkpoint moves them out: append them to the current entry log sorted by ledger and entry,
flush the logs (fdatasync, directory fsync), then commit their locations and the dirty ledger
state to the index in one batch. Only after that may the caller advance the LastLogMark
(Journal.write_last_mark): a crash anywhere before leaves the journal to replay what was lost,
and replaying an entry twice only writes it again.

Reads: write cache, then a bounded read cache, then index + entry log (checksummed; corruption
raises StorageIOError, never "no such entry"). A read that goes to the entry log reads ahead:
the ledger's next entries usually follow it in the same log (checkpoints write them sorted), so
one read brings up to read_ahead_count_max of them into the read cache, each kept only if the
index places it exactly where it was found (dbStorage_readAheadCacheBatchSize in BookKeeper).
"""

from __future__ import annotations

import contextlib
from bisect import bisect_right
from dataclasses import dataclass
from itertools import accumulate, chain, repeat
from typing import Callable, ContextManager, Iterator

import msgpack

from bkcore.bookie.entrylog import ENTRY_ID_BITS, RECORD_OVERHEAD_SIZE, EntryLogger, memory_key
from bkcore.bookie.fs import FileSystem
from bkcore.bookie.index import (
    IndexStore, LEDGER_PREFIX, entry_id_of, entry_key, entry_prefix, ledger_id_of, ledger_key,
    log_meta_key, pack_location, unpack_location, unpack_locations,
)
from bkcore.bookie.read_cache import ReadCache
from bkcore.bookie.storage import StorageIOError
from bkcore.bookie.write_cache import WriteCache
from bkcore.runs import leading_equal_count
from bkcore.wire import INVALID_ENTRY_ID

# A driver's timer for the phases of a checkpoint: timed("index_commit") wraps that phase.
PhaseTimer = Callable[[str], ContextManager[None]]


def untimed(phase: str) -> ContextManager[None]:
    return contextlib.nullcontext()


# A driver's pace for a checkpoint's entry-log writes: pace(fraction) is called after each write
# with the fraction of the checkpoint's records written so far (the last call with 1.0); a
# driver may wait there, to spread the writes over time (CheckpointPacer).
Pacer = Callable[[float], None]


def unpaced(fraction_written: float) -> None:
    pass


ENTRY_READ_ATTEMPT_COUNT_MAX = 3
_NOTHING = WriteCache()           # stands for "no checkpoint is flushing"; never added to


def _run_read_size(offsets: list[int], size_max: int) -> int:
    """Bytes to read for the records at offsets (of one log) holding at most size_max bytes of
    bodies: up to the last one's start and twice the average step from one to the next for the
    last itself (the records of a run are alike, most often; a last one that does not fit is
    read by the next run), never more than they can take at size_max."""
    bound = max(size_max, 1) + len(offsets) * RECORD_OVERHEAD_SIZE
    if len(offsets) < 2:
        return bound
    span = offsets[-1] - offsets[0]
    return min(bound, span + 2 * span // (len(offsets) - 1) + RECORD_OVERHEAD_SIZE)


@dataclass(frozen=True, slots=True)
class StorageConfig:
    ledger_dir: str = "ledgers"
    entry_log_size_max: int = 1024 * 1024 * 1024       # logSizeLimit
    entry_log_flush_size: int = 1024 * 1024            # flushEntrylogBytes: sync every this much
    read_cache_count_max: int = 4096                   # entries kept after a read
    read_cache_size_max: int = 64 * 1024 * 1024        # ... and their bytes at most
    read_ahead_count_max: int = 100                    # entries read ahead on a miss (0: off)
    read_ahead_size_max: int = 1024 * 1024             # bytes read ahead on a miss
    # A checkpoint writes its entries in parts of about this many bytes of bodies, each part's
    # locations committed to the index once its logs are synced (write_checkpoint).
    checkpoint_part_size: int = 4 * 1024 * 1024


@dataclass(slots=True)
class _LedgerState:
    master_key: bytes
    is_fenced: bool = False
    lac: int = INVALID_ENTRY_ID
    lac_body: bytes = b""

    def pack(self) -> bytes:
        # A Packer sized for the state (packb would allocate its default 1 MiB buffer); same bytes.
        return msgpack.Packer(use_bin_type=True, buf_size=len(self.master_key) + len(self.lac_body) + 64).pack(
            [self.master_key, self.is_fenced, self.lac, self.lac_body])

    @classmethod
    def unpack(cls, data: bytes) -> _LedgerState:
        key, fenced, lac, lac_body = msgpack.unpackb(data, raw=False)
        return cls(key, fenced, lac, lac_body)


@dataclass(frozen=True, slots=True)
class CheckpointPlan:
    """What one checkpoint writes, taken from memory at its start."""
    cache: WriteCache                                # the write cache taken
    ledger_puts: dict[bytes, bytes]                  # packed state of changed ledgers
    deleted_ledger_ids: list[int]
    dirty_ledger_ids: list[int]


@dataclass(frozen=True, slots=True)
class CheckpointReport:
    entries_flushed_count: int
    ledgers_written_count: int


class DurableLedgerStorage:
    def __init__(self, *, fs: FileSystem, index: IndexStore, config: StorageConfig = StorageConfig()) -> None:
        self.fs = fs
        self.index = index
        self.config = config
        self.entry_logger = EntryLogger(fs=fs, ledger_dir=config.ledger_dir,
                                        entry_log_size_max=config.entry_log_size_max,
                                        flush_size=config.entry_log_flush_size)
        self.entry_logger.open()
        # Entries not yet in an entry log. Its size is bounded by the checkpoint interval times
        # the add rate; the bookie checkpoints when it grows too big.
        self._write_cache = WriteCache()
        self._read_cache = ReadCache(count_max=config.read_cache_count_max, size_max=config.read_cache_size_max)
        self._ledgers: dict[int, _LedgerState] = {}      # loaded or changed ledger state
        self._dirty_ledgers: set[int] = set()
        self._deleted_ledgers: set[int] = set()
        # Highest entry id added per ledger (kept until the ledger is deleted), so the last
        # entry is known without asking the index while entries are still in memory.
        self._last_cached_entry: dict[int, int] = {}
        # The write cache a checkpoint is writing out (see begin_checkpoint), or None.
        self._flushing: WriteCache | None = None
        self.dropped_entries_count = 0
        self.read_ahead_entries_count = 0     # entries brought into the read cache by read-ahead

    # -- ledger state ---------------------------------------------------------------------

    def _state(self, ledger_id: int) -> _LedgerState | None:
        state = self._ledgers.get(ledger_id)
        if state is None and ledger_id not in self._deleted_ledgers:
            data = self.index.get(ledger_key(ledger_id))
            if data is not None:
                state = self._ledgers[ledger_id] = _LedgerState.unpack(data)
        return state

    def _change(self, ledger_id: int) -> _LedgerState | None:
        """State to modify, or None for a ledger that is gone (deleted by GC while a record for
        it was in flight, or replayed after its deletion): changes to it are dropped."""
        state = self._state(ledger_id)
        if state is not None:
            self._dirty_ledgers.add(ledger_id)
        return state

    # The queries below look in _ledgers first and call _state only on a miss: a bookie asks
    # them several times per request.

    def has_ledger(self, ledger_id: int) -> bool:
        return ledger_id in self._ledgers or self._state(ledger_id) is not None

    def set_master_key(self, ledger_id: int, master_key: bytes) -> None:
        if self._state(ledger_id) is None:
            self._deleted_ledgers.discard(ledger_id)
            self._ledgers[ledger_id] = _LedgerState(master_key)
            self._dirty_ledgers.add(ledger_id)

    def master_key(self, ledger_id: int) -> bytes | None:
        state = self._ledgers.get(ledger_id) or self._state(ledger_id)
        return None if state is None else state.master_key

    def set_fenced(self, ledger_id: int) -> None:
        state = self._change(ledger_id)
        if state is not None:
            state.is_fenced = True

    def is_fenced(self, ledger_id: int) -> bool:
        state = self._ledgers.get(ledger_id) or self._state(ledger_id)
        return state is not None and state.is_fenced

    def set_explicit_lac(self, ledger_id: int, lac: int, body: bytes) -> None:
        state = self._change(ledger_id)
        if state is not None and lac > state.lac:
            state.lac, state.lac_body = lac, body

    def explicit_lac(self, ledger_id: int) -> tuple[int, bytes] | None:
        state = self._state(ledger_id)
        return None if state is None or state.lac == INVALID_ENTRY_ID else (state.lac, state.lac_body)

    # -- entries --------------------------------------------------------------------------

    def add_entry(self, ledger_id: int, entry_id: int, body: bytes) -> None:
        """add_entries of one entry, spelled out: single adds are common (one at a time)."""
        if ledger_id not in self._ledgers and self._state(ledger_id) is None:
            self.dropped_entries_count += 1             # the ledger is gone (see _change)
            return
        self._write_cache.add_one(ledger_id, entry_id, body)
        if self._read_cache:
            self._read_cache.discard(ledger_id << ENTRY_ID_BITS | entry_id)     # memory_key
        if entry_id > self._last_cached_entry.get(ledger_id, INVALID_ENTRY_ID):
            self._last_cached_entry[ledger_id] = entry_id

    def add_entries(self, ledger_id: int, first_entry_id: int, bodies: list[bytes]) -> None:
        if ledger_id not in self._ledgers and self._state(ledger_id) is None:
            self.dropped_entries_count += len(bodies)   # the ledger is gone (see _change)
            return
        self._write_cache.add(ledger_id, first_entry_id, bodies)
        if self._read_cache:                       # a rewrite of entries read: rare
            first_key = memory_key(ledger_id, first_entry_id)
            self._read_cache.discard_all(range(first_key, first_key + len(bodies)))
        last_entry_id = first_entry_id + len(bodies) - 1
        if last_entry_id > self._last_cached_entry.get(ledger_id, INVALID_ENTRY_ID):
            self._last_cached_entry[ledger_id] = last_entry_id

    @property
    def write_cache_size(self) -> int:
        return self._write_cache.size

    @property
    def write_cache_count(self) -> int:
        return len(self._write_cache)

    @property
    def read_cache_size(self) -> int:
        return self._read_cache.size

    @property
    def read_cache_count(self) -> int:
        return len(self._read_cache)

    def get_entry(self, ledger_id: int, entry_id: int) -> bytes | None:
        body = self._write_cache.get(ledger_id, entry_id)
        if body is not None:
            return body
        if ledger_id in self._deleted_ledgers:
            return None
        if self._flushing is not None:
            body = self._flushing.get(ledger_id, entry_id)
            if body is not None:
                return body
        key = ledger_id << ENTRY_ID_BITS | entry_id              # memory_key, spelled out
        body = self._read_cache.use(key)
        if body is not None:
            return body
        value = self.index.get(entry_key(ledger_id, entry_id))
        if value is None:
            return None
        location = unpack_location(value)
        body = self._read_from_log(location, ledger_id, entry_id)
        self._read_cache.put(key, body)
        if self.config.read_ahead_count_max:
            self._read_ahead(location, ledger_id, entry_id + 1,
                             next_offset=location[1] + RECORD_OVERHEAD_SIZE + len(body))
        return body

    def get_entries(self, ledger_id: int, first_entry_id: int, count_max: int, size_max: int) -> list[bytes]:
        """A batch read's entries: from memory while they are there, else runs of them from the
        entry logs, each run's locations from one index scan and its records from one read of
        the log. A record is taken only where the index places it (as read-ahead's are), and
        is not put in the read cache: a batch read is a scan, not a working set."""
        bodies: list[bytes] = []
        size = 0
        entry_id, end_entry_id = first_entry_id, first_entry_id + count_max
        write_cache, read_cache = self._write_cache, self._read_cache
        flushing = self._flushing or _NOTHING
        is_deleted = ledger_id in self._deleted_ledgers
        while entry_id < end_entry_id:
            body = write_cache.get(ledger_id, entry_id)
            if body is None and not is_deleted:
                body = flushing.get(ledger_id, entry_id) or read_cache.peek(memory_key(ledger_id, entry_id))
                if body is None:
                    run = self._logged_run(ledger_id, entry_id, end_entry_id - entry_id, size_max - size,
                                           is_first=not bodies)
                    if run:
                        bodies.extend(run)
                        size += sum(map(len, run))
                        entry_id += len(run)
                        continue
                    if bodies:
                        break       # missing or unreadable: the reader asks again from here
                    body = self.get_entry(ledger_id, entry_id)     # None, or raises StorageIOError
            if body is None or (bodies and size + len(body) > size_max):
                break
            bodies.append(body)
            size += len(body)
            entry_id += 1
        return bodies

    def _logged_run(self, ledger_id: int, first_entry_id: int, count_max: int, size_max: int, *,
                    is_first: bool) -> list[bytes]:
        """Entries from first_entry_id on that the index places one after another in one log,
        read in one go, size_max bytes at most (the first of a batch whatever its size); empty
        if the first is not where the index says, or is not indexed. An entry also held in
        memory (written again since) is taken from there.

        Per entry there is no Python step: the index's values are taken and unpacked, and the
        records split and checked, by C loops over the whole run (index.unpack_locations,
        entrylog.run_bodies). Reading 1 KiB entries a thousand at a time, a bookie's
        get_entries went from about 18,300 instructions per entry (a Python step, a lookup and
        a few tuples each) to about 10,600 (callgrind)."""
        values = self.index.entry_locations(ledger_id, first_entry_id, count_max)
        log_ids, offsets = unpack_locations(values)
        if not offsets:
            return []
        log_id = log_ids[0]
        offsets = list(offsets[:leading_equal_count(log_ids, (log_id,) * len(log_ids))])
        bodies = self.entry_logger.read_run(log_id, offsets, ledger_id=ledger_id, first_entry_id=first_entry_id,
                                            size_max=_run_read_size(offsets, size_max))
        end_entry_id = first_entry_id + len(bodies)
        write_cache, flushing = self._write_cache, self._flushing or _NOTHING
        if write_cache.holds_any(ledger_id, first_entry_id, end_entry_id) \
                or flushing.holds_any(ledger_id, first_entry_id, end_entry_id):
            bodies = [write_cache.get(ledger_id, entry_id) or flushing.get(ledger_id, entry_id) or body
                      for entry_id, body in enumerate(bodies, first_entry_id)]
        count = bisect_right(list(accumulate(map(len, bodies))), size_max)
        if not count and is_first and bodies:
            count = 1                               # the first of a batch, whatever its size
        return bodies[:count]

    def _read_ahead(self, location: tuple[int, int], ledger_id: int, first_entry_id: int, *,
                    next_offset: int) -> None:
        """Put the entries that follow `location` in its log into the read cache. Only those the
        index places at exactly that (log, offset) are kept, so read-ahead never serves a copy the
        index does not name (one left by a checkpoint that crashed before its index commit, or by
        a compaction). At most half the read cache, so read-ahead never evicts what it brought."""
        config = self.config
        log_id = location[0]
        index_get = self.index.get
        if index_get(entry_key(ledger_id, first_entry_id)) != pack_location(log_id, next_offset):
            # The next entry is not the next record (a striped ledger's next entry is on
            # another bookie; or the ledger's run ends here): nothing to read ahead, and reading
            # a megabyte to find that out costs more than the read it follows.
            return
        following = self.entry_logger.read_following(
            log_id, next_offset, ledger_id=ledger_id, first_entry_id=first_entry_id,
            count_max=min(config.read_ahead_count_max, config.read_cache_count_max // 2),
            size_max=min(config.read_ahead_size_max, config.read_cache_size_max // 2))
        read_cache, write_cache = self._read_cache, self._write_cache
        flushing = self._flushing or _NOTHING
        for entry_id, offset, body in following:
            # (The first record, at next_offset, is the one the index was asked about above.)
            if offset != next_offset and index_get(entry_key(ledger_id, entry_id)) != pack_location(log_id, offset):
                break
            if write_cache.holds(ledger_id, entry_id) or flushing.holds(ledger_id, entry_id):
                continue                               # served from memory already
            key = memory_key(ledger_id, entry_id)
            read_cache.put(key, body)
            self.read_ahead_entries_count += 1

    def _read_from_log(self, location: tuple[int, int], ledger_id: int, entry_id: int) -> bytes:
        """Read again after a checksum failure (a disk may flip a bit once); report it if it stays."""
        for attempt_index in range(ENTRY_READ_ATTEMPT_COUNT_MAX):
            try:
                return self.entry_logger.read(location, ledger_id=ledger_id, entry_id=entry_id)
            except StorageIOError:
                if attempt_index + 1 == ENTRY_READ_ATTEMPT_COUNT_MAX:
                    raise
        raise AssertionError("unreachable")

    def last_entry_id(self, ledger_id: int) -> int:
        if self._state(ledger_id) is None:
            return INVALID_ENTRY_ID
        cached = self._last_cached_entry.get(ledger_id, INVALID_ENTRY_ID)
        key = self.index.last_key_with_prefix(entry_prefix(ledger_id))
        return max(cached, entry_id_of(key) if key is not None else INVALID_ENTRY_ID)

    def delete_ledger(self, ledger_id: int) -> None:
        self._ledgers.pop(ledger_id, None)
        self._dirty_ledgers.discard(ledger_id)
        self._deleted_ledgers.add(ledger_id)
        self._last_cached_entry.pop(ledger_id, None)
        self._write_cache.drop_ledger(ledger_id)
        self._read_cache.discard_ledger(ledger_id)

    def ledger_ids(self) -> list[int]:
        stored = {ledger_id_of(k) for k in self.index.keys_with_prefix(LEDGER_PREFIX)}
        return sorted((stored | set(self._ledgers)) - self._deleted_ledgers)

    # -- checkpoint -----------------------------------------------------------------------

    def append_to_logs(self, runs, puts: dict[bytes, bytes], *,
                       on_written: Callable[[int], None] | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Append runs of entries, (ledger id, first entry id, bodies) sorted by ledger, to the
        entry logs; add the per-log usage they add (merged with what the index has) to `puts`,
        and return their index locations as (key, value) pairs for the index's write.
        on_written: EntryLogger.append_many's."""
        appended = self.entry_logger.append_many(runs, on_written=on_written)
        located = chain.from_iterable(
            zip(map(entry_key, repeat(ledger_id, len(locations)), range(first_entry_id, first_entry_id + len(locations))),
                locations)
            for ledger_id, first_entry_id, locations in appended.runs)
        usages: dict[int, dict[int, int]] = {}
        for (log_id, ledger_id), size in appended.sizes.items():
            usage = usages.get(log_id)
            if usage is None:
                usage = usages[log_id] = self.log_usage(log_id)
            usage[ledger_id] = usage.get(ledger_id, 0) + size
        for log_id, usage in usages.items():
            # packb(usage), with a Packer sized for it instead of packb's 1 MiB buffer.
            puts[log_meta_key(log_id)] = msgpack.Packer(buf_size=16 * len(usage) + 16).pack(usage)
        return located

    def forget_log(self, log_id: int) -> None:
        """A log was deleted: drop cached reads that may have come from it."""
        self._read_cache.clear()

    def log_usage(self, log_id: int) -> dict[int, int]:
        """Bytes per ledger in an entry log, as committed to the index."""
        data = self.index.get(log_meta_key(log_id))
        return {} if data is None else {int(k): v for k, v in msgpack.unpackb(data, strict_map_key=False).items()}

    def checkpoint(self) -> CheckpointReport:
        """Entry logs first (flushed), then the index in one committed batch."""
        plan = self.begin_checkpoint()
        try:
            self.write_checkpoint(plan)
        except BaseException:
            self.abort_checkpoint(plan)
            raise
        return self.finish_checkpoint(plan)

    # A checkpoint in three steps, so a real bookie can do the slow middle one in a worker
    # thread while its event loop keeps adding and reading:
    #   begin  (loop)   the write cache becomes the plan's; new adds start a fresh cache;
    #   write  (thread) entry logs appended and flushed, then the index committed;
    #   finish (loop)   the plan's entries are dropped from memory (the index has them now).
    # Between begin and finish, reads find the plan's entries in `_flushing` and still treat
    # the plan's deleted ledgers as gone. Only one checkpoint (or compaction) runs at a time.

    def begin_checkpoint(self) -> CheckpointPlan:
        assert self._flushing is None, "one checkpoint at a time"
        plan = CheckpointPlan(
            cache=self._write_cache,
            ledger_puts={ledger_key(l): self._ledgers[l].pack() for l in sorted(self._dirty_ledgers)},
            dirty_ledger_ids=sorted(self._dirty_ledgers),
            deleted_ledger_ids=sorted(self._deleted_ledgers))
        self._flushing = self._write_cache
        self._write_cache = WriteCache()
        self._dirty_ledgers.clear()
        return plan

    def write_checkpoint(self, plan: CheckpointPlan, *, timed: PhaseTimer = untimed, pace: Pacer = unpaced) -> None:
        """The I/O of a checkpoint; touches only the entry logs and the index. With nothing to
        write there is no I/O at all (every append to the logs is flushed by its own caller).

        The entries go in parts of about checkpoint_part_size bytes, each in two phases inside
        timed(name): entry_log_write (appended, the logs synced) and index_commit (their
        locations in one index transaction). A last transaction holds the changed ledgers'
        state and the deletions. So the index's work comes in slices beside the entry logs'
        instead of one burst at the end (tens of ms of CPU, and megabytes of pages synced,
        for 40,000 entries). The index only ever points into synced logs: a crash between two
        parts leaves some entries indexed, and replay from the LastLogMark, which moves after
        the whole checkpoint, writes them again (their first copies are garbage that GC
        reclaims). pace(fraction written) after each entry-log write (Pacer)."""
        if not plan.cache and not plan.ledger_puts and not plan.deleted_ledger_ids:
            return
        total_size = max(plan.cache.size + len(plan.cache) * RECORD_OVERHEAD_SIZE, 1)
        written_size = 0

        def on_written(size: int) -> None:
            nonlocal written_size
            written_size += size
            pace(min(written_size / total_size, 1.0))

        # Runs in (ledger, entry) order, so each ledger's entries sit together in the log.
        for part in plan.cache.runs_in_parts(self.config.checkpoint_part_size):
            usage_puts: dict[bytes, bytes] = {}
            with timed("entry_log_write"):
                located = self.append_to_logs(part, usage_puts, on_written=on_written)
                self.entry_logger.flush()
            with timed("index_commit"):
                self.index.write(chain(located, usage_puts.items()), [])
        deletes = []
        with timed("index_commit"):
            for ledger_id in plan.deleted_ledger_ids:
                deletes.append(ledger_key(ledger_id))
                deletes.extend(self.index.keys_with_prefix(entry_prefix(ledger_id)))
            self.index.write(plan.ledger_puts, deletes)

    def abort_checkpoint(self, plan: CheckpointPlan) -> None:
        """The write failed (a full disk): everything goes back to memory for the next try.
        Entries added since begin are newer and win. The index may hold the parts written
        before the failure: they point into synced logs, and the next try points it at new
        copies."""
        self._write_cache.add_missing(plan.cache, skip_ledgers=self._deleted_ledgers)
        self._dirty_ledgers.update(l for l in plan.dirty_ledger_ids if l in self._ledgers)
        self._flushing = None

    def finish_checkpoint(self, plan: CheckpointPlan) -> CheckpointReport:
        for _ in self.finish_checkpoint_steps(plan):
            pass
        return CheckpointReport(len(plan.cache), len(plan.ledger_puts))

    def finish_checkpoint_steps(self, plan: CheckpointPlan, step_count: int = 256) -> Iterator[None]:
        """finish_checkpoint in steps of step_count entries: a driver may serve other inputs
        between two (until the last step the flushed entries stay readable from the plan's cache,
        as while it was written)."""
        # The newest entries are the ones tailing readers ask for next: keep the tail of what was
        # flushed readable from memory (bounded by the read cache) instead of going to disk.
        newest = plan.cache.newest(self.config.read_cache_count_max // 2)
        put = self._read_cache.put                 # the newest end of the LRU order
        for start in range(0, len(newest), step_count):
            deleted = self._deleted_ledgers        # (a ledger may be deleted between two steps)
            for ledger_id, entry_id, body in newest[start:start + step_count]:
                if ledger_id not in deleted:
                    put(memory_key(ledger_id, entry_id), body)
            if start + step_count < len(newest):
                yield
        self._flushing = None
        # Deletions the index now holds; ledgers deleted after begin wait for the next round.
        self._deleted_ledgers.difference_update(plan.deleted_ledger_ids)
