"""`bk bench sim`: the simulator's own speed on the standard scenario of a workload (3 bookies
and a spare, faults on; the ledger workload's two writers and tailing reader, or the stream
workload's processes), over a run of seeds: events and simulated seconds per wall second,
events per CPU second, seeds per minute (of wall time, and of CPU time: the figure that does not
depend on what else the machine runs).
"""

from __future__ import annotations

import json
import time

from bkbench import announce
from bksim.run import run_scenario
from bksim.scenario import S, Scenario


SCENARIOS = {
    "ledger": "3 bookies + 1 spare, E3 Qw3 Qa2, 2 writers, 1 tailing reader, faults on",
    "stream": "3 bookies + 1 spare, E3 Qw3 Qa2, stream writers, readers, a truncator (processes), faults on",
    "table": "3 bookies + 1 spare, E3 Qw3 Qa2, stream storage servers, table clients and watchers, faults on",
    "mixed": "3 bookies + 1 spare, E3 Qw3 Qa2, the stream and the table workloads side by side, faults on",
}


def bench_sim(args) -> int:
    """`bk bench sim` with its parsed arguments: runs the seeds of each workload asked for and
    prints the JSON report (one object for one workload; {"workloads": [...]} for all)."""
    from bksim.run import RUNNABLE_WORKLOADS
    workloads = list(RUNNABLE_WORKLOADS) if args.workload == "all" else [args.workload]
    reports = [_bench_workload(workload, args) for workload in workloads]
    report = reports[0] if len(reports) == 1 else {"benchmark": "sim", "workloads": reports}
    print(json.dumps(report, indent=2))
    return 0


def _bench_workload(workload: str, args) -> dict:
    events = 0
    simulated_ns = 0
    violations = 0
    started, cpu_started = time.perf_counter(), time.process_time()
    for seed in range(args.start, args.start + args.seeds):
        announce(f"{workload} workload, seed {seed} ({seed - args.start + 1} of {args.seeds})")
        result = run_scenario(Scenario.standard(seed=seed, duration_ns=int(args.duration * S), workload=workload))
        events += result.events_count
        simulated_ns += result.simulated_ns
        violations += len(result.violations)
    wall = time.perf_counter() - started
    # The simulator runs on one core: its CPU time is what the run cost, while wall time also
    # counts whatever else the machine's cores were doing meanwhile.
    cpu = time.process_time() - cpu_started
    return {
        "benchmark": "sim",
        "workload": workload,
        "scenario": SCENARIOS.get(workload, workload),
        "seeds": args.seeds,
        "simulated_seconds_per_seed": args.duration,
        "wall_seconds": round(wall, 3),
        "events": events,
        "events_per_wall_second": round(events / wall),
        "cpu_seconds": round(cpu, 3),
        "events_per_cpu_second": round(events / cpu),
        "simulated_seconds_per_wall_second": round(simulated_ns / S / wall, 2),
        "seeds_per_minute": round(args.seeds / wall * 60, 1),
        # What one core does when nothing else runs on it (wall time on a shared machine is not).
        "seeds_per_cpu_minute": round(args.seeds / cpu * 60, 1),
        "violations": violations,
    }
