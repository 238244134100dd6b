"""`bk bench all`: every benchmark in one run, written to one JSON file and a Markdown table.

Each benchmark runs as its own `bk bench <name>` in a fresh interpreter, one after another, so
none shares a process (or the machine) with another; peers (NATS JetStream and etcd clusters,
the raw fdatasync and bandwidth loops) are measured inside the same run by the benchmarks that
compare against them. The table quotes each headline figure beside its baseline from this run,
their ratio, and the target its issue sets: on a shared, noisy machine the ratio is the figure
to trust, not the absolute rate.

    results.json   {"benchmarks": {name: the benchmark's own JSON, or its error}, ...}
    results.md     the headline table
    failover.png   add latency over time without and with a bookie kill
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass

BENCHMARK_TIMEOUT_S = 900


@dataclass(frozen=True)
class Headline:
    """A figure worth a row: where it is in a benchmark's JSON, what it is compared with, and
    the target (on the figure itself, or on figure / baseline when `target_on_ratio`)."""
    benchmark: str
    label: str
    path: str
    baseline_label: str = ""
    baseline_path: str = ""
    target: tuple[str, float] | None = None      # (">=" or "<=", value)
    target_on_ratio: bool = False


HEADLINES = (
    Headline("sim", "simulated events per wall second", "events_per_wall_second", target=(">=", 100_000)),
    Headline("sim", "simulated seeds per minute", "seeds_per_minute", target=(">=", 100)),
    Headline("journal", "journal path, 1 KiB adds in batches (MiB/s)", "journal_batched.1.mib_per_second",
             "raw write+fdatasync MiB/s", "raw_sequential.mib_per_second", (">=", 0.70), True),
    Headline("journal", "journal path, 1 KiB single adds (MiB/s)", "journal.1.mib_per_second",
             "raw write+fdatasync MiB/s", "raw_sequential.mib_per_second"),
    Headline("journal", "journal path, 64 KiB adds (MiB/s)", "journal.2.mib_per_second",
             "raw write+fdatasync MiB/s", "raw_sequential.mib_per_second", (">=", 0.80), True),
    Headline("journal", "journal, one add per group, p50 ms", "journal_one_add_per_group.add_latency_p50_ms",
             "raw fdatasync p50 ms", "raw_fdatasync.p50_ms", ("<=", 0.6)),
    Headline("journal", "entry-log reads after a checkpoint, entries/s",
             "entry_log_reads.with_read_ahead_entries_per_second",
             "without read-ahead", "entry_log_reads.without_read_ahead_entries_per_second"),
    Headline("bookie", "bookie over TCP, 1 KiB pipelined (MiB/s)", "pipelined.1.mib_per_second",
             "raw write+fdatasync MiB/s", "raw_sequential.mib_per_second", (">=", 0.70), True),
    Headline("bookie", "bookie over TCP, 64 KiB pipelined (MiB/s)", "pipelined.2.mib_per_second",
             "raw write+fdatasync MiB/s", "raw_sequential.mib_per_second", (">=", 0.80), True),
    Headline("bookie", "... what the disk wrote meanwhile, 1 KiB (journal + entry logs, MiB/s)",
             "pipelined.1.device_write_mib_per_second", "raw write+fdatasync MiB/s", "raw_sequential.mib_per_second"),
    Headline("bookie", "... what the disk wrote meanwhile, 64 KiB (journal + entry logs, MiB/s)",
             "pipelined.2.device_write_mib_per_second", "raw write+fdatasync MiB/s", "raw_sequential.mib_per_second"),
    Headline("bookie", "bookie over TCP, one add at a time, p50 ms", "one_at_a_time.add_latency_p50_ms",
             "raw fdatasync p50 ms", "raw_fdatasync.p50_ms", ("<=", 0.6)),
    Headline("bookie", "bookie at 4x its in-progress limit: peak memory MiB", "overload.bookie_memory.rss_peak_mib",
             "peak before the overload", "overload.bookie_memory_before.rss_peak_mib", ("<=", 1.5), True),
    Headline("bookie", "adds refused with TOO_MANY_REQUESTS under overload", "overload.errors.TOO_MANY_REQUESTS"),
    Headline("ledger_one_bookie", "one writer pipelining into one bookie, 1 KiB adds/s", "pipelined.adds_per_second",
             target=(">=", 100_000)),
    Headline("ledger", "ledger E3 Qw3 Qa2, pipelined 1 KiB adds/s", "pipelined.adds_per_second",
             "NATS JetStream R3 adds/s", "peers.nats_jetstream.pipelined.adds_per_second", (">=", 6.0), True),
    Headline("ledger", "ledger E3 Qw3 Qa2, pipelined 1 KiB adds/s (vs etcd)", "pipelined.adds_per_second",
             "etcd 3-node puts/s", "peers.etcd.pipelined.adds_per_second"),
    Headline("ledger", "ledger E3 Qw3 Qa2, pipelined 1 KiB adds/s (vs the disk)", "pipelined.adds_per_second",
             "adds/s at which this run's device bytes would take all of raw",
             "pipelined.disk_bound_adds_per_second", (">=", 60_000)),
    Headline("ledger", "ledger, one add at a time, p50 ms", "one_at_a_time.add_latency_p50_ms",
             "NATS JetStream R3 p50 ms", "peers.nats_jetstream.one_at_a_time.add_latency_p50_ms", ("<=", 1.0)),
    Headline("ledger", "disk floor of one add: 2nd of 3 simultaneous fdatasyncs, p50 ms", "disk_quorum_fdatasync.p50_ms"),
    Headline("ledger", "ledger at half the pipelined rate, p99 ms", "half_peak_load.add_latency_p99_ms",
             target=("<=", 5.0)),
    Headline("ledger", "tail visibility (ack to long-poll reader), p50 ms", "tail_visibility.visibility_p50_ms",
             target=("<=", 1.0)),
    Headline("table", "table puts/s, 16 clients", "put.ops_per_second",
             "etcd 3-node puts/s", "peers.etcd.put.ops_per_second", (">=", 20_000)),
    Headline("table", "table gets/s, 16 clients", "get.ops_per_second",
             "etcd 3-node gets/s", "peers.etcd.get.ops_per_second", (">=", 50_000)),
    Headline("table", "watch event latency p50 ms", "watch.watch_latency_p50_ms", target=("<=", 2.0)),
    Headline("stream", "stream append records/s", "append.records_per_second"),
    Headline("stream", "stream read-back records/s", "read_back.records_per_second"),
    Headline("spark", "Spark batch read of 1 KiB ledger entries, rows/s", "read_ledgers.per_second",
             "Python data source reading nothing, rows/s", "python_source_ceiling.per_second", (">=", 0.9), True),
    Headline("spark", "Spark batch read of a stream, rows/s", "read_stream.per_second",
             "Python data source reading nothing, rows/s", "python_source_ceiling_stream.per_second", (">=", 0.9), True),
    Headline("spark", "Spark exactly-once write into a stream, rows/s", "write_stream.per_second",
             "Parquet write rows/s", "parquet_write.per_second", (">=", 0.5), True),
    Headline("spark", "Spark exactly-once write into a stream, rows/s", "write_stream.per_second",
             "Parquet write, uncompressed, rows/s", "parquet_write_uncompressed.per_second"),
    Headline("spark", "Spark exactly-once write into a stream, rows/s", "write_stream.per_second",
             "Python sink dropping every batch, rows/s", "python_sink_ceiling.per_second"),
    Headline("failover", "add p99 ms in the second after a bookie kill",
             "runs.a bookie of the ensemble killed half-way.first_second_after_kill.add_latency_p99_ms",
             "no failure p99 ms", "runs.no failure.add_latency_p99_ms"),
    Headline("failover", "adds lost or failed across the kill", "runs.a bookie of the ensemble killed half-way.errors",
             target=("<=", 0)),
)


def dig(report: dict, path: str):
    """The value at a dotted path ("pipelined.1.mib_per_second"; numbers index lists), or None."""
    value = report
    for part in path.split("."):
        if isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            return None
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def headline_rows(benchmarks: dict) -> list[dict]:
    rows = []
    for headline in HEADLINES:
        if headline.benchmark not in benchmarks:
            continue                                   # left out with --skip
        report = benchmarks[headline.benchmark]
        value = dig(report, headline.path)
        baseline = dig(report, headline.baseline_path) if headline.baseline_path else None
        ratio = round(value / baseline, 2) if value is not None and baseline else None
        met = None
        if headline.target is not None:
            judged = ratio if headline.target_on_ratio else value
            if judged is not None:
                op, goal = headline.target
                met = judged >= goal if op == ">=" else judged <= goal
        rows.append({"benchmark": headline.benchmark, "figure": headline.label, "value": value,
                     "baseline": headline.baseline_label, "baseline_value": baseline, "ratio": ratio,
                     "target": (f"{'ratio ' if headline.target_on_ratio else ''}{headline.target[0]} "
                                f"{headline.target[1]:g}") if headline.target else "",
                     "met": met})
    return rows


def render_markdown(rows: list[dict], *, header: str) -> str:
    def cell(value) -> str:
        if value is None:
            return "n/a"
        return f"{value:,.3f}".rstrip("0").rstrip(".") if isinstance(value, float) else f"{value:,}"

    lines = [header, "", "| benchmark | figure | measured | baseline (same run) | ratio | target | met |",
             "|---|---|---:|---|---:|---|---|"]
    for row in rows:
        baseline = f"{row['baseline']}: {cell(row['baseline_value'])}" if row["baseline"] else ""
        met = {True: "yes", False: "no", None: ""}[row["met"]] if row["target"] else ""
        lines.append(f"| {row['benchmark']} | {row['figure']} | {cell(row['value'])} | {baseline} | "
                     f"{cell(row['ratio']) if row['ratio'] is not None else ''} | {row['target']} | {met} |")
    return "\n".join(lines) + "\n"


def _commands(args) -> dict[str, list[str]]:
    seconds = str(args.seconds)
    work_dir = args.dir or args.out
    commands = {
        "sim": ["sim", "--seeds", str(args.sim_seeds)],
        "journal": ["journal", "--dir", work_dir, "--seconds", seconds],
        "bookie": ["bookie", "--dir", work_dir, "--seconds", seconds],
        "ledger": ["ledger", "--seconds", seconds, "--dir", work_dir, *(["--peers"] if args.peers else [])],
        "ledger_one_bookie": ["ledger", "--seconds", seconds, "--dir", work_dir, "--bookies", "1", "--ensemble", "1",
                              "--write-quorum", "1", "--ack-quorum", "1"],
        "table": ["table", "--seconds", seconds, "--dir", work_dir, *(["--peers"] if args.peers else [])],
        "stream": ["stream", "--seconds", seconds, "--dir", work_dir],
        "failover": ["failover", "--seconds", str(max(4.0, args.seconds)), "--out", args.out, "--dir", work_dir],
        "spark": ["spark", "--entries", str(args.spark_entries), "--dir", work_dir],
    }
    return {name: argv for name, argv in commands.items() if name not in args.skip}


def run_one(name: str, argv: list[str]) -> dict:
    """A benchmark's JSON, or {"error": ...} naming what failed and the end of its output."""
    started = time.monotonic()
    try:
        completed = subprocess.run([sys.executable, "-m", "bkcli.main", "bench", *argv], capture_output=True,
                                   text=True, timeout=BENCHMARK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"bk bench {name} did not finish in {BENCHMARK_TIMEOUT_S} s"}
    try:
        report = json.loads(completed.stdout)
    except json.JSONDecodeError:
        tail = (completed.stderr or completed.stdout).strip().splitlines()[-5:]
        return {"error": f"bk bench {name} exited {completed.returncode} without JSON", "output_tail": tail}
    if completed.returncode != 0:
        report["exit_status"] = completed.returncode
    report["wall_seconds_total"] = round(time.monotonic() - started, 1)
    return report


