"""`bk bench failover`: add latency over time under a steady load, without and with a bookie
killed (SIGKILL) half-way, on one local cluster of real processes (raft-lite metastore, four
bookies so a spare is there for the ensemble change).

Adds are issued open-loop at --rate per second (each in its own task, not waiting for the
previous one), so a stall shows as latency rather than as fewer adds. Each run writes its own
ledger (E3 Qw3 Qa2 by default); the kill run SIGKILLs a bookie of that ledger's ensemble at the
midpoint. The JSON gives latency percentiles before the kill, in the second after it, and after
that, the longest latency and the ensemble changes the writer made; the PNG (matplotlib, from the
bench extra) plots every add's latency against the time it was issued, one panel per run.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field

import trio

from bkbench import announce
from bkbench.summaries import latency_summary
from bkcore.extras import DISTRIBUTION

AFTER_KILL_WINDOW_S = 1.0


@dataclass
class LatencyRun:
    """One run's samples: (seconds since the run started, latency in seconds) per acknowledged add."""
    name: str
    samples: list[tuple[float, float]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    killed_at_s: float | None = None
    killed_bookie: str | None = None
    ensemble_change_count: int = 0

    def summary(self) -> dict:
        latencies = [latency for _, latency in self.samples]
        report = {"adds": len(self.samples), "errors": len(self.errors), "first_errors": self.errors[:3],
                  **latency_summary(latencies),
                  "add_latency_max_ms": round(max(latencies) * 1e3, 3) if latencies else None,
                  "ensemble_changes": self.ensemble_change_count}
        if self.killed_at_s is not None:
            kill, window_end = self.killed_at_s, self.killed_at_s + AFTER_KILL_WINDOW_S
            phases = {"before_kill": [l for t, l in self.samples if t < kill],
                      "first_second_after_kill": [l for t, l in self.samples if kill <= t < window_end],
                      "after_that": [l for t, l in self.samples if t >= window_end]}
            report.update({"killed_bookie": self.killed_bookie, "killed_at_s": round(kill, 3),
                           **{name: latency_summary(values) for name, values in phases.items()}})
        return report


async def _steady_adds(bk, run: LatencyRun, *, seconds: float, rate: float, payload: bytes,
                       kill=None, quorums: tuple[int, int, int]) -> None:
    """Issue adds at `rate` per second for `seconds`; call kill(ledger) at the midpoint if given."""
    ensemble, write_quorum, ack_quorum = quorums
    ledger = await bk.create_ledger(ensemble=ensemble, write_quorum=write_quorum, ack_quorum=ack_quorum,
                                    password=b"bench")
    started = time.perf_counter()

    async def one_add(issued_at: float) -> None:
        try:
            await ledger.add(payload)
        except Exception as error:      # counted in the report; a failed add is a finding, not a crash
            run.errors.append(repr(error))
            return
        run.samples.append((issued_at - started, time.perf_counter() - issued_at))

    async with trio.open_nursery() as nursery:
        interval_s = 1.0 / rate
        next_at = started
        while next_at - started < seconds:
            if kill is not None and run.killed_at_s is None and next_at - started >= seconds / 2:
                run.killed_bookie = await kill(ledger)
                run.killed_at_s = time.perf_counter() - started
            await trio.sleep_until(trio.current_time() + max(0.0, next_at - time.perf_counter()))
            nursery.start_soon(one_add, time.perf_counter())
            next_at += interval_s
    metadata = await ledger.close()
    run.ensemble_change_count = len(metadata.ensembles) - 1
    run.samples.sort()


def plot_runs(runs: list[LatencyRun], path: str) -> str:
    """Write the runs' latencies over time as a PNG; returns the path."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot, ticker

    figure, axes = pyplot.subplots(len(runs), 1, figsize=(10, 3.2 * len(runs)), sharex=True, sharey=True,
                                   squeeze=False)
    for axis, run in zip(axes[:, 0], runs):
        axis.scatter([t for t, _ in run.samples], [l * 1e3 for _, l in run.samples], s=3)
        axis.set_yscale("log")
        axis.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        axis.yaxis.set_minor_formatter(ticker.NullFormatter())
        axis.set_ylabel("add latency (ms)")
        title = f"{run.name}: {len(run.samples)} adds, {len(run.errors)} errors"
        if run.killed_at_s is not None:
            axis.axvline(run.killed_at_s, color="red", linestyle="--", label=f"SIGKILL {run.killed_bookie}")
            axis.legend(loc="upper right")
            title += f", {run.ensemble_change_count} ensemble change(s)"
        axis.set_title(title)
    axes[-1, 0].set_xlabel("seconds since the run started (time the add was issued)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
    return path


def run_failover(*, seconds: float, rate: float, entry_size: int, directory: str | None) -> list[LatencyRun]:
    from bklocal.standalone import StandaloneCluster
    from bkclient.library import connect

    root = tempfile.mkdtemp(dir=directory, prefix="bench-failover-")
    cluster = StandaloneCluster.on_free_ports(root, bookie_count=4)
    payload = os.urandom(entry_size)
    runs = [LatencyRun("no failure"), LatencyRun("a bookie of the ensemble killed half-way")]

    async def kill_one_of(ledger) -> str:
        bookie_id = ledger.metadata.ensembles[0][1][0]
        cluster.bookies[cluster.bookie_ports.index(int(bookie_id.rsplit(":", 1)[1]))].kill()
        return bookie_id

    async def measure() -> None:
        async with connect(cluster.metastore_uri) as bk:
            for run, kill in zip(runs, (None, kill_one_of)):
                announce(f"steady adds, {run.name}")
                await _steady_adds(bk, run, seconds=seconds, rate=rate, payload=payload, kill=kill,
                                   quorums=(3, 3, 2))

    try:
        announce("starting the cluster")
        cluster.start(log=lambda line: None)
        trio.run(measure)
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    return runs


def bench_failover(args) -> int:
    runs = run_failover(seconds=args.seconds, rate=args.rate, entry_size=args.entry_size, directory=args.dir)
    os.makedirs(args.out, exist_ok=True)
    report = {"benchmark": "failover", "bookies": 4, "ensemble": 3, "write_quorum": 3, "ack_quorum": 2,
              "entry_size": args.entry_size, "rate_per_second": args.rate, "seconds_per_run": args.seconds,
              "runs": {run.name: run.summary() for run in runs}}
    try:
        report["plot"] = plot_runs(runs, os.path.join(args.out, "failover.png"))
    except ImportError:
        report["plot"] = f"not drawn: matplotlib is not installed (pip install '{DISTRIBUTION}[bench]')"
    print(json.dumps(report, indent=2))
    return 1 if any(run.errors for run in runs) else 0
