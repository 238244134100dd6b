"""Batch reads of streams and raw ledgers through spark.read.format("bookkeeper"), against a
real local cluster."""

import json

import pytest

from spark_helpers import append, new_stream


def read(spark, cluster, stream, **options):
    reader = spark.read.format("bookkeeper").option("metastore", cluster.metastore_uri).option("stream", stream)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_a_batch_read_equals_what_was_written_across_segments_and_partitions(spark, cluster, bk):
    stream = new_stream(bk)
    payloads = [f"event-{i}-".encode() + b"x" * 1000 for i in range(3000)]   # several entries a segment
    append(bk, stream, payloads, segments=3)
    df = read(spark, cluster, stream, maxEntriesPerPartition=1)
    assert df.rdd.getNumPartitions() > 3                 # segments split
    rows = df.orderBy("position").collect()
    assert [bytes(r.payload) for r in rows] == payloads
    assert [r.txid for r in rows] == list(range(3000))
    assert sorted({r.segment for r in rows}) == [1, 2, 3]
    assert all(r.stream == stream for r in rows)
    assert df.columns == ["stream", "segment", "ledger_id", "entry_id", "slot", "txid", "position", "payload"]


def test_a_stream_with_nothing_to_read_is_an_empty_dataframe(spark, cluster, bk):
    stream = new_stream(bk)
    assert read(spark, cluster, stream).count() == 0
    append(bk, stream, [b"only"], segments=1)
    assert read(spark, cluster, stream, startingOffsets="latest").count() == 0


def test_utf8_records_get_a_value_column_and_offsets_bound_the_read(spark, cluster, bk):
    stream = new_stream(bk)
    append(bk, stream, [json.dumps({"n": i}).encode() for i in range(100)], segments=2)
    df = read(spark, cluster, stream, recordFormat="json", startingOffsets='{"txid": 10}',
              endingOffsets='{"txid": 90}')
    values = [json.loads(r.value)["n"] for r in df.orderBy("position").collect()]
    assert values == list(range(10, 90))
    first = read(spark, cluster, stream).orderBy("position").collect()[5]
    from_position = read(spark, cluster, stream, startingOffsets=json.dumps({"position": first.position}))
    assert from_position.count() == 95


def test_txid_and_position_filters_are_pushed_down_and_exact(spark, cluster, bk):
    stream = new_stream(bk)
    append(bk, stream, [(1000 + i, b"x%d" % i) for i in range(500)], segments=2)
    positions = sorted(r.position for r in read(spark, cluster, stream).collect())
    # A new DataFrame per filtered query: PySpark 4.3 reuses a DataFrame's pushed-down plan for
    # a later action on the same DataFrame (see docs/spark.md).
    df = read(spark, cluster, stream, filterPushdown="true")
    picked = df.filter((df.txid >= 1100) & (df.txid < 1200))
    assert sorted(r.txid for r in picked.collect()) == list(range(1100, 1200))
    assert "Filter" not in picked._jdf.queryExecution().executedPlan().toString().split("BatchScan")[0] \
        .replace("Filter isnotnull", "")
    df = read(spark, cluster, stream, filterPushdown="true")
    later = df.filter(df.position >= positions[250])
    assert sorted(r.position for r in later.collect()) == positions[250:]
    df = read(spark, cluster, stream, filterPushdown="true")
    assert df.filter(df.position == positions[7]).collect()[0].txid == 1007


def test_raw_ledgers_are_read_entry_by_entry(spark, cluster, bk):
    ledger_ids = []
    for count in (10, 25):
        ledger = bk.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=b"pw")
        ledger.add_many([b"L%d-%d" % (count, i) for i in range(count)])
        ledger.close()
        ledger_ids.append(ledger.ledger_id)
    df = (spark.read.format("bookkeeper").option("metastore", cluster.metastore_uri)
          .option("ledgers", ",".join(map(str, ledger_ids))).option("password", "pw").load())
    rows = df.collect()
    assert len(rows) == 35
    assert {(r.ledger_id, r.entry_id): bytes(r.payload) for r in rows}[(ledger_ids[1], 24)] == b"L25-24"


def test_errors_name_the_option_and_the_fix(spark, cluster):
    with pytest.raises(Exception, match='option "metastore" is missing'):
        spark.read.format("bookkeeper").option("stream", "a/b").load().collect()
    with pytest.raises(Exception, match="startingOffsets"):
        read(spark, cluster, "spark/x", startingOffsets="{nope").collect()
    with pytest.raises(Exception, match="does not exist"):
        read(spark, cluster, "spark/no-such-stream").collect()