def bench_all(args) -> int:
    os.makedirs(args.out, exist_ok=True)
    args.out = os.path.abspath(args.out)
    commands = _commands(args)
    benchmarks = {}
    for index, (name, argv) in enumerate(commands.items(), start=1):
        print(f"bench all: {name} ({index}/{len(commands)}): bk bench {' '.join(argv)}", file=sys.stderr, flush=True)
        benchmarks[name] = run_one(name, argv)
        if "error" in benchmarks[name]:
            print(f"bench all: {name} failed: {benchmarks[name]['error']}", file=sys.stderr, flush=True)
    rows = headline_rows(benchmarks)
    machine = {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()}
    with open(os.path.join(args.out, "results.json"), "w") as file:
        json.dump({"benchmark": "all", "seconds_per_measurement": args.seconds, "machine": machine,
                   "headlines": rows, "benchmarks": benchmarks}, file, indent=2)
    markdown = render_markdown(rows, header=f"Benchmarks, {time.strftime('%Y-%m-%d')}: {machine['cpus']} CPUs, "
                                            f"Python {machine['python']}, {args.seconds:g} s per measurement")
    with open(os.path.join(args.out, "results.md"), "w") as file:
        file.write(markdown)
    print(markdown)
    print(f"bench all: wrote {args.out}/results.json and results.md", file=sys.stderr)
    return 1 if any("error" in report for report in benchmarks.values()) else 0
