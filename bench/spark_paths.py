"""The Spark source's and sink's own paths, outside Spark: where a row's CPU goes in the Python
worker and in the bookies, with nothing of the JVM in the way.

    python bench/spark_paths.py [--rows 400000] [--profile] [--rounds 3]

On a fresh local cluster (3 bookies, E3 Qw2 Qa2 like `bk bench spark`'s stream) it runs, in this
process, what a Spark task runs:
    write   bkspark.sink.write_task over Arrow batches of 10,000 rows of 1 KiB
            (Spark's spark.sql.execution.arrow.maxRecordsPerBatch), into a stream's ledger
    stream  bkspark.spans.read_span over that ledger's entries (the stream read)
    ledger  bkspark.spans.read_span over a raw ledger of 1 KiB entries, E3 Qw3 Qa2 (the ledger read)
and prints one JSON object: rows/s, this process's user and system CPU per row and minor page
faults per row, the same summed over the bookies. Reads run --rounds times; the first round of
a process pays for memory it touches the first time (see bench/README.md). --profile adds the
top functions of a cProfile of the last round of each (this process only: the task's thread
and the client's trio thread)."""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import resource
import shutil
import tempfile
import time

import pyarrow as pa

from bkclient.sync import connect
from bkcore.stream.segments import StreamSettings
from bklocal.standalone import StandaloneCluster
from bkspark import cluster as spark_cluster
from bkspark import planning, sink, spans
from bkspark.options import parse_options

BATCH_ROWS = 10_000
ROW_SIZE = 1024


def _process_times(pid: int) -> tuple[float, float, int]:
    """(user s, system s, minor faults) of a process so far."""
    with open(f"/proc/{pid}/stat") as file:
        fields = file.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick, int(fields[7])


def _own_times() -> tuple[float, float, int]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime, usage.ru_minflt


def _measured(rows: int, action, bookie_pids: list[int], profile: bool) -> dict:
    own, bookies = _own_times(), [_process_times(pid) for pid in bookie_pids]
    profiler = cProfile.Profile() if profile else None
    started = time.perf_counter()
    if profiler:
        profiler.enable()
    counted = action()
    if profiler:
        profiler.disable()
    seconds = time.perf_counter() - started
    own_after, bookies_after = _own_times(), [_process_times(pid) for pid in bookie_pids]
    per_row = max(counted or rows, 1)
    report = {"rows_per_second": round(per_row / seconds),
              "this_process_user_us_per_row": round((own_after[0] - own[0]) / per_row * 1e6, 2),
              "this_process_sys_us_per_row": round((own_after[1] - own[1]) / per_row * 1e6, 2),
              "this_process_faults_per_row": round((own_after[2] - own[2]) / per_row, 3)}
    for index, name in ((0, "user"), (1, "sys")):
        spent = sum(after[index] - before[index] for before, after in zip(bookies, bookies_after))
        report[f"bookies_{name}_us_per_row"] = round(spent / per_row * 1e6, 2)
    report["bookies_faults_per_row"] = round(sum(a[2] - b[2] for b, a in zip(bookies, bookies_after)) / per_row, 3)
    if profiler:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(12)
        report["profile"] = [line.strip() for line in text.getvalue().splitlines() if "(" in line][:12]
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="spark-paths-")
    cluster = StandaloneCluster.on_free_ports(os.path.join(root, "cluster"), bookie_count=3, metastore_count=1)
    try:
        cluster.start(log=lambda line: None)
        bookie_pids = [bookie.process.pid for bookie in cluster.bookies]
        settings = StreamSettings(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
        with connect(cluster.metastore_uri) as bk:
            bk.run(lambda client: client.streams.create_namespace("bench", settings))
            bk.run(lambda client: client.streams.create_stream("bench", "paths"))
            raw = bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"bench")
            payload = os.urandom(ROW_SIZE)
            for _ in range(0, args.rows, 5000):
                raw.add_many([payload] * 5000)
            raw.close()
        options = parse_options({"metastore": cluster.metastore_uri, "stream": "bench/paths"})
        ledger_options = parse_options({"metastore": cluster.metastore_uri, "ledgers": str(raw.ledger_id),
                                        "password": "bench"})
        batch = pa.RecordBatch.from_arrays([pa.array([os.urandom(ROW_SIZE) for _ in range(BATCH_ROWS)], pa.binary())],
                                           names=["payload"])
        spark_cluster.client(options)          # connected before the clock starts, as a reused worker is
        written = {}

        def write() -> int:
            batches = (batch for _ in range(args.rows // BATCH_ROWS))
            written["ledger"] = sink.write_task(options, settings, batches)
            return written["ledger"].record_count
        report = {"rows": args.rows, "row_size": ROW_SIZE, "write": _measured(args.rows, write, bookie_pids, args.profile)}
        stream_span = planning.ReadSpan("bench/paths", 1, written["ledger"].ledger_id, 0, written["ledger"].last_entry_id)
        ledger_span = planning.ReadSpan(None, 0, raw.ledger_id, 0, args.rows - 1)
        for name, span, span_options in (("stream", stream_span, options), ("ledger", ledger_span, ledger_options)):
            report[name] = [_measured(args.rows, lambda: sum(b.num_rows for b in spans.read_span(span_options, span)),
                                      bookie_pids, args.profile and round_ == args.rounds - 1)
                            for round_ in range(args.rounds)]
        print(json.dumps(report, indent=2))
    finally:
        spark_cluster.close_clients()
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
