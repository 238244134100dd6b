"""bkspark.table_rows without a JVM: the Arrow rows of a table snapshot, and the schema Spark is
told about."""

import pytest

from bkcore.table.commands import KeyValue, fold_key
from bkspark.table_rows import TableValueError, table_arrow_schema, table_batch, table_schema_ddl

COUNTER = KeyValue(fold_key(b"hits"), (-7).to_bytes(8, "big", signed=True), 3, 9, 4, is_number=True)
PLAIN = KeyValue(fold_key(b"user-1", b"name"), b"ada", 5, 5, 1, expire_at_ms=1_700_000_000_000)


def test_rows_carry_the_key_s_parts_its_value_and_the_snapshot_s_revision():
    batch = table_batch("ns/t", 2, 12, [COUNTER, PLAIN], "binary")
    assert batch.schema == table_arrow_schema("binary")
    assert batch.to_pylist() == [
        {"table": "ns/t", "range_id": 2, "revision": 12, "pkey": b"hits", "key": b"", "value": COUNTER.value,
         "number": -7, "create_revision": 3, "mod_revision": 9, "version": 4, "expire_at_ms": None},
        {"table": "ns/t", "range_id": 2, "revision": 12, "pkey": b"user-1", "key": b"name", "value": b"ada",
         "number": None, "create_revision": 5, "mod_revision": 5, "version": 1, "expire_at_ms": 1_700_000_000_000},
    ]


def test_text_formats_add_value_text_null_for_counters():
    batch = table_batch("ns/t", 0, 1, [COUNTER, PLAIN], "utf8")
    assert batch.column("value_text").to_pylist() == [None, "ada"]
    assert table_schema_ddl("json").endswith(", expire_at_ms bigint, value_text string")
    assert table_schema_ddl("binary") == (
        "table string, range_id int, revision bigint, pkey binary, key binary, value binary, number bigint, "
        "create_revision bigint, mod_revision bigint, version bigint, expire_at_ms bigint")


def test_a_value_that_is_not_utf8_is_named_with_the_fix():
    bad = KeyValue(fold_key(b"p", b"blob"), b"\xff\xfe", 1, 1, 1)
    with pytest.raises(TableValueError, match=r"table ns/t: the value of key b'blob' \(pkey b'p'\) is not UTF-8 "
                                              r"text, so recordFormat=json cannot.*recordFormat=binary"):
        table_batch("ns/t", 0, 1, [PLAIN, bad], "json")
    assert table_batch("ns/t", 0, 1, [PLAIN, bad], "binary").num_rows == 2


def test_an_empty_batch_has_the_schema():
    batch = table_batch("ns/t", 0, 0, [], "utf8")
    assert (batch.num_rows, batch.schema) == (0, table_arrow_schema("utf8"))
