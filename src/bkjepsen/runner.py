"""One jepsen-like run: parse the options, start the cluster, run the workload and the nemesis
for --time seconds, heal, do the workload's final reads, check the history, write the results
(history.jsonl, timeline.html, latency.html, report.txt) and print a report ending with
`valid: true|false`. Exit status 0 when valid, 1 when not, 2 for bad options.

Every process is stopped and every tmpfs unmounted on the way out, whatever happened (the
cluster's stop() runs in a finally; SIGTERM and Ctrl-C cancel the run, which ends there too).
"""

from __future__ import annotations

import argparse
import os
import random
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field

import trio

from bkjepsen.checkers import CHECKERS
from bkjepsen.cluster import Cluster, ClusterSpec
from bkjepsen.history import History
from bkjepsen.nemesis import Nemesis, parse_kinds
from bkjepsen.report import print_report, replay_command, write_results

WORKLOADS = ("ledger", "stream", "table")
HEAL_SETTLE_S = 3.0
FINAL_CHECK_TIMEOUT_S = 180.0
DEFAULT_RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                               "jepsen-like", "results")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="jepsen-like/run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=WORKLOADS, default="ledger")
    parser.add_argument("--nemesis", default="all",
                        help="all, none, or a comma list of kill,pause,partition,leader,disk-full,corrupt")
    parser.add_argument("--time", type=float, default=60.0, help="seconds of workload under faults (60)")
    parser.add_argument("--seed", type=int, default=None, help="the seed of every random choice (default: new)")
    parser.add_argument("--metastore", choices=("raft", "zk"), default="raft")
    parser.add_argument("--bookies", type=int, default=4)
    parser.add_argument("--stream-storage-servers", type=int, default=3,
                        help="stream storage servers of the table workload (3); ranges move between them")
    parser.add_argument("--results", default=DEFAULT_RESULTS, help="results folder (jepsen-like/results)")
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 31)
    if not 1 <= args.time <= 3600 or not 3 <= args.bookies <= 9:
        parser.error("--time must be within 1..3600 and --bookies within 3..9")
    return args


@dataclass
class RunResult:
    history: History
    violations: list[str] = field(default_factory=list)
    nemesis_counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def is_valid(self) -> bool:
        return not self.violations


def tmpfs_available() -> str | None:
    """None when a tmpfs can be mounted here, else why not."""
    if os.geteuid() != 0:
        return "not root"
    probe = f"/tmp/bkjepsen-tmpfs-probe-{os.getpid()}"
    os.makedirs(probe, exist_ok=True)
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", probe], capture_output=True,
                                 timeout=10)
        if mounted.returncode != 0:
            return mounted.stderr.decode(errors="replace").strip() or "mount failed"
        subprocess.run(["umount", probe], capture_output=True, timeout=10)
        return None
    finally:
        os.rmdir(probe)


def make_workload(name: str, history: History, rng: random.Random, cluster: Cluster):
    if name == "ledger":
        from bkjepsen.workload_ledger import LedgerWorkload
        return LedgerWorkload(history, rng)
    if name == "stream":
        from bkjepsen.workload_stream import StreamWorkload
        return StreamWorkload(history, rng)
    from bkjepsen.workload_table import TableWorkload
    return TableWorkload(history, rng, cluster)


async def run(args: argparse.Namespace, folder: str, log=print) -> RunResult:
    rng = random.Random(args.seed)
    why_no_tmpfs = tmpfs_available()
    kinds = parse_kinds(args.nemesis, why_no_tmpfs is None)
    result = RunResult(History())
    if why_no_tmpfs and args.nemesis in ("all",) or (why_no_tmpfs and "disk-full" in args.nemesis):
        result.notes.append(f"disk-full nemesis left out: cannot mount a tmpfs here ({why_no_tmpfs})")
    spec = ClusterSpec(metastore=args.metastore, bookie_count=args.bookies,
                       stream_storage_count=args.stream_storage_servers if args.workload == "table" else 0,
                       tmpfs_ledger_dirs="disk-full" in kinds)
    cluster = Cluster(spec, os.path.join(folder, "cluster"))
    try:
        async with trio.open_nursery() as nursery:
            with trio.fail_after(180):
                await cluster.start(nursery)
            log(f"cluster up: {', '.join(cluster.services)}; workload {args.workload}, nemesis {kinds or 'none'}")
            history = result.history = History()
            workload = make_workload(args.workload, history, random.Random(rng.random()), cluster)
            await workload.prepare(cluster.client_uri)
            nemesis = Nemesis(cluster, history, rng=random.Random(rng.random()), kinds=kinds,
                              victims_extra=cluster.stream_storage_names)
            async with trio.open_nursery() as inner:
                inner.start_soon(nemesis.run, args.time)
                inner.start_soon(workload.run, cluster.client_uri, args.time)
            await nemesis.heal()
            await trio.sleep(HEAL_SETTLE_S)
            log(f"healed after {history.now_s():.0f} s; final reads")
            with trio.move_on_after(FINAL_CHECK_TIMEOUT_S) as scope:
                await workload.final_check(cluster.client_uri)
            if scope.cancelled_caught:
                result.violations.append(f"final-check: did not finish within {FINAL_CHECK_TIMEOUT_S:.0f} s")
            result.nemesis_counts = dict(nemesis.counts)
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(cluster.stop)
    result.history.unfinished_to_unknown()
    result.violations = CHECKERS[args.workload](result.history) + result.violations
    result.violations += [f"process: {event.targets[0]} failed to restart: {event.detail}"
                          for event in result.history.nemesis if event.kind == "restart-failed"]
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    folder = os.path.join(args.results, time.strftime("%Y%m%d-%H%M%S") + f"-{args.workload}-seed{args.seed}")
    os.makedirs(folder, exist_ok=True)
    print(f"jepsen-like: seed {args.seed}; replay with: {replay_command(args)}", flush=True)
    print(f"options: {' '.join(f'--{k} {shlex.quote(str(v))}' for k, v in sorted(vars(args).items()))}", flush=True)
    try:
        result = trio.run(run, args, folder, lambda line: print(line, flush=True))
    except KeyboardInterrupt:
        print("interrupted; every process was stopped", file=sys.stderr)
        return 130
    write_results(result, args, folder)
    print_report(result, args, folder)
    return 0 if result.is_valid else 1
