"""Table rows to Arrow: the columns of a table snapshot read from Spark, one row per live key.

    table            "namespace/name"
    range_id         the hash range that holds the key (crc32c of the pkey modulo the ranges)
    revision         the range's revision the snapshot was taken at (the same on every row of
                     a range; revisions are counted per range)
    pkey, key        the key: PTable's (pkey, lkey); a plain Table key is both
    value            the value's bytes (a counter's 8 bytes, big-endian, for keys made by increments)
    number           a counter's value; null for keys set by put
    create_revision, mod_revision, version    as etcd has them
    expire_at_ms     when a TTL key expires (epoch millis); null without a TTL
    value_text       with recordFormat utf8 or json: the value as a string (null for counters)

A table's value is its bytes (`value`, as Kafka's source has it), so the decoded text is a
column of its own, `value_text`, where a stream's is `value` (bkspark.arrow_rows).
"""

from __future__ import annotations

from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from bkcore.table.commands import KeyValue, unfold_key

_FIELDS = [
    ("table", pa.string(), "string"), ("range_id", pa.int32(), "int"), ("revision", pa.int64(), "bigint"),
    ("pkey", pa.binary(), "binary"), ("key", pa.binary(), "binary"), ("value", pa.binary(), "binary"),
    ("number", pa.int64(), "bigint"), ("create_revision", pa.int64(), "bigint"),
    ("mod_revision", pa.int64(), "bigint"), ("version", pa.int64(), "bigint"),
    ("expire_at_ms", pa.int64(), "bigint"),
]
_TEXT_FIELD = ("value_text", pa.string(), "string")


class TableValueError(ValueError):
    """A value that recordFormat says is text is not UTF-8."""


def _fields(value_format: str) -> list[tuple[str, pa.DataType, str]]:
    return _FIELDS + [_TEXT_FIELD] if value_format in ("utf8", "json") else list(_FIELDS)


def table_arrow_schema(value_format: str) -> pa.Schema:
    return pa.schema([(name, arrow_type) for name, arrow_type, _ in _fields(value_format)])


def table_schema_ddl(value_format: str) -> str:
    return ", ".join(f"{name} {spark_type}" for name, _, spark_type in _fields(value_format))


def table_batch(table: str, range_id: int, revision: int, kvs: Sequence[KeyValue],
                value_format: str) -> pa.RecordBatch:
    """The rows of `kvs` (folded keys, as a range's state holds them) of one range snapshot."""
    count = len(kvs)
    keys = [unfold_key(kv.key) for kv in kvs]
    values = pa.array([kv.value for kv in kvs], pa.binary())
    is_number = pa.array([kv.is_number for kv in kvs], pa.bool_())
    columns = [
        pa.repeat(pa.scalar(table, pa.string()), count), pa.repeat(pa.scalar(range_id, pa.int32()), count),
        pa.repeat(pa.scalar(revision, pa.int64()), count),
        pa.array([pkey for pkey, _ in keys], pa.binary()), pa.array([lkey for _, lkey in keys], pa.binary()),
        values, pa.array([kv.number for kv in kvs], pa.int64()),
        pa.array([kv.create_revision for kv in kvs], pa.int64()),
        pa.array([kv.mod_revision for kv in kvs], pa.int64()), pa.array([kv.version for kv in kvs], pa.int64()),
        pa.array([kv.expire_at_ms or None for kv in kvs], pa.int64()),
    ]
    if value_format in ("utf8", "json"):
        columns.append(_text(table, kvs, pc.if_else(is_number, pa.scalar(None, pa.binary()), values), value_format))
    return pa.RecordBatch.from_arrays(columns, schema=table_arrow_schema(value_format))


def _text(table: str, kvs: Sequence[KeyValue], values: pa.Array, value_format: str) -> pa.Array:
    try:
        return pc.cast(values, pa.string())
    except pa.ArrowInvalid:
        bad = next(kv for kv in kvs if not kv.is_number and not _is_utf8(kv.value))
        pkey, lkey = unfold_key(bad.key)
        raise TableValueError(f"table {table}: the value of key {lkey!r} (pkey {pkey!r}) is not UTF-8 text, so "
                              f"recordFormat={value_format} cannot decode it; read with recordFormat=binary and "
                              f"decode the `value` column yourself") from None


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
