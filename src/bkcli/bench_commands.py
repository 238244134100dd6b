"""`bk bench ...`: benchmarks that print JSON. `bk bench sim` measures the simulator itself."""

from __future__ import annotations

import json
import time


def add_parser(commands) -> None:
    bench = commands.add_parser("bench", help="benchmarks (JSON output)")
    sub = bench.add_subparsers(dest="bench_command", required=True)
    sim = sub.add_parser("sim", help="simulator speed on the standard scenario")
    sim.add_argument("--seeds", type=int, default=5, help="seeds to run (default 5)")
    sim.add_argument("--start", type=int, default=1)
    sim.add_argument("--duration", type=float, default=10.0, help="simulated seconds per seed")
    sim.set_defaults(run=cmd_bench_sim)
    from bkcli import bench_all, bench_bookie, bench_failover, bench_journal, bench_ledger, bench_storage
    bench_journal.add_parser(sub)
    bench_bookie.add_parser(sub)
    bench_ledger.add_parser(sub)
    bench_storage.add_parser(sub)
    bench_failover.add_parser(sub)
    bench_all.add_parser(sub)
    from bkcli import bench_spark
    bench_spark.add_parser(sub)


def cmd_bench_sim(args) -> int:
    from sim.run import run_scenario
    from sim.scenario import S, Scenario
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
