"""A bookie's metrics: what its driver times (BookieMetrics), and the families a scrape of
its registry gets (bookie_families), under BookKeeper's names where the number means the same
(BookKeeperServerStats, BookieStats, JournalStats, DbLedgerStorageStats, GarbageCollectorStats)
and names of ours, bookie_*, lowercase, otherwise. docs/metrics.md lists them.

Where ours differ from BookKeeper's, on purpose:
- ADD_ENTRY and ADD_ENTRY_REQUEST are one measurement here (from the request's arrival to its
  answer queued): a request is processed as it arrives, with no write thread pool queue in
  between, which is all that tells the two apart in BookKeeper. Same for READ_ENTRY. A batch
  request (AddBatchRequest, ReadBatchRequest) counts as one request per entry, each with the
  batch's time, so that _count is entries as it is in BookKeeper. Long-poll reads, which wait
  by design, are left out of READ_ENTRY.
- bookie_journal_JOURNAL_ADD_ENTRY times each synced add from the moment its journal group took
  its first record to the group being durable: for later entries of a group, a little more
  than their own wait.
- bookie_flush (DbLedgerStorage's write cache flush) is our checkpoint: entry logs flushed,
  index committed, LastLogMark written. bookie_THREAD_RUNTIME is a GC round with compaction.
"""

from __future__ import annotations

from prometheus_client.core import Metric

from bkcore.errors import Code
from bktransports.metrics import OpStats, bk_counter, counter, gauge, op_stats
from bktransports.stall_recorder import stall_families

_OK = int(Code.OK)


class BookieMetrics:
    """The timings the bookie's driver observes (plain ints and histograms: see bktransports.metrics)."""

    def __init__(self) -> None:
        self.add_requests = OpStats()       # arrival -> answer queued, per entry
        self.read_requests = OpStats()      # (long polls left out)
        self.journal_add_entries = OpStats()  # journal group opened -> durable, per synced add's entry
        self.journal_flushes = OpStats()    # write() of the journal writes of one sync
        self.journal_syncs = OpStats()      # their one fdatasync
        self.checkpoints = OpStats()        # write cache -> entry logs + index + LastLogMark
        self.gc_rounds = OpStats()          # one GC round and the compaction after it


def bookie_families(server) -> list[Metric]:
    """Every family of a BookieServer's own numbers, read now (a scrape)."""
    if server.stack is None:
        return []               # (not started yet: only the process's own metrics)
    statistics, ledger_count = server.core.statistics(), len(server.stack.storage.ledger_ids())
    return [*_request_families(server, statistics), *_journal_families(server, statistics),
            *_storage_families(server, ledger_count), *_gc_families(server, ledger_count),
            *_own_families(server, statistics)]


def _request_families(server, statistics) -> list[Metric]:
    metrics = server.metrics
    return [
        op_stats("bookkeeper_server_ADD_ENTRY_REQUEST", "request stats of AddEntry on a bookie (ms; per entry, "
                 "a batch's entries each with its time)", metrics.add_requests),
        op_stats("bookkeeper_server_ADD_ENTRY", "operation stats of AddEntry on a bookie (ms; the same measurement "
                 "as ADD_ENTRY_REQUEST here: no queue before processing)", metrics.add_requests),
        op_stats("bookkeeper_server_READ_ENTRY_REQUEST", "request stats of ReadEntry on a bookie (ms; per entry; "
                 "long polls left out)", metrics.read_requests),
        op_stats("bookkeeper_server_READ_ENTRY", "operation stats of ReadEntry on a bookie (ms; the same "
                 "measurement as READ_ENTRY_REQUEST here)", metrics.read_requests),
        bk_counter("bookie_WRITE_BYTES", "total bytes written to a bookie (entries of accepted adds)",
                   statistics.added_size),
        bk_counter("bookie_READ_BYTES", "total bytes read from a bookie (entries answered to reads)",
                   statistics.read_size),
        bk_counter("bookie_BOOKIE_FORCE_LEDGER", "total force operations occurred on a bookie",
                   statistics.forces_count),
        gauge("bookie_SERVER_STATUS", "1: up (writable), 0: readonly, -1: not registered", _server_status(server)),
    ]


def _server_status(server) -> int:
    if server.is_registered_readonly is None:
        return -1
    return 0 if server.is_readonly else 1


def _journal_families(server, statistics) -> list[Metric]:
    """BookKeeper's journal families carry journalIndex (one journal directory here: 0)."""
    metrics, index = server.metrics, {"journalIndex": "0"}
    return [
        op_stats("bookie_journal_JOURNAL_ADD_ENTRY", "operation stats of recording addEntry requests in the journal "
                 "(ms; from the journal group's first record to the group durable)",
                 [(index, metrics.journal_add_entries)]),
        op_stats("bookie_journal_JOURNAL_FLUSH_LATENCY", "operation stats of flushing data from memory to filesystem "
                 "(but not yet fsyncing to disks) (ms)", [(index, metrics.journal_flushes)]),
        op_stats("bookie_journal_JOURNAL_SYNC", "operation stats of syncing data to journal disks (ms; one "
                 "fdatasync)", [(index, metrics.journal_syncs)]),
        bk_counter("bookie_journal_JOURNAL_WRITE_BYTES", "The number of bytes appended to the journal",
                   [(index, statistics.journal_written_size)]),
        gauge("bookie_JOURNAL_DIRS", "number of configured journal directories", 1),
    ]


