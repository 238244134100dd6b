"""The bookie's options: one table (OPTIONS) from each key, BookKeeper's name where it has one,
to the BookieServerConfig field it sets, and back.

to_field turns a key's value (journalMaxSizeMB in MB, flushInterval in ms) into its field's
(bytes, seconds); from_field turns the field's back into the key's. bkcli.bookie_config reads a
config file through the table, `bk bookie --print-config-reference` prints it, and the HTTP admin
endpoint (GET /api/v1/config/server_config) shows a running bookie's values with it, so code,
docs and the endpoint agree. It lives here, below bkcli, because the endpoint does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

MS = 1_000_000          # ns in a ms
MIB = 1024 * 1024
REDACTED = "******"


def _identity(value):
    return value


@dataclass(frozen=True)
class Option:
    key: str            # TOML key (BookKeeper's name where it has one)
    section: str        # "" (BookieServerConfig), bookie, journal, storage, disk_usage, compaction
    field: str          # dataclass field it sets
    kind: type          # int, float, bool, str
    to_field: Callable = _identity        # the key's value -> the field's
    from_field: Callable = _identity      # the field's value -> the key's
    help: str = ""
    is_secret: bool = False               # never shown back (server_config redacts it)


def _per_second(value: int) -> float:
    return value / 1000


def _ms_of(seconds: float) -> int:
    return round(seconds * 1000)


def _mib(value: int) -> int:
    return value * MIB


def _in_mib(size: int) -> int:
    return size // MIB


OPTIONS: tuple[Option, ...] = (
    Option("metadataServiceUri", "", "metadata_service_uri", str,
           help="metastore URI (raft://, zk://, memory://); required"),
    Option("dataDir", "", "data_dir", str, help="directory holding journal, ledgers and index; required"),
    Option("bookiePort", "", "port", int, help="TCP port the bookie listens on (3181)"),
    Option("listeningInterface", "", "host", str, help="address to listen on (127.0.0.1)"),
    Option("advertisedAddress", "", "advertised_address", str,
           help="bookie id host:port that clients dial (default: listen address:port)"),
    Option("httpServerPort", "", "http_port", int, help="HTTP admin port, 0 = off (0)"),
    Option("httpServerTlsEnable", "", "http_tls", bool,
           help="serve the HTTP admin port as HTTPS, with tlsCertificatePath and tlsKeyPath (false)"),
    Option("bookieAuthSecret", "", "auth_secret", str, to_field=str.encode, from_field=bytes.decode, is_secret=True,
           help="shared secret every client connection must present first, and every HTTP admin request as a "
                "bearer token (Authorization: Bearer ...) (empty: none)"),
    Option("tlsCertificatePath", "", "tls_cert_file", str, help="TLS certificate chain, PEM (empty: no TLS)"),
    Option("tlsKeyPath", "", "tls_key_file", str, help="private key of the TLS certificate, PEM"),
    Option("tlsTrustStore", "", "tls_trust_file", str,
           help="CA certificate(s), PEM, that this bookie's own clients of the cluster (its metastore session, "
                "autorecovery, stream storage, the HTTP admin API's) trust to reach TLS bookies and a raft+tls:// "
                "metastore, when this bookie serves TLS itself (empty: the system's)"),
    Option("autoRecoveryDaemonEnabled", "", "autorecovery", bool,
           help="run an autorecovery auditor candidate and replication worker in this bookie (false)"),
    Option("lostBookieRecoveryDelay", "", "lost_bookie_recovery_delay_s", int,
           help="seconds a bookie must be gone before its ledgers are re-replicated (0)"),
    Option("auditorPeriodicCheckInterval", "", "audit_interval_s", int,
           help="seconds between full audits, besides audits on registration changes (60)"),
    Option("streamStorageEnabled", "", "stream_storage", bool,
           help="also serve streams and tables (the gRPC endpoint) from this bookie's process (false)"),
    Option("streamStoragePort", "", "stream_storage_port", int, help="gRPC port of that stream storage (4181)"),
    Option("journalDirectory", "journal", "journal_dir", str, help="journal directory, under dataDir (journal)"),
    Option("ledgerDirectories", "journal", "ledger_dirs", str, to_field=lambda v: (v,), from_field=lambda v: v[0],
           help="ledger directory, under dataDir (ledgers)"),
    Option("journalMaxSizeMB", "journal", "journal_max_size", int, to_field=_mib, from_field=_in_mib,
           help="roll the journal at this size (2048)"),
    Option("journalMaxBackups", "journal", "journal_max_backups", int,
           help="old journals kept after the LastLogMark passed them (5)"),
    Option("journalPreAllocSizeMB", "journal", "journal_prealloc_size", int, to_field=_mib, from_field=_in_mib,
           help="grow journal files ahead of their records in chunks of this size, so a group's "
                "fdatasync need not persist a new file size; 0 = off (16)"),
    Option("journalRemoveFromPageCache", "journal", "journal_remove_from_page_cache", bool,
           help="after each journal sync, let the OS drop the journal's cached pages up to 8 MiB behind "
                "its end (posix_fadvise DONTNEED): journals are read only at replay (true)"),
    Option("journalMaxGroupWaitMSec", "bookie", "journal_max_group_wait_ns", float,
           to_field=lambda v: int(v * MS), from_field=lambda v: v / MS,
           help="longest wait of a record for its group commit (2)"),
    Option("journalBufferedWritesThreshold", "bookie", "journal_buffered_writes_threshold_size", int,
           help="bytes that make a group commit at once (524288)"),
    Option("journalFlushWhenQueueEmpty", "bookie", "journal_flush_when_queue_empty", bool,
           help="commit a group as soon as no request is waiting (true here; BookKeeper: false)"),
    Option("journalWritesInFlightMax", "bookie", "journal_writes_in_flight_max", int,
           help="journal groups written and not yet synced, at most: with 2 the journal thread writes "
                "the next group as soon as the last is synced, while its answers go out (2; 1: one at a time)"),
    Option("journalSyncInlineMaxBytes", "", "journal_sync_inline_size_max", int,
           help="journal groups up to this size are written and fdatasynced on the event loop, "
                "sparing a thread handoff at light load; larger ones in a worker thread (16384)"),
    Option("maxAddsInProgressLimit", "bookie", "pending_adds_count_max", int,
           help="adds waiting for the journal before TOO_MANY_REQUESTS (10000)"),
    Option("nettyMaxFrameSizeBytes", "", "frame_size_max", int, help="largest frame accepted (8388608)"),
    Option("logSizeLimit", "storage", "entry_log_size_max", int, help="roll entry logs at this size (1073741824)"),
    Option("flushEntrylogBytes", "storage", "entry_log_flush_size", int,
           help="a checkpoint syncs the entry log every this many bytes it writes, so journal syncs "
                "meanwhile wait behind a slice, not the whole checkpoint (1048576; 0: once, at its end)"),
    Option("readCacheMaxEntries", "storage", "read_cache_count_max", int, help="entries kept after reads (4096)"),
    Option("dbStorage_readAheadCacheMaxSizeMb", "storage", "read_cache_size_max", int, to_field=_mib,
           from_field=_in_mib, help="bytes of the entries kept after reads, at most (64)"),
    Option("dbStorage_readAheadCacheBatchSize", "storage", "read_ahead_count_max", int,
           help="entries read ahead after a read from an entry log (100; 0 turns it off)"),
    Option("flushInterval", "", "flush_interval_s", int, to_field=_per_second, from_field=_ms_of,
           help="checkpoint period in ms (1000)"),
    Option("checkpointCompletionTarget", "", "checkpoint_completion_target", float,
           help="a periodic checkpoint's entry-log writes are spread over this fraction of flushInterval, "
                "so they do not hold up adds in one burst; one started because the write cache is half full "
                "is not (0.5; 0: as fast as they go)"),
    Option("dbStorage_writeCacheMaxSizeMb", "", "write_cache_size_max", int, to_field=_mib, from_field=_in_mib,
           help="a checkpoint starts early when the write cache holds half of this; if it fills while the "
                "other half is being flushed, the bookie stops reading requests until it is done (256)"),
    Option("gcWaitTime", "", "gc_wait_time_s", int, to_field=_per_second, from_field=_ms_of,
           help="GC period in ms (60000)"),
    Option("majorCompactionInterval", "", "major_compaction_interval_s", int,
           help="seconds between major compactions (3600)"),
    Option("minorCompactionThreshold", "compaction", "minor_compaction_threshold", float,
           help="compact logs whose live fraction is below this every GC round (0.2)"),
    Option("majorCompactionThreshold", "compaction", "major_compaction_threshold", float,
           help="... and below this at major compactions (0.8)"),
    Option("diskUsageThreshold", "disk_usage", "disk_usage_threshold", float,
           help="usage at which the bookie turns readonly (0.95)"),
    Option("diskUsageLwmThreshold", "disk_usage", "disk_usage_lwm_threshold", float,
           help="usage below which it becomes writable again (0.90)"),
    Option("diskCheckInterval", "", "disk_check_interval_s", int, to_field=_per_second, from_field=_ms_of,
           help="disk usage check period in ms (10000)"),
)


def option_values(config) -> dict[str, str]:
    """Every option of a BookieServerConfig as its key and the text a config file would give it,
    in the key's units (journalMaxSizeMB in MB, flushInterval in ms); secrets redacted."""
    values = {}
    for option in OPTIONS:
        holder = getattr(config, option.section) if option.section else config
        value = option.from_field(getattr(holder, option.field))
        if option.is_secret:
            values[option.key] = REDACTED if value else ""
        else:
            values[option.key] = _as_text(option.kind, value)
    return values


def _as_text(kind: type, value) -> str:
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return str(round(value))        # (seconds held as floats: 60.0 -> "60")
    if kind is float:
        return str(float(value))
    return str(value)
