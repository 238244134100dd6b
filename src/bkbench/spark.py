"""`bk bench spark`: the Spark data source on a local 3-bookie cluster, beside Parquet, one run.

    write_stream    N rows of --size bytes written with df.write.format("bookkeeper") into a
                    stream, exactly once (rows/s)
    python_sink_ceiling
                    the same rows written to a sink that drops each Arrow batch
                    (bkbench.spark_ceiling): what PySpark's Python writer path alone allows
    parquet_write   the same DataFrame written as Parquet with Spark's defaults. Every row holds
                    the same payload, so dictionary encoding stores it once: bytes_on_disk says
                    how little it wrote. parquet_write_uncompressed writes every byte (no
                    dictionary, no compression), as the stream does.
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

Every write and read runs twice: *_first is the first run (cold code paths in the JVM and the
Python workers; the first stream write goes to a stream of its own), the plain figure the
second, the steady state that the ratios and the issue's targets are about.
Every figure gives the CPU per row of this driver (client_), of Spark's JVM and Python workers
(spark_) and of the bookies (bookies_), and the machine's busy fraction: on a machine where the
CPUs are all busy, that is where each row's time goes.

Spark runs local[2]; the ratios are against Parquet and the no-op source and sink in the same
run. Needs the spark extra.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time

from bkbench import announce
from bkbench.cpu_usage import CpuMeter, descendant_pids


def _timed(action) -> tuple[object, float]:
    started = time.perf_counter()
    result = action()
    return result, time.perf_counter() - started


def _rate(count: int, seconds: float, cpu: CpuMeter | None = None) -> dict:
    rate = {"count": count, "seconds": round(seconds, 3), "per_second": round(count / seconds) if seconds else 0}
    if cpu is not None:
        rate.update(cpu.per_operation(count, "row"))
    return rate


def _ratio(figure: dict, baseline: dict) -> float:
    return round(figure["per_second"] / baseline["per_second"], 3)


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


def _folder_size(path: str) -> int:
    return sum(os.path.getsize(os.path.join(folder, name)) for folder, _, names in os.walk(path) for name in names)


def _measure(spark, cluster, args, ledger_ids: list[int], work_dir: str) -> dict:
    from pyspark.sql import functions as F
    from bkbench.spark_ceiling import CeilingDataSource
    from bkspark.options import MAX_ENTRIES_PER_PARTITION
    uri = cluster.metastore_uri
    spark.dataSource.register(CeilingDataSource)
    rows = (spark.range(0, args.entries, numPartitions=2)
            .select(F.expr(f"cast(repeat('x', {args.size}) as binary)").alias("payload")))
    cluster_pids = {child.process.pid for child in [*cluster.bookies, *cluster.metastore_nodes]}

    def meter() -> CpuMeter:
        """CPU from now: this driver ("client"), Spark (its JVM and Python workers), the bookies."""
        return CpuMeter({"spark": lambda: descendant_pids(os.getpid(), excluding=cluster_pids),
                         "bookies": [bookie.process.pid for bookie in cluster.bookies]})

    def measured(count: int, action) -> dict:
        cpu = meter()
        _, seconds = _timed(action)
        return _rate(count, seconds, cpu)

    def source():        # a new reader each time: a DataFrameReader keeps the options it is given
        return spark.read.format("bookkeeper").option("metastore", uri)

    parquet_path = os.path.join(work_dir, "parquet")
    plain_path = os.path.join(work_dir, "parquet-plain")
    def write_stream(name: str) -> None:
        rows.write.format("bookkeeper").option("metastore", uri).option("stream", f"bench/{name}").mode("append").save()

    def write_parquet(path: str, **options: str) -> None:
        rows.write.options(**options).parquet(path)

    # Writes run twice too, the first into a stream and files of their own.
    announce("Spark writes (the no-op sink, the stream, Parquet, Parquet uncompressed)")
    sink_ceiling_first = measured(args.entries, lambda: rows.write.format("bookkeeper-ceiling").mode("append").save())
    sink_ceiling = measured(args.entries, lambda: rows.write.format("bookkeeper-ceiling").mode("append").save())
    write_first = measured(args.entries, lambda: write_stream("spark-first"))
    write = measured(args.entries, lambda: write_stream("spark"))
    parquet_write_first = measured(args.entries, lambda: write_parquet(parquet_path + "-first"))
    parquet_write = measured(args.entries, lambda: write_parquet(parquet_path))
    plain = {"compression": "none", "parquet.enable.dictionary": "false"}
    parquet_plain_write = measured(args.entries, lambda: write_parquet(plain_path, **plain))

    def read_ledgers() -> int:
        return source().option("ledgers", ",".join(map(str, ledger_ids))).option("password", "bench").load().count()

    def read_stream() -> int:
        return source().option("stream", "bench/spark").load().count()

    def read_parquet() -> int:
        return spark.read.parquet(parquet_path).select(F.sum(F.length("payload"))).collect()[0][0]

    def read_ceiling() -> int:
        return (spark.read.format("bookkeeper-ceiling").option("rows", str(ledger_count))
                .option("partitions", str(partition_count)).option("size", str(args.size)).load().count())

    # Each read runs twice: the first pays for cold JIT code paths and Python workers; the
    # second is the steady state that the ratios and the target are about.
    per_ledger = -(-args.entries // args.ledgers)
    ledger_count = len(ledger_ids) * per_ledger
    partition_count = len(ledger_ids) * -(-per_ledger // MAX_ENTRIES_PER_PARTITION)    # as the real read plans
    announce("Spark reads (the no-op source, the ledgers, the stream, Parquet)")
    ceiling_first = measured(ledger_count, read_ceiling)
    ceiling = measured(ledger_count, read_ceiling)
    assert read_ledgers() == ledger_count and read_stream() == args.entries
    read_first = measured(ledger_count, read_ledgers)
    read = measured(ledger_count, read_ledgers)
    read_stream_first = measured(args.entries, read_stream)
    stream = measured(args.entries, read_stream)
    assert read_parquet() == args.entries * args.size
    parquet_read_first = measured(args.entries, read_parquet)
    parquet_read = measured(args.entries, read_parquet)
    return {
        "write_stream_first": write_first, "write_stream": write,
        "python_sink_ceiling_first": sink_ceiling_first, "python_sink_ceiling": sink_ceiling,
        "parquet_write_first": parquet_write_first,
        "parquet_write": {**parquet_write, "bytes_on_disk": _folder_size(parquet_path)},
        "parquet_write_uncompressed": {**parquet_plain_write, "bytes_on_disk": _folder_size(plain_path)},
        "read_ledgers_first": read_first, "read_ledgers": read,
        "read_stream_first": read_stream_first, "read_stream": stream,
        "parquet_read_first": parquet_read_first, "parquet_read": parquet_read,
        "python_source_ceiling_first": ceiling_first, "python_source_ceiling": ceiling,
        "write_vs_parquet": _ratio(write, parquet_write),
        "write_vs_parquet_uncompressed": _ratio(write, parquet_plain_write),
        "write_vs_python_sink_ceiling": _ratio(write, sink_ceiling),
        "write_target_vs_parquet": 0.5,
        "read_vs_parquet": _ratio(read, parquet_read),
        "read_vs_python_source_ceiling": _ratio(read, ceiling),
        "read_stream_vs_python_source_ceiling": _ratio(stream, ceiling),
        "read_target_vs_python_source_ceiling": 0.9,
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
            for name in ("spark-first", "spark"):
                bk.run(lambda client, name=name: client.streams.create_stream("bench", name))
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
