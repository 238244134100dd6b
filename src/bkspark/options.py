"""The options of the "bookkeeper" Spark source and sink, parsed and checked once.

Every error names the option and how to fix it. Option names follow Spark's own sources
(startingOffsets, failOnDataLoss, maxEntriesPerTrigger ...); Spark hands them over
case-insensitively, so they are looked up lower-cased.

A secured cluster's credentials are files, named by tlsCa, tlsCert, tlsKey and authSecretFile
(as `bk` takes them: --tls-ca, --tls-cert, --tls-key, --auth-secret-file), read by each process
that makes a client (bkspark.cluster): the secret never travels in the plan Spark ships.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bkcore.stream.entry_format import CODECS
from bkspark.arrow_rows import VALUE_FORMATS
from bkspark.offsets import OffsetSpec, parse_offset_spec

DEFAULT_NAMESPACE = "default"
# A partition reads about this much (Spark's spark.sql.files.maxPartitionBytes); a Python data
# source task costs Spark tens of milliseconds, so partitions of small entries must not be small.
MAX_BYTES_PER_PARTITION = 128 * 1024 * 1024
MAX_ENTRIES_PER_PARTITION = 2**62       # no cap but the bytes unless maxEntriesPerPartition is set
READ_BATCH_ENTRIES = 1_000
DEFAULT_MAX_TRIGGER_DELAY_S = 15 * 60


class OptionError(ValueError):
    """An option of the bookkeeper source or sink that is missing or wrong."""


@dataclass(frozen=True, slots=True)
class Credentials:
    """The files of a client's credentials (None: not given): a CA that signed the bookies'
    certificates (TLS), this client's own certificate and key, the cluster's secret."""

    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    auth_secret_file: str | None = None


@dataclass(frozen=True, slots=True)
class SourceOptions:
    metastore: str
    namespace: str | None = None     # of the stream or the table
    stream: str | None = None
    ledgers: tuple[int, ...] = ()
    table: str | None = None         # the table's name within `namespace`
    password: bytes = b""
    value_format: str = "binary"
    starting: OffsetSpec = OffsetSpec("earliest")
    ending: OffsetSpec = OffsetSpec("latest")
    max_entries_per_partition: int = MAX_ENTRIES_PER_PARTITION
    max_bytes_per_partition: int = MAX_BYTES_PER_PARTITION
    read_batch_entries: int = READ_BATCH_ENTRIES
    fail_on_data_loss: bool = True
    max_entries_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    min_entries_per_trigger: int | None = None
    max_trigger_delay_s: float = DEFAULT_MAX_TRIGGER_DELAY_S
    cursor: str | None = None
    writer_id: str | None = None
    filter_pushdown: bool = False
    checkpoint_location: str | None = None
    credentials: Credentials = Credentials()
    compression: str = "none"        # of the entries a write makes (bkcore.stream.records.CODECS)

    @property
    def stream_name(self) -> str:
        return f"{self.namespace}/{self.stream}"

    @property
    def table_name(self) -> str:
        return f"{self.namespace}/{self.table}"


def parse_options(raw: dict) -> SourceOptions:
    options = {str(k).lower(): str(v) for k, v in raw.items()}
    metastore = options.get("metastore")
    if not metastore:
        raise OptionError('option "metastore" is missing: .option("metastore", "raft://127.0.0.1:2281,...") '
                          '(memory:// cannot work: Spark reads in other processes)')
    if metastore.startswith("memory:"):
        raise OptionError(f'option "metastore"={metastore!r}: Spark\'s Python workers are other processes and '
                          f'cannot see an in-process memory:// store; use raft:// or zk://')
    sources = [name for name in ("stream", "ledgers", "table") if options.get(name)]
    if len(sources) > 1:
        raise OptionError(f"options {', '.join(sources)} exclude each other: read one stream, ledgers or table")
    namespace = stream = table = None
    if options.get("stream"):
        namespace, stream = _split_name(options["stream"], "stream")
    if options.get("table"):
        namespace, table = _split_name(options["table"], "table")
    value_format = options.get("recordformat", "binary").lower()
    if value_format not in VALUE_FORMATS:
        raise OptionError(f'option "recordFormat"={value_format!r}: use one of {", ".join(VALUE_FORMATS)}')
    return SourceOptions(
        metastore=metastore, namespace=namespace, stream=stream,
        ledgers=_ledger_ids(options.get("ledgers", "")), table=table,
        password=options.get("password", "").encode(), value_format=value_format,
        starting=parse_offset_spec(options.get("startingoffsets"), option="startingOffsets", default="earliest"),
        ending=parse_offset_spec(options.get("endingoffsets"), option="endingOffsets", default="latest"),
        max_entries_per_partition=_positive(options, "maxEntriesPerPartition", MAX_ENTRIES_PER_PARTITION),
        max_bytes_per_partition=_positive(options, "maxBytesPerPartition", MAX_BYTES_PER_PARTITION),
        read_batch_entries=_positive(options, "readBatchEntries", READ_BATCH_ENTRIES),
        fail_on_data_loss=_boolean(options, "failOnDataLoss", True),
        max_entries_per_trigger=_positive(options, "maxEntriesPerTrigger", None),
        max_bytes_per_trigger=_positive(options, "maxBytesPerTrigger", None),
        min_entries_per_trigger=_positive(options, "minEntriesPerTrigger", None),
        max_trigger_delay_s=_duration_s(options, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY_S),
        cursor=options.get("cursor") or None, writer_id=options.get("writerid") or None,
        filter_pushdown=_boolean(options, "filterPushdown", False),
        checkpoint_location=options.get("checkpointlocation") or None, credentials=_credentials(options),
        compression=_compression(options))


def _compression(options: dict) -> str:
    name = options.get("compression", "none").strip().lower()
    if name not in CODECS:
        raise OptionError(f'option "compression"={name!r}: use one of {", ".join(CODECS)} (each entry\'s records '
                          f'compressed, as DistributedLog\'s compressionType)')
    return name


def _credentials(options: dict) -> Credentials:
    credentials = Credentials(tls_ca=options.get("tlsca") or None, tls_cert=options.get("tlscert") or None,
                              tls_key=options.get("tlskey") or None,
                              auth_secret_file=options.get("authsecretfile") or None)
    if credentials.tls_key and not credentials.tls_cert:
        raise OptionError('option "tlsKey" is the key of a certificate: give the certificate too, '
                          '.option("tlsCert", "client.pem")')
    return credentials


def require_stream(options: SourceOptions, what: str) -> None:
    if options.stream is None:
        raise OptionError(f'option "stream" is missing: {what} needs .option("stream", "namespace/name")')


def _split_name(text: str, option: str) -> tuple[str, str]:
    """(namespace, name) of a stream or table option."""
    parts = text.strip().split("/")
    if len(parts) == 1 and parts[0]:
        return DEFAULT_NAMESPACE, parts[0]
    if len(parts) == 2 and all(parts):
        return parts[0], parts[1]
    raise OptionError(f'option "{option}"={text!r} is not "namespace/name" (or "name" in namespace default)')


def _ledger_ids(text: str) -> tuple[int, ...]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not all(item.isdigit() for item in items):
        raise OptionError(f'option "ledgers"={text!r} is not a comma-separated list of ledger ids, e.g. "1,2,3"')
    return tuple(int(item) for item in items)


def _positive(options: dict, name: str, default: int | None) -> int | None:
    text = options.get(name.lower())
    if text is None:
        return default
    if not text.strip().isdigit() or int(text) < 1:
        raise OptionError(f'option "{name}"={text!r} must be a positive integer')
    return int(text)


def _boolean(options: dict, name: str, default: bool) -> bool:
    text = options.get(name.lower())
    if text is None:
        return default
    if text.strip().lower() not in ("true", "false"):
        raise OptionError(f'option "{name}"={text!r} must be true or false')
    return text.strip().lower() == "true"


def _duration_s(options: dict, name: str, default: float) -> float:
    text = options.get(name.lower())
    if text is None:
        return default
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", text)
    if not match:
        raise OptionError(f'option "{name}"={text!r} is not a duration such as 500ms, 30s, 5m or 1h')
    return float(match.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[match.group(2)]
