"""The filter pushdown of batch reads without a JVM: which comparisons on txid and position
FilteringBatchReader takes into its plan, the bounds they set, and which it hands back to Spark.
(pyspark's filter classes are plain Python; no session is started.)"""

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed (pip install '.[spark]')")

from pyspark.sql.datasource import (  # noqa: E402
    EqualTo, GreaterThan, GreaterThanOrEqual, In, IsNotNull, LessThan, LessThanOrEqual,
)

from bkcore.stream.records import DLSN  # noqa: E402
from bkspark.options import parse_options  # noqa: E402
from bkspark.planning import TXID_MAX  # noqa: E402
from bkspark.source import FilteringBatchReader  # noqa: E402

TXID, POSITION = ("txid",), ("position",)
P_3_10_2 = "0000000003:000000000010:00002"            # DLSN 3:10:2 as the position column has it


def reader(**options) -> FilteringBatchReader:
    return FilteringBatchReader(parse_options({"metastore": "raft://127.0.0.1:2281", "stream": "ns/s",
                                               "filterPushdown": "true", **options}))


def push(batch_reader, *filters) -> list:
    """The filters handed back to Spark."""
    return list(batch_reader.pushFilters(list(filters)))


def bounds(batch_reader) -> tuple:
    return batch_reader.txid_min, batch_reader.txid_max, batch_reader.position_min, batch_reader.position_end


@pytest.mark.parametrize("filters, txid_min, txid_max", [
    ((EqualTo(TXID, 7),), 7, 7),
    ((GreaterThan(TXID, 7),), 8, TXID_MAX),
    ((GreaterThanOrEqual(TXID, 7),), 7, TXID_MAX),
    ((LessThan(TXID, 7),), 0, 6),
    ((LessThanOrEqual(TXID, 7),), 0, 7),
    ((GreaterThanOrEqual(TXID, 100), LessThan(TXID, 200), GreaterThan(TXID, 50)), 100, 199),
])
def test_txid_comparisons_narrow_to_an_inclusive_range(filters, txid_min, txid_max):
    batch_reader = reader()
    assert push(batch_reader, *filters) == []
    assert bounds(batch_reader) == (txid_min, txid_max, None, None)


def test_position_comparisons_in_the_column_s_padded_form_become_position_bounds():
    batch_reader = reader()
    assert push(batch_reader, GreaterThanOrEqual(POSITION, P_3_10_2)) == []
    assert bounds(batch_reader) == (0, TXID_MAX, DLSN(3, 10, 2), None)
    assert push(batch_reader, GreaterThan(POSITION, P_3_10_2), LessThan(POSITION, "0000000004:000000000000:00000")) \
        == []
    assert bounds(batch_reader) == (0, TXID_MAX, DLSN(3, 10, 3), DLSN(4, 0, 0))
    assert push(batch_reader, EqualTo(POSITION, P_3_10_2)) == []
    assert bounds(batch_reader) == (0, TXID_MAX, DLSN(3, 10, 2), DLSN(3, 10, 3))
    assert push(batch_reader, LessThanOrEqual(POSITION, P_3_10_2)) == []
    assert bounds(batch_reader) == (0, TXID_MAX, None, DLSN(3, 10, 3))


def test_what_cannot_be_pushed_goes_back_to_spark_and_sets_no_bound():
    batch_reader = reader()
    kept = [
        GreaterThan(POSITION, "3:10:2"),        # not the padded form: its string order is not position order
        EqualTo(POSITION, "later"),
        GreaterThan(TXID, 7.5),
        In(TXID, (1, 2)),
        IsNotNull(TXID),
        EqualTo(("payload",), b"x"),
    ]
    assert push(batch_reader, *kept) == kept
    assert bounds(batch_reader) == (0, TXID_MAX, None, None)


def test_each_query_s_filters_replace_the_last_one_s():
    batch_reader = reader()
    push(batch_reader, GreaterThan(TXID, 7), LessThan(POSITION, P_3_10_2))
    assert push(batch_reader, LessThan(TXID, 3)) == []
    assert bounds(batch_reader) == (0, 2, None, None)


def test_reads_of_raw_ledgers_push_nothing():
    batch_reader = FilteringBatchReader(parse_options({"metastore": "raft://127.0.0.1:2281", "ledgers": "1,2"}))
    assert push(batch_reader, GreaterThan(TXID, 7)) == [GreaterThan(TXID, 7)]
    assert bounds(batch_reader) == (0, TXID_MAX, None, None)
