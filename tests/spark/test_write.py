"""Exactly-once writes into a stream (df.write and writeStream with format("bookkeeper"))
against a real local cluster: each task writes a ledger, the driver attaches them in one
decision, a failed task leaves nothing behind, a batch Spark replays after a driver restart
is not applied twice, and compression="lz4" writes entries that are compressed and read back
as written."""

import os

import msgpack
import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType

from bkcore.stream.entry_format import unpack_entry
from bkcore.stream.writer import STREAM_LEDGER_PASSWORD
from spark_helpers import append, new_stream


def read_back(spark, cluster, stream):
    return (spark.read.format("bookkeeper").option("metastore", cluster.metastore_uri).option("stream", stream)
            .option("recordFormat", "utf8").load())


def test_a_batch_write_appends_every_row_once_with_txids_in_partition_order(spark, cluster, bk):
    stream = new_stream(bk)
    append(bk, stream, [b"before"])
    df = spark.range(0, 5000, numPartitions=4).select(F.format_string("row-%d", "id").alias("payload"))
    df.write.format("bookkeeper").option("metastore", cluster.metastore_uri).option("stream", stream) \
        .mode("append").save()
    rows = read_back(spark, cluster, stream).orderBy("position").collect()
    assert [r.value for r in rows] == ["before"] + [f"row-{i}" for i in range(5000)]
    txids = [r.txid for r in rows]
    assert txids == sorted(txids) and len(set(txids)) == len(txids)
    assert len({r.segment for r in rows}) == 5                    # the writer's segment + one per task


def test_a_write_with_lz4_compression_stores_compressed_entries_that_read_back_as_written(spark, cluster, bk):
    stream = new_stream(bk)
    df = spark.range(0, 3000, numPartitions=2).select(
        F.concat(F.format_string("row-%d-", "id"), F.expr("repeat('payload ', 100)")).alias("payload"))
    df.write.format("bookkeeper").option("metastore", cluster.metastore_uri).option("stream", stream) \
        .option("compression", "lz4").mode("append").save()
    rows = read_back(spark, cluster, stream).orderBy("position").collect()
    assert [r.value for r in rows] == [f"row-{i}-" + "payload " * 100 for i in range(3000)]

    namespace, name = stream.split("/")

    async def entries(client):
        found = []
        for segment in await client.streams.catalog.segments(namespace, name):
            ledger = await client.open_ledger(segment.ledger_id, password=STREAM_LEDGER_PASSWORD)
            found += await ledger.read(0, segment.last_entry_id)
        return found
    payloads = bk.run(entries)
    assert len(payloads) >= 2 and all(msgpack.unpackb(p)[1] >> 1 & 3 == 1 for p in payloads)   # LZ4's code
    plain_bytes = sum(len(record.payload) for p in payloads for record in unpack_entry(p).records)
    assert sum(map(len, payloads)) * 10 < plain_bytes


def test_a_task_that_fails_once_leaves_no_trace(spark, cluster, bk):
    stream = new_stream(bk)

    @F.udf(BinaryType())
    def payload_failing_first_attempt(value):
        from pyspark import TaskContext
        context = TaskContext.get()
        if context.partitionId() == 1 and context.attemptNumber() == 0 and value == 900:
            raise RuntimeError("injected task failure")
        return b"v%d" % value

    df = spark.range(0, 1200, numPartitions=2).select(payload_failing_first_attempt("id").alias("payload"),
                                                      F.col("id").alias("txid"))
    df.write.format("bookkeeper").option("metastore", cluster.metastore_uri).option("stream", stream) \
        .mode("append").save()
    rows = read_back(spark, cluster, stream).collect()
    assert sorted(r.txid for r in rows) == list(range(1200))       # each row once
    namespace, name = stream.split("/")
    info = bk.run(lambda client: client.streams.stream_info(namespace, name))
    attached = {s["ledger_id"] for s in info["segments"]}
    mine = [ledger_id for ledger_id in bk.list_ledgers()
            if dict(bk.run(lambda client, i=ledger_id: client.ledger_metadata(i)).custom_metadata).get("stream")
            == stream.encode()]
    assert set(mine) == attached                                    # the failed attempt's ledger is gone


def test_a_streaming_batch_replayed_after_a_driver_restart_is_not_applied_twice(spark, cluster, bk, tmp_path):
    source, target = new_stream(bk), new_stream(bk)
    append(bk, source, [(i, b"e%d" % i) for i in range(300)], segments=3)
    checkpoint = tmp_path / "checkpoint"

    def run():
        query = (spark.readStream.format("bookkeeper").option("metastore", cluster.metastore_uri)
                 .option("stream", source).option("maxEntriesPerTrigger", 1).load()
                 .select("payload", "txid")
                 .writeStream.format("bookkeeper").option("metastore", cluster.metastore_uri)
                 .option("stream", target).option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)

    run()
    assert sorted(r.txid for r in read_back(spark, cluster, target).collect()) == list(range(300))
    # The driver died after the sink committed its last batch but before Spark logged the commit:
    # on restart Spark runs that batch again with the same id.
    commits = sorted(os.listdir(checkpoint / "commits"), key=lambda n: int(n) if n.isdigit() else -1)
    last = [n for n in commits if n.isdigit()][-1]
    os.remove(checkpoint / "commits" / last)
    if os.path.exists(checkpoint / "commits" / f".{last}.crc"):
        os.remove(checkpoint / "commits" / f".{last}.crc")
    run()
    assert sorted(r.txid for r in read_back(spark, cluster, target).collect()) == list(range(300))


def test_write_errors_name_the_fix(spark, cluster, bk):
    stream = new_stream(bk)
    writer = spark.range(3).write.format("bookkeeper").option("metastore", cluster.metastore_uri) \
        .option("stream", stream)
    with pytest.raises(Exception, match='needs a column "payload"'):
        writer.mode("append").save()
    df = spark.range(3).select(F.col("id").cast("string").alias("payload"))
    with pytest.raises(Exception, match="append-only"):
        df.write.format("bookkeeper").option("metastore", cluster.metastore_uri).option("stream", stream) \
            .mode("overwrite").save()
