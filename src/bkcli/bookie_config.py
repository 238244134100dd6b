"""Bookie configuration in TOML, with BookKeeper's option names where BookKeeper has the option.

bktransports.bookie_options.OPTIONS is the one table of every key: `load_bookie_config()` reads a
file through it, `bk bookie --print-config-reference` (docs/operations.md) prints it, and the
bookie's HTTP admin endpoint shows its values with it, so code, docs and the endpoint agree.

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

from bkcli.properties import parse_properties
from bkcore.bookie.bookie import BookieConfig
from bkcore.bookie.compaction import CompactionConfig
from bkcore.bookie.diskmonitor import DiskUsageConfig
from bkcore.bookie.durable_storage import StorageConfig
from bkcore.bookie.journal_files import JournalConfig
from bktransports.bookie_options import OPTIONS
from bktransports.bookie_server import BookieServerConfig


class ConfigError(ValueError):
    pass


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
    config = BookieServerConfig(**top, **built)
    if not 0 <= config.checkpoint_completion_target <= 1:
        raise ConfigError(f"{source}: checkpointCompletionTarget is a fraction of flushInterval, from 0 to 1, "
                          f"not {config.checkpoint_completion_target}")
    if config.http_tls and not config.tls_cert_file:
        raise ConfigError(f"{source}: httpServerTlsEnable serves HTTPS with the bookie's certificate: set "
                          f"tlsCertificatePath and tlsKeyPath too")
    return uri, config


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
