"""`bk bench spark`: the Spark data source on a local 3-bookie cluster, beside Parquet, one run.

    write_stream    N rows of --size bytes written with df.write.format("bookkeeper") into a
                    stream, exactly once (rows/s)
    write_stream_lz4
                    the same with option compression lz4 (each entry's records LZ4-compressed,
                    DistributedLog's compressionType), into a stream of its own; bytes_written is
                    what its entries hold. With --payload repeated the rows all hold one
                    payload, which compresses as far as Parquet's dictionary takes it: the
                    figure says what compression buys such rows; --payload random shows rows
                    that do not compress
    python_sink_ceiling
                    the same rows written to a sink that drops each Arrow batch
                    (bkbench.spark_ceiling): what PySpark's Python writer path alone allows
    parquet_write   the same DataFrame written as Parquet with Spark's defaults. With --payload
                    repeated (the default) every row holds the same payload, so dictionary
                    encoding stores it once: bytes_on_disk says how little it wrote. With
                    --payload random each row holds random letters and digits (Spark's
                    randstr, made anew by each write), which neither Parquet nor LZ4 shrinks
                    much. parquet_write_uncompressed writes every byte (no dictionary, no
                    compression), as the stream does.
    read_ledgers    N entries of --size bytes (written with the library, E3 Qw3 Qa2, so that every
                    bookie holds every entry and reads are batch reads) read with
                    spark.read.format("bookkeeper").option("ledgers", ...) into a count
    read_stream     the stream the write made, read back into a count (read_stream_lz4: the
                    compressed one)
    parquet_read    the Parquet files read back, forcing every payload to be read
                    (sum(length(payload)); a bare count would read only Parquet's footers)
    python_source_ceiling, python_source_ceiling_stream
                    the rows of read_ledgers and of read_stream (schema, count, payload size,
                    partitions, Arrow batch sizes) made in memory by a data source that reads
                    nothing (bkbench.spark_ceiling): what PySpark's Python data source path
                    alone allows on this machine for each
    python_source_tcp_peer
                    the rows of python_source_ceiling (partitions, batches) received over TCP
                    from a server that stores nothing (bkbench.tcp_rows, a process of its own,
                    as a bookie is; its CPU is row_server_): the least any source that reads
                    over the network must spend here, beside the bookkeeper source's
                    (read_vs_tcp_peer) and the no-op source's (tcp_peer_vs_python_source_ceiling)
    python_source_tcp_entries_peer
                    the same rows received from that server as packed BookKeeper entries (a
                    header and a CRC32C digest before each payload), every entry checked and
                    unpacked with the ledger client's own code: the least a source that reads
                    BookKeeper's entries must spend here, with no bookie, index or framing in
                    the way (read_vs_tcp_entries_peer, tcp_entries_peer_vs_python_source_ceiling)

Every write and read runs twice: *_first is the first run (cold code paths in the JVM and the
Python workers; the first stream write goes to a stream of its own), the plain figure the
second, the steady state that the ratios and the issue's targets are about.
Every figure gives the CPU per row of this driver (client_), of Spark's JVM and Python workers
(spark_) and of the bookies (bookies_), and the machine's busy fraction: on a machine where the
CPUs are all busy, that is where each row's time goes.

Spark runs local[2], sharing the machine's CPUs with the cluster; with --split-cpus it runs
local[N] on the first half of the CPUs (N of them) and the bookies and metastore on the other
half, so what the source and sink cost Spark itself is measured apart from the CPU the bookies
take (on a 2-CPU machine: Spark on one, the cluster on the other). The ratios are against
Parquet and the no-op source and sink in the same run. Needs the spark extra.
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
from bkbench.tcp_rows import RowServer


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


def _spark_session(work_dir: str, threads: int):
    from pyspark.sql import SparkSession
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (SparkSession.builder.master(f"local[{threads}]").appName("bk-bench-spark")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.memory", "2g")
               .config("spark.sql.warehouse.dir", os.path.join(work_dir, "warehouse")).getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    return session


def _split_cpus(cluster) -> dict:
    """Spark on the first half of the CPUs, the cluster's processes (every thread) on the rest:
    the JVM and Python workers Spark starts from this process inherit its CPUs."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("bk bench spark --split-cpus: needs at least 2 CPUs")
    spark_cpus, cluster_cpus = set(cpus[:len(cpus) // 2]), set(cpus[len(cpus) // 2:])
    for child in [*cluster.bookies, *cluster.metastore_nodes]:
        pin_threads(child.process.pid, cluster_cpus)
    pin_threads(os.getpid(), spark_cpus)
    return {"spark": sorted(spark_cpus), "cluster": sorted(cluster_cpus)}


def pin_threads(pid: int, cpus: set[int]) -> None:
    """Every thread of process `pid` on `cpus` (threads it starts later inherit them from the
    thread that starts them). A thread that ends meanwhile is skipped: a process's threads come
    and go (a worker thread finishing its task), and listing them is not atomic."""
    for thread in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(thread), cpus)
        except ProcessLookupError:
            pass


def _stream_bytes(cluster, name: str) -> int:
    """The bytes the entries of stream bench/`name` hold (each ledger's length)."""
    from bkclient.sync import connect

    async def lengths(bk) -> int:
        total = 0
        for segment in await bk.streams.catalog.segments("bench", name):
            total += (await bk.ledger_metadata(segment.ledger_id)).length
        return total
    with connect(cluster.metastore_uri) as bk:
        return bk.run(lengths)


def _folder_size(path: str) -> int:
    return sum(os.path.getsize(os.path.join(folder, name)) for folder, _, names in os.walk(path) for name in names)


def _measure(spark, cluster, args, ledger_ids: list[int], work_dir: str, row_server) -> dict:
    from pyspark.sql import functions as F
    from bkbench.spark_ceiling import CeilingDataSource
    from bkspark.read_sizing import ARROW_BATCH_BYTES, ARROW_BATCH_ENTRIES
    uri = cluster.metastore_uri
    spark.dataSource.register(CeilingDataSource)
    payload = f"repeat('x', {args.size})" if args.payload == "repeated" else f"randstr({args.size})"
    rows = spark.range(0, args.entries, numPartitions=2).select(F.expr(f"cast({payload} as binary)").alias("payload"))
    cluster_pids = {child.process.pid for child in [*cluster.bookies, *cluster.metastore_nodes]} | {row_server.process.pid}

    def meter() -> CpuMeter:
        """CPU from now: this driver ("client"), Spark (its JVM and Python workers), the bookies,
        the row server of the TCP peer."""
        return CpuMeter({"spark": lambda: descendant_pids(os.getpid(), excluding=cluster_pids),
                         "bookies": [bookie.process.pid for bookie in cluster.bookies],
                         "row_server": [row_server.process.pid]})

    def measured(count: int, action) -> dict:
        cpu = meter()
        _, seconds = _timed(action)
        return _rate(count, seconds, cpu)

    def source():        # a new reader each time: a DataFrameReader keeps the options it is given
        return spark.read.format("bookkeeper").option("metastore", uri)

    parquet_path = os.path.join(work_dir, "parquet")
    plain_path = os.path.join(work_dir, "parquet-plain")
    def write_stream(name: str, compression: str = "none") -> None:
        rows.write.format("bookkeeper").option("metastore", uri).option("stream", f"bench/{name}") \
            .option("compression", compression).mode("append").save()

    def write_parquet(path: str, **options: str) -> None:
        rows.write.options(**options).parquet(path)

    # Writes run twice too, the first into a stream and files of their own.
    announce("Spark writes (the no-op sink, the stream, Parquet, Parquet uncompressed)")
    sink_ceiling_first = measured(args.entries, lambda: rows.write.format("bookkeeper-ceiling").mode("append").save())
    sink_ceiling = measured(args.entries, lambda: rows.write.format("bookkeeper-ceiling").mode("append").save())
    write_first = measured(args.entries, lambda: write_stream("spark-first"))
    write = measured(args.entries, lambda: write_stream("spark"))
    write_lz4 = measured(args.entries, lambda: write_stream("spark-lz4", "lz4"))
    parquet_write_first = measured(args.entries, lambda: write_parquet(parquet_path + "-first"))
    parquet_write = measured(args.entries, lambda: write_parquet(parquet_path))
    plain = {"compression": "none", "parquet.enable.dictionary": "false"}
    parquet_plain_write = measured(args.entries, lambda: write_parquet(plain_path, **plain))

    def ledgers_frame():
        return source().option("ledgers", ",".join(map(str, ledger_ids))).option("password", "bench").load()

    def stream_frame(name: str = "spark"):
        return source().option("stream", f"bench/{name}").load()

    def read_parquet() -> int:
        return spark.read.parquet(parquet_path).select(F.sum(F.length("payload"))).collect()[0][0]

    def ceiling_frame(rows: int, partitions: int, rows_per_batch: int, tcp_rows: str = "", tcp_entries: str = ""):
        return (spark.read.format("bookkeeper-ceiling").option("rows", str(rows)).option("partitions", str(partitions))
                .option("size", str(args.size)).option("rowsPerBatch", str(rows_per_batch))
                .option("tcpRows", tcp_rows).option("tcpEntries", tcp_entries).load())

    # Each no-op read makes the rows the real read it stands beside makes: as many, in as many
    # partitions as that read plans, in Arrow batches as large (ARROW_BATCH_ENTRIES entries of a
    # raw ledger, each a row; ARROW_BATCH_BYTES of a stream's records).
    ledger_count = len(ledger_ids) * -(-args.entries // args.ledgers)
    ledger_partitions = ledgers_frame().rdd.getNumPartitions()
    ledger_ceiling = ceiling_frame(ledger_count, ledger_partitions, ARROW_BATCH_ENTRIES)
    tcp_peer = ceiling_frame(ledger_count, ledger_partitions, ARROW_BATCH_ENTRIES, row_server.address)
    tcp_entries_peer = ceiling_frame(ledger_count, ledger_partitions, ARROW_BATCH_ENTRIES,
                                     tcp_entries=row_server.address)
    stream_ceiling = ceiling_frame(args.entries, stream_frame().rdd.getNumPartitions(), ARROW_BATCH_BYTES // args.size)
    # Each read runs twice: the first pays for cold JIT code paths and Python workers; the
    # second is the steady state that the ratios and the target are about.
    announce("Spark reads (the no-op source, the ledgers, the stream, Parquet)")
    ceiling_first = measured(ledger_count, ledger_ceiling.count)
    ceiling = measured(ledger_count, ledger_ceiling.count)
    stream_ceiling_first = measured(args.entries, stream_ceiling.count)
    stream_ceiling_rate = measured(args.entries, stream_ceiling.count)
    tcp_peer_first = measured(ledger_count, tcp_peer.count)
    tcp_peer_rate = measured(ledger_count, tcp_peer.count)
    tcp_entries_peer_first = measured(ledger_count, tcp_entries_peer.count)
    tcp_entries_peer_rate = measured(ledger_count, tcp_entries_peer.count)
    assert ledgers_frame().count() == ledger_count and stream_frame().count() == args.entries
    read_first = measured(ledger_count, lambda: ledgers_frame().count())
    read = measured(ledger_count, lambda: ledgers_frame().count())
    read_stream_first = measured(args.entries, lambda: stream_frame().count())
    stream = measured(args.entries, lambda: stream_frame().count())
    stream_lz4 = measured(args.entries, lambda: stream_frame("spark-lz4").count())
    assert read_parquet() == args.entries * args.size
    parquet_read_first = measured(args.entries, read_parquet)
    parquet_read = measured(args.entries, read_parquet)
    return {
        "write_stream_first": write_first, "write_stream": write,
        "write_stream_lz4": {**write_lz4, "bytes_written": _stream_bytes(cluster, "spark-lz4")},
        "python_sink_ceiling_first": sink_ceiling_first, "python_sink_ceiling": sink_ceiling,
        "parquet_write_first": parquet_write_first,
        "parquet_write": {**parquet_write, "bytes_on_disk": _folder_size(parquet_path)},
        "parquet_write_uncompressed": {**parquet_plain_write, "bytes_on_disk": _folder_size(plain_path)},
        "read_ledgers_first": read_first, "read_ledgers": read,
        "read_stream_first": read_stream_first, "read_stream": stream, "read_stream_lz4": stream_lz4,
        "parquet_read_first": parquet_read_first, "parquet_read": parquet_read,
        "python_source_ceiling_first": {**ceiling_first, "partitions": ledger_ceiling.rdd.getNumPartitions()},
        "python_source_ceiling": ceiling,
        "python_source_ceiling_stream_first": {**stream_ceiling_first,
                                               "partitions": stream_ceiling.rdd.getNumPartitions()},
        "python_source_ceiling_stream": stream_ceiling_rate,
        "python_source_tcp_peer_first": tcp_peer_first, "python_source_tcp_peer": tcp_peer_rate,
        "python_source_tcp_entries_peer_first": tcp_entries_peer_first,
        "python_source_tcp_entries_peer": tcp_entries_peer_rate,
        "write_vs_parquet": _ratio(write, parquet_write),
        "write_vs_parquet_uncompressed": _ratio(write, parquet_plain_write),
        "write_vs_python_sink_ceiling": _ratio(write, sink_ceiling),
        "write_lz4_vs_parquet": _ratio(write_lz4, parquet_write),
        "write_target_vs_parquet": 0.5,
        "read_vs_parquet": _ratio(read, parquet_read),
        "read_vs_python_source_ceiling": _ratio(read, ceiling),
        "tcp_peer_vs_python_source_ceiling": _ratio(tcp_peer_rate, ceiling),
        "read_vs_tcp_peer": _ratio(read, tcp_peer_rate),
        "tcp_entries_peer_vs_python_source_ceiling": _ratio(tcp_entries_peer_rate, ceiling),
        "read_vs_tcp_entries_peer": _ratio(read, tcp_entries_peer_rate),
        "read_stream_vs_python_source_ceiling": _ratio(stream, stream_ceiling_rate),
        "read_stream_lz4_vs_python_source_ceiling": _ratio(stream_lz4, stream_ceiling_rate),
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
            for name in ("spark-first", "spark", "spark-lz4"):
                bk.run(lambda client, name=name: client.streams.create_stream("bench", name))
            ledger_ids = _write_ledgers(bk, args)
        cpus = _split_cpus(cluster) if args.split_cpus else "shared"
        threads = len(cpus["spark"]) if args.split_cpus else 2
        announce("starting Spark")
        spark = _spark_session(root, threads)
        with RowServer.started() as row_server:
            if args.split_cpus:
                pin_threads(row_server.process.pid, set(cpus["cluster"]))
            results = _measure(spark, cluster, args, ledger_ids, root, row_server)
        print(json.dumps({"benchmark": "spark", "master": f"local[{threads}]", "cpus": cpus, "bookies": 3,
                          "ledger_quorums": "E3 Qw3 Qa2", "entries": args.entries, "entry_size": args.size,
                          "payload": args.payload,
                          **results}, indent=2))
    finally:
        if spark is not None:
            spark.stop()
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0