def _storage_labels(server) -> dict[str, str]:
    """DbLedgerStorage's labels: its ledger directory and index directory."""
    config = server.config
    return {"ledgerDir": f"{config.data_dir}/{config.journal.ledger_dirs[0]}", "indexDir": f"{config.data_dir}/index"}


def _storage_families(server, ledger_count: int) -> list[Metric]:
    storage, labels = server.stack.storage, _storage_labels(server)
    ledger_dir_count = len(server.config.journal.ledger_dirs)
    return [
        gauge("bookie_write_cache_size", "Current number of bytes in write cache (the half new adds go to)",
              [(labels, storage.write_cache_size)]),
        gauge("bookie_write_cache_count", "Current number of entries in write cache (the half new adds go to)",
              [(labels, storage.write_cache_count)]),
        gauge("bookie_read_cache_size", "Current number of bytes in read cache", [(labels, storage.read_cache_size)]),
        gauge("bookie_read_cache_count", "Current number of entries in read cache",
              [(labels, storage.read_cache_count)]),
        gauge("bookie_ledgers_count", "Current number of ledgers", [(labels, ledger_count)]),
        op_stats("bookie_flush", "operation stats of flushing write cache to entry log files (ms; a checkpoint: "
                 "entry logs, index, LastLogMark)", [(labels, server.metrics.checkpoints)]),
        gauge("bookie_ledger_num_dirs", "number of ledger directories", ledger_dir_count),
        gauge("bookie_ledger_writable_dirs", "number of writable ledger directories (0 once the disk is over "
              "diskUsageThreshold)", 0 if server.monitor.is_readonly else ledger_dir_count),
    ]


def _gc_families(server, ledger_count: int) -> list[Metric]:
    labels, status, counts = _storage_labels(server), server.gc_status, server.counts
    return [
        bk_counter("bookie_MAJOR_COMPACTION_TOTAL", "Number of major compactions (GC rounds with major compaction)",
                   [(labels, status.major_count)]),
        bk_counter("bookie_MINOR_COMPACTION_TOTAL", "Number of minor compactions (GC rounds with minor compaction)",
                   [(labels, status.minor_count)]),
        bk_counter("bookie_DELETED_LEDGER_TOTAL", "Number of ledgers deleted by garbage collection",
                   [(labels, counts["ledgers_collected"])]),
        bk_counter("bookie_RECLAIMED_COMPACTION_SPACE_BYTES", "Number of disk space bytes reclaimed via compacting "
                   "entry log files", [(labels, counts["bytes_compacted"])]),
        gauge("bookie_ACTIVE_LEDGER_TOTAL", "Current number of active ledgers", [(labels, ledger_count)]),
        op_stats("bookie_THREAD_RUNTIME", "Operation stats of garbage collections (ms; a round and its compaction)",
                 [(labels, server.metrics.gc_rounds)]),
    ]


def _own_families(server, statistics) -> list[Metric]:
    """Numbers with no BookKeeper counterpart."""
    counts = server.counts
    connections = server.connections.values()
    return [
        counter("bookie_connections_accepted", "client connections accepted", counts["connections"]),
        counter("bookie_add_requests", "add requests answered, a batch of entries (AddBatchRequest) counting once",
                counts["add_requests"]),
        gauge("bookie_connections", "client connections open now", len(server.connections)),
        gauge("bookie_send_queue_bytes", "answers queued to be sent, over every connection",
              sum(c.send_queue_size for c in connections)),
        gauge("bookie_journal_waiting_requests", "requests waiting for the journal (adds, fences, forces)",
              server.core.journal_waiter_count),
        counter("bookie_journal_writes", "journal writes (groups of records)", statistics.journal_writes_count),
        counter("bookie_journal_records", "journal records collected", statistics.journal_records_count),
        counter("bookie_deferred_adds", "entries added with deferred sync", statistics.deferred_adds_count),
        counter("bookie_fences", "fencing reads", statistics.fences_count),
        counter("bookie_lac_writes", "explicit LAC writes", statistics.lac_writes_count),
        counter("bookie_long_polls_parked", "long-poll reads that waited for the LAC",
                statistics.long_polls_parked_count),
        counter("bookie_long_polls_timed_out", "long-poll reads answered at their timeout",
                statistics.long_polls_timed_out_count),
        counter("bookie_requests_rejected", "requests answered with an error code, by code",
                [({"code": code}, count) for code, count in statistics.rejected_by_code]),
        counter("bookie_malformed_requests", "requests that were not well-formed", statistics.malformed_count),
        counter("bookie_malformed_frames", "frames that could not be decoded (their connections closed)",
                counts["malformed_frames"]),
        counter("bookie_auth_failures", "connections that did not authenticate", counts["auth_failures"]),
        counter("bookie_readonly_transitions", "changes between writable and readonly", counts["readonly_transitions"]),
        counter("bookie_read_ahead_entries", "entries brought into the read cache by read-ahead",
                server.stack.storage.read_ahead_entries_count),
        counter("bookie_write_cache_full", "times the write cache filled and reading paused",
                server.write_cache_full_count),
        gauge("bookie_disk_usage_ratio", "used fraction of the data directory's disk, at the last check",
              server.monitor.usage),
        *stall_families("bookie", server.stalls),
    ]
