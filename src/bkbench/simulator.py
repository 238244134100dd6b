"""`bk bench sim`: the simulator's own speed on its standard scenario (3 bookies and a spare,
two writers, a tailing reader, faults on), over a run of seeds: events and simulated seconds per
wall second, events per CPU second, seeds per minute.
"""

from __future__ import annotations

import json
import time

from sim.run import run_scenario
from sim.scenario import S, Scenario


def bench_sim(args) -> int:
    """`bk bench sim` with its parsed arguments: runs the seeds, prints the JSON report."""
    events = 0
    simulated_ns = 0
    violations = 0
    started, cpu_started = time.perf_counter(), time.process_time()
    for seed in range(args.start, args.start + args.seeds):
        result = run_scenario(Scenario.standard(seed=seed, duration_ns=int(args.duration * S)))
        events += result.events_count
        simulated_ns += result.simulated_ns
        violations += len(result.violations)
    wall = time.perf_counter() - started
    # The simulator runs on one core: its CPU time is what the run cost, while wall time also
    # counts whatever else the machine's cores were doing meanwhile.
    cpu = time.process_time() - cpu_started
    print(json.dumps({
        "benchmark": "sim",
        "scenario": "3 bookies + 1 spare, E3 Qw3 Qa2, 2 writers, 1 tailing reader, faults on",
        "seeds": args.seeds,
        "simulated_seconds_per_seed": args.duration,
        "wall_seconds": round(wall, 3),
        "events": events,
        "events_per_wall_second": round(events / wall),
        "cpu_seconds": round(cpu, 3),
        "events_per_cpu_second": round(events / cpu),
        "simulated_seconds_per_wall_second": round(simulated_ns / S / wall, 2),
        "seeds_per_minute": round(args.seeds / wall * 60, 1),
        "violations": violations,
    }, indent=2))
    return 0
