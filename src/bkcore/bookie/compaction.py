"""Entry log garbage collection and compaction (BookKeeper's GarbageCollectorThread, log part).

Each entry log's usage (bytes per ledger) is committed to the index with the entries themselves
(DurableLedgerStorage.append_to_logs). A log's live fraction counts only ledgers that still exist.
- a log with nothing live is deleted;
- minor compaction (live fraction below minor_compaction_threshold, 0.2) and major compaction
  (below major_compaction_threshold, 0.8; run less often) copy the live entries of a log to the
  current log, flush it, commit the new locations and the usage change in one index batch, and
  only then delete the old log. A crash before the commit leaves the old locations valid (the
  copies are unreferenced garbage); a crash after it leaves an old log nothing points to, which
  the next round deletes. Nothing is lost and no entry has two live copies.
Logs still being written, or written but not yet flushed (a checkpoint that failed half way),
are never touched. Callers run this on the same thread as
checkpoints: both move entries between logs and the index.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

from bkcore.bookie.durable_storage import DurableLedgerStorage
from bkcore.bookie.entrylog import Location, entry_log_name
from bkcore.bookie.index import entry_id_of, entry_prefix, log_meta_key, unpack_location
from bkcore.bookie.storage import StorageIOError
from bkcore.bookie.write_cache import WriteCache


@dataclass(frozen=True, slots=True)
class CompactionConfig:
    minor_compaction_threshold: float = 0.2     # minorCompactionThreshold
    major_compaction_threshold: float = 0.8     # majorCompactionThreshold


@dataclass(frozen=True, slots=True)
class LogUsage:
    log_id: int
    total_size: int
    live_size: int

    @property
    def live_fraction(self) -> float:
        return self.live_size / self.total_size if self.total_size else 0.0


@dataclass(frozen=True, slots=True)
class CompactionReport:
    logs_deleted_count: int
    logs_compacted_count: int
    entries_moved_count: int
    bytes_reclaimed: int
    logs_skipped_unreadable: tuple[int, ...] = ()


class Compactor:
    def __init__(self, *, storage: DurableLedgerStorage, config: CompactionConfig = CompactionConfig()) -> None:
        self.storage = storage
        self.config = config
        self.total_bytes_reclaimed = 0
        self.total_entries_moved = 0

    def _path(self, log_id: int) -> str:
        return f"{self.storage.config.ledger_dir}/{entry_log_name(log_id)}"

    def usages(self) -> list[LogUsage]:
        """Usage of every finished log (all but the one being written), oldest first."""
        storage = self.storage
        result = []
        for log_id in storage.entry_logger.log_ids():
            if log_id >= storage.entry_logger.current_id or not storage.entry_logger.is_finished(log_id):
                continue
            per_ledger = storage.log_usage(log_id)
            live = sum(size for ledger_id, size in per_ledger.items() if storage.has_ledger(ledger_id))
            result.append(LogUsage(log_id, storage.fs.size(self._path(log_id)), live))
        return result

    def run(self, *, threshold: float) -> CompactionReport:
        """Delete dead logs and compact those whose live fraction is below `threshold`."""
        deleted = compacted = moved = reclaimed = 0
        unreadable = []
        for usage in self.usages():
            if usage.live_size == 0:
                reclaimed += self._delete_log(usage.log_id, usage.total_size)
                deleted += 1
            elif usage.live_fraction < threshold:
                try:
                    moved += self._compact_log(usage.log_id)
                except StorageIOError:
                    unreadable.append(usage.log_id)   # keep it: a live entry could not be read
                    continue
                reclaimed += self._delete_log(usage.log_id, usage.total_size)
                compacted += 1
        self.total_bytes_reclaimed += reclaimed
        self.total_entries_moved += moved
        return CompactionReport(deleted, compacted, moved, reclaimed, tuple(unreadable))

    def _compact_log(self, log_id: int) -> int:
        storage = self.storage
        live = WriteCache()           # the live entries, gathered into runs as a write cache does
        for ledger_id in sorted(storage.log_usage(log_id)):
            if not storage.has_ledger(ledger_id):
                continue
            for key in storage.index.keys_with_prefix(entry_prefix(ledger_id)):
                location = Location(*unpack_location(storage.index.get(key)))
                if location.log_id == log_id:
                    entry_id = entry_id_of(key)
                    body = storage.entry_logger.read(location, ledger_id=ledger_id, entry_id=entry_id)
                    live.add_one(ledger_id, entry_id, body)
        puts: dict[bytes, bytes] = {}
        located = storage.append_to_logs(live.runs(), puts)
        storage.entry_logger.flush()
        storage.index.write(chain(located, puts.items()), [log_meta_key(log_id)])
        return len(live)

    def _delete_log(self, log_id: int, size: int) -> int:
        storage = self.storage
        if storage.index.get(log_meta_key(log_id)) is not None:
            storage.index.write({}, [log_meta_key(log_id)])
        storage.fs.delete(self._path(log_id))
        storage.fs.sync_dir(storage.config.ledger_dir)
        storage.forget_log(log_id)
        return size
