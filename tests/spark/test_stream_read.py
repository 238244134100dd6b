"""Structured streaming reads of a stream (spark.readStream.format("bookkeeper")) against a
real local cluster: Trigger.AvailableNow with admission control, restarts from the checkpoint
without duplicates or gaps, the cursor that commit() moves, and truncated data with
failOnDataLoss both ways."""

import pytest

from bkcore.stream.records import DLSN
from spark_helpers import append, new_stream


def run_available_now(spark, cluster, stream, checkpoint, output, **options):
    """One run of a query to a Parquet sink with Trigger.AvailableNow; returns its batch count."""
    reader = (spark.readStream.format("bookkeeper").option("metastore", cluster.metastore_uri)
              .option("stream", stream).option("recordFormat", "utf8"))
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (reader.load().select("txid", "value", "position").writeStream.format("parquet")
             .option("path", str(output)).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination(120)
    except Exception as exc:        # StreamingQueryException: its message carries the source's
        raise RuntimeError(str(exc)) from None
    return len([p for p in query.recentProgress if p["numInputRows"] > 0])


def txids_in(spark, output) -> list[int]:
    return sorted(r.txid for r in spark.read.parquet(str(output)).collect())


def records(first, count, size=200):
    return [(txid, (f"r{txid}-".encode() + b"y" * size)) for txid in range(first, first + count)]


def test_available_now_with_admission_control_and_restarts_reads_each_record_once(spark, cluster, bk, tmp_path):
    stream = new_stream(bk)
    append(bk, stream, records(0, 3000, size=1000), segments=3)       # a few entries per segment
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "out"
    batches = run_available_now(spark, cluster, stream, checkpoint, output, maxEntriesPerTrigger=2,
                                cursor="spark-test")
    assert batches >= 3                                                 # the limit split the backlog
    assert txids_in(spark, output) == list(range(3000))
    namespace, name = stream.split("/")
    cursor = bk.run(lambda client: client.streams.cursor_position(namespace, name, "spark-test"))
    # Spark commits a batch's end to the source when it plans the next batch, so the cursor
    # stands at the end of the second to last batch.
    assert DLSN(2, 0, 0) <= cursor < DLSN(4, 0, 0)

    append(bk, stream, records(3000, 500))                              # a new writer: segment 4
    run_available_now(spark, cluster, stream, checkpoint, output, cursor="spark-test")
    assert txids_in(spark, output) == list(range(3500))                 # no duplicates, no gaps
    cursor = bk.run(lambda client: client.streams.cursor_position(namespace, name, "spark-test"))
    assert cursor >= DLSN(4, 0, -1)                                     # all of segments 1-3 consumed
    run_available_now(spark, cluster, stream, checkpoint, output)      # nothing new: nothing read
    assert txids_in(spark, output) == list(range(3500))


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_truncated_data_fails_the_query_naming_the_ledgers_or_is_skipped(spark, cluster, bk, tmp_path,
                                                                         fail_on_data_loss):
    stream = new_stream(bk)
    namespace, name = stream.split("/")
    append(bk, stream, records(0, 100))
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "out"
    option = {"failOnDataLoss": str(fail_on_data_loss).lower()}
    run_available_now(spark, cluster, stream, checkpoint, output, **option)
    append(bk, stream, records(100, 100))                               # segment 2, never read
    append(bk, stream, records(200, 100))                               # segment 3
    info = bk.run(lambda client: client.streams.stream_info(namespace, name))
    lost_ledger = info["segments"][1]["ledger_id"]
    bk.run(lambda client: client.streams.truncate(namespace, name, DLSN(3, 0, 0)))
    if fail_on_data_loss:
        with pytest.raises(RuntimeError, match=f"lost ledgers: .*{lost_ledger}"):
            run_available_now(spark, cluster, stream, checkpoint, output, **option)
        assert txids_in(spark, output) == list(range(100))
    else:
        run_available_now(spark, cluster, stream, checkpoint, output, **option)
        assert txids_in(spark, output) == list(range(100)) + list(range(200, 300))
