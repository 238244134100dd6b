"""`bk bench spark`: the Spark data source on a local 3-bookie cluster, beside Parquet, one run.

    write           N rows of --size bytes written with df.write.format("bookkeeper") into a
                    stream (rows/s), and the same DataFrame written as Parquet
    read_ledgers    N entries of --size bytes (written with the library, E3 Qw3 Qa2, so that every
                    bookie holds every entry and reads are batch reads) read with
                    spark.read.format("bookkeeper").option("ledgers", ...) into a count
    read_stream     the stream the write made, read back into a count
    parquet_read    the Parquet files read back, forcing every payload to be read
                    (sum(length(payload)); a bare count would read only Parquet's footers)

    python_source_ceiling
                    the same rows (schema, count, payload size, partitions) made in memory by
                    a data source that reads nothing (bkbench.spark_ceiling): what PySpark's
                    Python data source path alone allows on this machine

The reads of ledgers, of Parquet and of the ceiling run twice: *_first is the first run (cold code paths in
the JVM and the Python workers), the plain figure the second, the steady state that the ratio
and the issue's target are about.

Spark runs local[2]; the ratios are against Parquet in the same run. Needs the spark extra.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time

from bkbench import announce


def _timed(action) -> tuple[object, float]:
    started = time.perf_counter()
    result = action()
    return result, time.perf_counter() - started


def _rate(count: int, seconds: float) -> dict:
    return {"count": count, "seconds": round(seconds, 3), "per_second": round(count / seconds) if seconds else 0}


def _write_ledgers(bk, args) -> list[int]:
    payload = os.urandom(args.size)
    ledger_ids, per_ledger = [], -(-args.entries // args.ledgers)
    for _ in range(args.ledgers):
        ledger = bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"bench")
        for first in range(0, per_ledger, 5000):
            ledger.add_many([payload] * min(5000, per_ledger - first))
        ledger.close()
        ledger_ids.append(ledger.ledger_id)
    return ledger_ids


def _spark_session(work_dir: str):
    from pyspark.sql import SparkSession
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (SparkSession.builder.master("local[2]").appName("bk-bench-spark")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.memory", "2g")
               .config("spark.sql.warehouse.dir", os.path.join(work_dir, "warehouse")).getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    return session


def _measure(spark, cluster, args, ledger_ids: list[int], work_dir: str) -> dict:
    from pyspark.sql import functions as F
    uri = cluster.metastore_uri
    rows = (spark.range(0, args.entries, numPartitions=2)
            .select(F.expr(f"cast(repeat('x', {args.size}) as binary)").alias("payload")))

    def source():        # a new reader each time: a DataFrameReader keeps the options it is given
        return spark.read.format("bookkeeper").option("metastore", uri)
    announce("Spark writes (the stream, then Parquet)")
    _, write_s = _timed(lambda: rows.write.format("bookkeeper").option("metastore", uri)
                        .option("stream", "bench/spark").mode("append").save())
    parquet_path = os.path.join(work_dir, "parquet")
    _, parquet_write_s = _timed(lambda: rows.write.parquet(parquet_path))

    def read_ledgers() -> int:
        return source().option("ledgers", ",".join(map(str, ledger_ids))).option("password", "bench").load().count()

    def read_stream() -> int:
        return source().option("stream", "bench/spark").load().count()

    def read_parquet() -> int:
        return spark.read.parquet(parquet_path).select(F.sum(F.length("payload"))).collect()[0][0]

    def read_ceiling() -> int:
        return (spark.read.format("bookkeeper-ceiling").option("rows", str(len(ledger_ids) * per_ledger))
                .option("partitions", str(partition_count)).option("size", str(args.size)).load().count())

    # Each read runs twice: the first pays for cold JIT code paths and Python workers; the
    # second is the steady state that the ratios and the target are about.
    from bkbench.spark_ceiling import CeilingDataSource
    from bkspark.options import MAX_ENTRIES_PER_PARTITION
    spark.dataSource.register(CeilingDataSource)
    per_ledger = -(-args.entries // args.ledgers)
    partition_count = len(ledger_ids) * -(-per_ledger // MAX_ENTRIES_PER_PARTITION)    # as the real read plans
    announce("Spark reads (the no-op source, the ledgers, the stream, Parquet)")
    _, read_ceiling_first_s = _timed(read_ceiling)
    _, read_ceiling_s = _timed(read_ceiling)
    ledger_count, read_ledgers_first_s = _timed(read_ledgers)
    _, read_ledgers_s = _timed(read_ledgers)
    stream_count, read_stream_s = _timed(read_stream)
    parquet_bytes, parquet_read_first_s = _timed(read_parquet)
    _, parquet_read_s = _timed(read_parquet)
    assert ledger_count == len(ledger_ids) * -(-args.entries // args.ledgers) and stream_count == args.entries
    assert parquet_bytes == args.entries * args.size
    write, read = _rate(args.entries, write_s), _rate(ledger_count, read_ledgers_s)
    ceiling = _rate(ledger_count, read_ceiling_s)
    parquet_write, parquet_read = _rate(args.entries, parquet_write_s), _rate(args.entries, parquet_read_s)
    return {
        "write_stream": write, "read_ledgers_first": _rate(ledger_count, read_ledgers_first_s),
        "read_ledgers": read, "read_stream": _rate(stream_count, read_stream_s),
        "parquet_write": parquet_write, "parquet_read_first": _rate(args.entries, parquet_read_first_s),
        "parquet_read": parquet_read,
        "python_source_ceiling_first": _rate(ledger_count, read_ceiling_first_s),
        "python_source_ceiling": ceiling,
        "read_vs_parquet": round(read["per_second"] / parquet_read["per_second"], 3),
        "read_vs_python_source_ceiling": round(read["per_second"] / ceiling["per_second"], 3),
        "write_vs_parquet": round(write["per_second"] / parquet_write["per_second"], 3),
        "read_target_entries_per_second": 200_000,
        "read_meets_target": read["per_second"] >= 200_000,
    }


def bench_spark(args) -> int:
    from bkclient.sync import connect
    from bklocal.standalone import StandaloneCluster
    from bkcore.stream.segments import StreamSettings
    root = tempfile.mkdtemp(dir=args.dir, prefix="bench-spark-")
    cluster = StandaloneCluster.on_free_ports(os.path.join(root, "cluster"), bookie_count=3, metastore_count=1)
    spark = None
    try:
        announce("starting the cluster")
        cluster.start(log=lambda line: None)
        announce("writing the ledgers")
        settings = StreamSettings(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
        with connect(cluster.metastore_uri) as bk:
            bk.run(lambda client: client.streams.create_namespace("bench", settings))
            bk.run(lambda client: client.streams.create_stream("bench", "spark"))
            ledger_ids = _write_ledgers(bk, args)
        announce("starting Spark")
        spark = _spark_session(root)
        results = _measure(spark, cluster, args, ledger_ids, root)
        print(json.dumps({"benchmark": "spark", "master": "local[2]", "bookies": 3, "ledger_quorums": "E3 Qw3 Qa2", "entries": args.entries,
                          "entry_size": args.size, **results}, indent=2))
    finally:
        if spark is not None:
            spark.stop()
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0
