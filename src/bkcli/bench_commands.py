"""`bk bench ...`: the arguments of every benchmark, each dispatched to its code in bkbench.

This module only parses: one handler for every subcommand imports the bkbench module of the
one that runs, when it runs, so building the parser (every `bk` command does) loads no
benchmark, and with it no trio, lmdb, grpc or pyspark. The benchmarks print their JSON and
return the exit status; the phases they announce (bkbench.announce) show as a status line on
stderr while they run, on a terminal only (bkcli.progress).
"""

from __future__ import annotations

from bkcli.defaults import positive_int

_MIB = 1024 * 1024


def add_parser(commands) -> None:
    bench = commands.add_parser("bench", help="benchmarks (JSON output)")
    bench.set_defaults(run=_run)
    sub = bench.add_subparsers(dest="bench_command", required=True)
    _add_sim(sub)
    _add_journal(sub)
    _add_bookie(sub)
    _add_ledger(sub)
    _add_table_and_stream(sub)
    _add_failover(sub)
    _add_all(sub)
    _add_spark(sub)


def _run(args) -> int:
    """Imports the benchmark of the subcommand given, and no other, and runs it."""
    match args.bench_command:
        case "sim":
            from bkbench.simulator import bench_sim as bench
        case "journal":
            from bkbench.journal import bench_journal as bench
        case "bookie":
            from bkbench.bookie import bench_bookie as bench
        case "ledger":
            from bkbench.ledger import bench_ledger as bench
        case "table":
            from bkbench.storage import bench_table as bench
        case "stream":
            from bkbench.storage import bench_stream as bench
        case "failover":
            from bkbench.failover import bench_failover as bench
        case "all":
            from bkbench.all_benchmarks import bench_all as bench
        case "spark":
            from bkbench.spark import bench_spark as bench
        case other:
            raise AssertionError(f"bk bench {other} has arguments but no benchmark")
    from bkcli.progress import Progress, phases_of
    with phases_of("bkbench.phase", Progress("phases"), name=f"bk bench {args.bench_command}"):
        return bench(args)


def _add_disk_arguments(parser) -> None:
    """What the benchmarks of one disk (journal, bookie) are given first."""
    parser.add_argument("--dir", default=".", help="directory on the disk to measure (default: current)")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per measurement")


def _add_cluster_dir(parser) -> None:
    parser.add_argument("--dir", default=None, help="where the cluster keeps its data (default: a temp dir)")


def _add_sim(sub) -> None:
    sim = sub.add_parser("sim", help="simulator speed on the standard scenario")
    sim.add_argument("--seeds", type=int, default=5, help="seeds to run (default 5)")
    sim.add_argument("--start", type=int, default=1)
    sim.add_argument("--duration", type=float, default=10.0, help="simulated seconds per seed")
    sim.add_argument("--workload", default="ledger", choices=("ledger", "stream", "table", "mixed", "all"),
                     help="whose standard scenario (default ledger; all: each the simulator runs)")


def _add_journal(sub) -> None:
    journal = sub.add_parser("journal", help="journal path on real files vs raw fdatasync and bandwidth (JSON)")
    _add_disk_arguments(journal)
    journal.add_argument("--group-bytes", type=int, default=512 * 1024,
                         help="bytes of adds handed to the bookie per group (journalBufferedWritesThreshold)")
    journal.add_argument("--journal-prealloc-mb", type=int, default=16,
                         help="journal preallocation chunk in MiB (journalPreAllocSizeMB); 0 = off (16)")
    journal.add_argument("--compare-prealloc", action="store_true",
                         help="also measure 1 KiB adds with preallocation off and on (--journal-prealloc-mb, or 16 "
                              "if that is 0), alternating rounds; on/off ratios")


def _add_bookie(sub) -> None:
    bookie = sub.add_parser("bookie", help="one bookie process over TCP vs raw disk limits (JSON)")
    _add_disk_arguments(bookie)
    bookie.add_argument("--window-bytes", type=int, default=8 * _MIB, help="bytes of adds in flight when pipelining")
    bookie.add_argument("--journal-prealloc-mb", type=int, default=16,
                        help="the bookie's journalPreAllocSizeMB; 0 = off (16)")
    bookie.add_argument("--compare-prealloc", action="store_true",
                        help="then compare 1 KiB adds on two fresh bookies, preallocation off and on")


