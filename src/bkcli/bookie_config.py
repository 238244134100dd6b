"""Bookie configuration in TOML, with BookKeeper's option names where BookKeeper has the option.

OPTIONS is the one table of every key: `load_bookie_config()` reads a file through it, and
`bk bookie --print-config-reference` (docs/operations.md) prints it, so code and docs agree.

    # bookie.toml
    metadataServiceUri = "raft://127.0.0.1:2281"
    dataDir = "/var/lib/bk/bookie1"
    bookiePort = 3181
    journalFlushWhenQueueEmpty = true
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass
from typing import Callable

from bkcli.properties import parse_properties
from bkcore.bookie.bookie import BookieConfig
from bkcore.bookie.compaction import CompactionConfig
from bkcore.bookie.diskmonitor import DiskUsageConfig
from bkcore.bookie.durable_storage import StorageConfig
from bkcore.bookie.journal_files import JournalConfig
from transports.bookie_server import BookieServerConfig

MS = 1_000_000
MIB = 1024 * 1024


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Option:
    key: str            # TOML key (BookKeeper's name where it has one)
    section: str        # "" (BookieServerConfig), bookie, journal, storage, disk_usage, compaction
    field: str          # dataclass field it sets
    kind: type          # int, float, bool, str
    to_field: Callable = lambda value: value
    help: str = ""


OPTIONS: tuple[Option, ...] = (
    Option("metadataServiceUri", "", "", str, help="metastore URI (raft://, zk://, memory://); required"),
    Option("dataDir", "", "data_dir", str, help="directory holding journal, ledgers and index; required"),
    Option("bookiePort", "", "port", int, help="TCP port the bookie listens on (3181)"),
    Option("listeningInterface", "", "host", str, help="address to listen on (127.0.0.1)"),
    Option("advertisedAddress", "", "advertised_address", str,
           help="bookie id host:port that clients dial (default: listen address:port)"),
    Option("httpServerPort", "", "http_port", int, help="HTTP admin port, 0 = off (0)"),
    Option("bookieAuthSecret", "", "auth_secret", str, to_field=lambda v: v.encode(),
           help="shared secret every client connection must present first (empty: none)"),
    Option("tlsCertificatePath", "", "tls_cert_file", str, help="TLS certificate chain, PEM (empty: no TLS)"),
    Option("tlsKeyPath", "", "tls_key_file", str, help="private key of the TLS certificate, PEM"),
    Option("tlsTrustStore", "", "tls_trust_file", str,
           help="CA certificate(s), PEM, that this bookie's own clients of the cluster (autorecovery, stream "
                "storage) trust to reach TLS bookies (empty: the system's)"),
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
    Option("ledgerDirectories", "journal", "ledger_dirs", str, to_field=lambda v: (v,),
           help="ledger directory, under dataDir (ledgers)"),
    Option("journalMaxSizeMB", "journal", "journal_max_size", int, to_field=lambda v: v * MIB,
           help="roll the journal at this size (2048)"),
    Option("journalMaxBackups", "journal", "journal_max_backups", int,
           help="old journals kept after the LastLogMark passed them (5)"),
    Option("journalPreAllocSizeMB", "journal", "journal_prealloc_size", int, to_field=lambda v: v * MIB,
           help="grow journal files ahead of their records in chunks of this size, so a group's "
                "fdatasync need not persist a new file size; 0 = off (16)"),
    Option("journalMaxGroupWaitMSec", "bookie", "journal_max_group_wait_ns", float,
           to_field=lambda v: int(v * MS), help="longest wait of a record for its group commit (2)"),
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
    Option("dbStorage_readAheadCacheMaxSizeMb", "storage", "read_cache_size_max", int, to_field=lambda v: v * MIB,
           help="bytes of the entries kept after reads, at most (64)"),
    Option("dbStorage_readAheadCacheBatchSize", "storage", "read_ahead_count_max", int,
           help="entries read ahead after a read from an entry log (100; 0 turns it off)"),
    Option("flushInterval", "", "flush_interval_s", int, to_field=lambda v: v / 1000,
           help="checkpoint period in ms (1000)"),
    Option("dbStorage_writeCacheMaxSizeMb", "", "write_cache_size_max", int, to_field=lambda v: v * MIB,
           help="a checkpoint starts early when the write cache holds half of this; if it fills while the "
                "other half is being flushed, the bookie stops reading requests until it is done (256)"),
    Option("gcWaitTime", "", "gc_wait_time_s", int, to_field=lambda v: v / 1000, help="GC period in ms (60000)"),
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
    Option("diskCheckInterval", "", "disk_check_interval_s", int, to_field=lambda v: v / 1000,
           help="disk usage check period in ms (10000)"),
)
_BY_KEY = {option.key: option for option in OPTIONS}
_SECTION_TYPES = {"bookie": BookieConfig, "journal": JournalConfig, "storage": StorageConfig,
                  "disk_usage": DiskUsageConfig, "compaction": CompactionConfig}


def bookie_config_from_mapping(values: dict, *, source: str = "config") -> tuple[str, BookieServerConfig]:
    """(metastore URI, server config) from a mapping of option keys to values."""
    unknown = sorted(set(values) - set(_BY_KEY))
    if unknown:
        raise ConfigError(f"{source}: unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(_BY_KEY))}")
    top: dict = {}
    sections: dict[str, dict] = {name: {} for name in _SECTION_TYPES}
    for key, value in values.items():
        option = _BY_KEY[key]
        if option.kind is float and type(value) is int:
            value = float(value)
        if type(value) is not option.kind:
            raise ConfigError(f"{source}: {key} must be {option.kind.__name__}, not {type(value).__name__} {value!r}")
        if option.field:
            (top if not option.section else sections[option.section])[option.field] = option.to_field(value)
    uri = values.get("metadataServiceUri")
    if not uri or "data_dir" not in top:
        raise ConfigError(f"{source}: metadataServiceUri and dataDir are required")
    if "ledger_dirs" in sections["journal"]:
        sections["storage"]["ledger_dir"] = sections["journal"]["ledger_dirs"][0]
    bookie_defaults = BookieServerConfig(data_dir="").bookie
    built = {}
    for name, cls in _SECTION_TYPES.items():
        base = bookie_defaults if name == "bookie" else cls()
        try:
            built[name] = dataclasses.replace(base, **sections[name])
        except ValueError as exc:
            raise ConfigError(f"{source}: {exc}") from None
    return uri, BookieServerConfig(**top, **built)


# Files read as Java properties (BookKeeper's bk_server.conf); anything else is TOML.
PROPERTIES_SUFFIXES = (".conf", ".properties")
ENVIRONMENT_PREFIX = "BK_"
# BookKeeper's keys that name what an option here holds, in another shape (see _from_bookkeeper_conf).
BOOKKEEPER_ALIASES = ("journalDirectories", "zkServers", "zkLedgersRootPath", "httpServerEnabled", "bookieId")
BOOKKEEPER_HTTP_PORT = 8080


def load_bookie_config(path: str, environ=None) -> tuple[str, BookieServerConfig, list[str]]:
    """(metastore URI, server config, notes to print) from a TOML file, or from BookKeeper's
    bk_server.conf (Java properties: *.conf, *.properties). BK_<key> environment variables
    override the file's keys (BK_bookiePort=3182). The notes name the keys of a
    bk_server.conf that this bookie does not support, which it leaves out."""
    environ = os.environ if environ is None else environ
    overrides = {name[len(ENVIRONMENT_PREFIX):]: value for name, value in environ.items()
                 if name.startswith(ENVIRONMENT_PREFIX)
                 and (name[len(ENVIRONMENT_PREFIX):] in _BY_KEY or name[len(ENVIRONMENT_PREFIX):] in BOOKKEEPER_ALIASES)}
    try:
        with open(path, "rb") as file:
            raw = file.read()
    except OSError as exc:
        raise ConfigError(f"cannot read bookie config {path}: {exc.strerror}") from None
    if path.endswith(PROPERTIES_SUFFIXES):
        try:
            properties = parse_properties(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ConfigError(f"bookie config {path} is not UTF-8 text: {exc}") from None
        values, ignored = _from_bookkeeper_conf({**properties, **overrides}, source=path)
        notes = [f"{path}: not supported here, so left out: {', '.join(ignored)} (docs/operations.md lists what "
                 f"is)"] if ignored else []
    else:
        try:
            values = tomllib.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"bookie config {path} is not valid TOML: {exc}") from None
        values.update(_typed(overrides, source="the environment"))
        notes = []
    return (*bookie_config_from_mapping(values, source=path), notes)


def _typed(strings: dict[str, str], *, source: str) -> dict:
    """Option values given as text (a properties file, the environment) in their options' types."""
    values = {}
    for key, text in strings.items():
        kind = _BY_KEY[key].kind
        text = text.strip()
        try:
            if kind is bool:
                if text.lower() not in ("true", "false"):
                    raise ValueError(text)
                values[key] = text.lower() == "true"
            else:
                values[key] = kind(text)
        except ValueError:
            raise ConfigError(f"{source}: {key} must be {kind.__name__}, not {text!r}") from None
    return values