def _add_ledger(sub) -> None:
    ledger = sub.add_parser("ledger", help="the library against a local multi-process cluster (JSON)")
    ledger.add_argument("--bookies", type=int, default=3)
    ledger.add_argument("--ensemble", type=int, default=3)
    ledger.add_argument("--write-quorum", type=int, default=3)
    ledger.add_argument("--ack-quorum", type=int, default=2)
    ledger.add_argument("--entry-size", type=int, default=1024)
    ledger.add_argument("--seconds", type=float, default=20.0, help="seconds per measurement")
    ledger.add_argument("--in-flight", type=int, default=2000, help="adds outstanding when pipelining")
    _add_cluster_dir(ledger)
    ledger.add_argument("--default-gc", action="store_true",
                        help="leave this process's garbage collector at CPython's settings (no tune_gc)")
    ledger.add_argument("--peers", action="store_true",
                        help="then the same measurements against 3-node NATS JetStream and etcd clusters "
                             "(needs nats-server, etcd-server and the bench extra)")
    ledger.add_argument("--timeline", metavar="PNG",
                        help="also draw add latency over time in the quarter and half peak loads, with the "
                             "bookies' checkpoints, index commits, journal rolls, GC and loop pauses marked, "
                             "and the raw disk loop's stalls (needs matplotlib: the bench extra)")


def _add_table_and_stream(sub) -> None:
    table = sub.add_parser("table", help="table put/get/incr throughput and watch latency (JSON)")
    table.add_argument("--clients", type=int, default=16, help="client threads (16)")
    table.add_argument("--client-processes", type=int, default=1,
                       help="spread the clients over this many processes (1: threads of this one), so "
                            "the Python client is not what is measured")
    table.add_argument("--seconds", type=float, default=10.0, help="seconds per measurement")
    table.add_argument("--value-size", type=int, default=100)
    table.add_argument("--bookies", type=int, default=3)
    table.add_argument("--servers", type=int, default=1,
                       help="stream storage servers sharing the tables and one address (SO_REUSEPORT); their "
                            "CPU is reported summed (1)")
    table.add_argument("--ranges", type=positive_int, default=None,
                       help="hash ranges of the bench's table (default: a stream's, 4)")
    _add_cluster_dir(table)
    table.add_argument("--ceiling", action="store_true",
                       help="also measure dict-backed gRPC servers under the same load (bkbench.table_ceiling: "
                            "sync, sync_trio, sync_bridge, aio, aio_bridge, trio_grpc)")
    table.add_argument("--peers", action="store_true",
                       help="also measure etcd put/get (3 members, same client count) in the same run")
    stream = sub.add_parser("stream", help="stream append and read-back records/s (JSON)")
    stream.add_argument("--seconds", type=float, default=10.0)
    stream.add_argument("--record-size", type=int, default=100)
    stream.add_argument("--batch", type=int, default=1000, help="records per write_many call")
    stream.add_argument("--batches-in-flight", type=int, default=4)
    stream.add_argument("--bookies", type=int, default=3)
    stream.add_argument("--dir", default=None)


def _add_failover(sub) -> None:
    failover = sub.add_parser("failover", help="add latency over time without and with a bookie kill (JSON, PNG)")
    failover.add_argument("--seconds", type=float, default=10.0, help="seconds per run")
    failover.add_argument("--rate", type=float, default=500.0, help="adds issued per second")
    failover.add_argument("--entry-size", type=int, default=1024)
    failover.add_argument("--out", default=".", help="directory for failover.png (default: current)")
    _add_cluster_dir(failover)


def _add_all(sub) -> None:
    every = sub.add_parser("all", help="every benchmark, one JSON file and a Markdown table")
    every.add_argument("--seconds", type=float, default=5.0, help="seconds per measurement (5)")
    every.add_argument("--sim-seeds", type=int, default=20, help="seeds for bk bench sim (20)")
    every.add_argument("--spark-entries", type=int, default=1_000_000,
                       help="rows for bk bench spark (1000000: fewer let fixed costs hide or dominate)")
    every.add_argument("--out", default="bench-results", help="directory for results.json, results.md, failover.png")
    every.add_argument("--dir", default=None, help="where benchmarks put their data (default: --out)")
    every.add_argument("--no-peers", dest="peers", action="store_false",
                       help="skip the NATS JetStream and etcd clusters")
    every.add_argument("--skip", action="append", default=[], metavar="NAME",
                       help="leave out a benchmark (sim, journal, bookie, ledger, ledger_one_bookie, table, stream, "
                            "failover, spark)")


def _add_spark(sub) -> None:
    spark = sub.add_parser("spark", help="the Spark data source: batch read and write entries/s beside Parquet (JSON)")
    spark.add_argument("--entries", type=int, default=1_000_000,
                       help="rows/entries per measurement (1000000: fewer let fixed costs hide or dominate)")
    spark.add_argument("--size", type=int, default=1024, help="payload bytes (1024)")
    spark.add_argument("--ledgers", type=int, default=4, help="ledgers the raw entries are spread over (4)")
    spark.add_argument("--payload", choices=("repeated", "random"), default="repeated",
                       help="the rows written: repeated (one payload in every row, which Parquet's dictionary "
                            "and LZ4 shrink to almost nothing; the default) or random (random letters and digits "
                            "in each row, Spark's randstr, which neither shrinks much)")
    spark.add_argument("--split-cpus", action="store_true",
                       help="Spark (driver, JVM, Python workers; local[N]) on the first half of the CPUs, the "
                            "cluster on the other half, so the bookies do not take CPU from Spark (Linux)")
    _add_cluster_dir(spark)