def _from_bookkeeper_conf(properties: dict[str, str], *, source: str) -> tuple[dict, list[str]]:
    """A bk_server.conf's keys as this bookie's typed options, and the keys it leaves out.

    BookKeeper names directories as absolute lists and the metastore as zkServers; here a
    bookie has one journal and one ledger directory under its dataDir (which defaults to the
    directory that holds both) and one metadataServiceUri."""
    properties = dict(properties)
    journal = _one_directory(properties, "journalDirectories", source) or _one_directory(
        properties, "journalDirectory", source)
    ledgers = _one_directory(properties, "ledgerDirectories", source)
    servers = properties.pop("zkServers", None)
    root = properties.pop("zkLedgersRootPath", "/ledgers")
    if servers and "metadataServiceUri" not in properties:
        properties["metadataServiceUri"] = f"zk://{servers}{root}"
    http = properties.pop("httpServerEnabled", None)
    if http is not None and http.strip().lower() == "false":
        properties["httpServerPort"] = "0"
    elif http is not None and "httpServerPort" not in properties:
        properties["httpServerPort"] = str(BOOKKEEPER_HTTP_PORT)
    bookie_id = properties.pop("bookieId", None)
    if bookie_id and "advertisedAddress" not in properties:
        properties["advertisedAddress"] = bookie_id
    data_dir = properties.get("dataDir")
    directories = {key: path for key, path in (("journalDirectory", journal), ("ledgerDirectories", ledgers)) if path}
    if data_dir is None:            # (then relative directories are relative to where the bookie starts)
        directories = {key: os.path.abspath(path) for key, path in directories.items()}
    absolute = [path for path in directories.values() if os.path.isabs(path)]
    if data_dir is None and absolute:
        data_dir = properties["dataDir"] = os.path.commonpath(absolute) if len(absolute) > 1 else os.path.dirname(
            absolute[0])
        if data_dir == os.sep:
            raise ConfigError(f"{source}: {', '.join(absolute)} share no directory but /; set dataDir (it holds the "
                              f"journal and ledger directories)")
    for key, path in directories.items():
        if os.path.isabs(path):
            relative = os.path.relpath(path, data_dir)
            if relative.startswith(os.pardir):
                raise ConfigError(f"{source}: {path} is not inside dataDir {data_dir}")
            path = relative
        properties[key] = path
    ignored = sorted(key for key in properties if key not in _BY_KEY)
    return _typed({key: value for key, value in properties.items() if key in _BY_KEY}, source=source), ignored


def _one_directory(properties: dict[str, str], key: str, source: str) -> str | None:
    value = properties.pop(key, None)
    if value is None:
        return None
    paths = [path.strip() for path in value.split(",") if path.strip()]
    if len(paths) > 1:
        raise ConfigError(f"{source}: {key} lists {len(paths)} directories; this bookie keeps one journal and one "
                          f"ledger directory")
    return paths[0] if paths else None


def config_reference() -> str:
    lines = ["| option | meaning (default) |", "|---|---|"]
    lines += [f"| `{option.key}` | {option.help} |" for option in OPTIONS]
    return "\n".join(lines)
