"""`bk sim run` and `bk sim explore`: the deterministic simulator from the command line."""

from __future__ import annotations

import argparse
import sys
import traceback

from sim.scenario import FAULT_KINDS, S, WORKLOADS


def _faults(text: str) -> tuple[str, ...]:
    if text in ("all", ""):
        return FAULT_KINDS
    if text == "none":
        return ()
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = sorted(set(kinds) - set(FAULT_KINDS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown fault kinds {unknown}; choose from {', '.join(FAULT_KINDS)}, all, none")
    return kinds


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=float, default=10.0, help="simulated seconds of faults (default 10)")
    parser.add_argument("--faults", type=_faults, default=FAULT_KINDS,
                        help=f"comma-separated fault kinds: {', '.join(FAULT_KINDS)}; or all (default), none")
    parser.add_argument("--liveness", action="store_true",
                        help="also require every operation to finish after the cluster heals")
    parser.add_argument("--workload", choices=WORKLOADS, default=None,
                        help="what the run does (default: drawn from each seed)")


def add_parser(commands) -> None:
    sim = commands.add_parser("sim", help="run the deterministic simulator")
    sub = sim.add_subparsers(dest="sim_command", required=True)
    run = sub.add_parser("run", help="run one seed and print what happened")
    run.add_argument("--seed", type=int, required=True)
    _add_common(run)
    run.set_defaults(run=cmd_run)
    explore = sub.add_parser("explore", help="run many seeds; print the replay command of each failure")
    explore.add_argument("--seeds", type=int, required=True, help="how many seeds")
    explore.add_argument("--start", type=int, default=0, help="first seed (default 0)")
    explore.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    _add_common(explore)
    explore.set_defaults(run=cmd_explore)


def _scenario(seed: int, args):
    from sim.scenario import Scenario
    return Scenario.draw(seed=seed, duration_ns=int(args.duration * S), faults=args.faults,
                         is_liveness=args.liveness, workload=args.workload)


def cmd_run(args) -> int:
    from sim.run import EXIT_CRASH, replay_command, run_scenario
    scenario = _scenario(args.seed, args)
    for line in scenario.describe():
        print(line)
    try:
        result = run_scenario(scenario)
    except Exception:
        traceback.print_exc()
        print(f"crash; replay: {replay_command(scenario)}")
        return EXIT_CRASH
    for line in result.summary:
        print(line)
    for violation in result.violations:
        print(f"VIOLATION {violation}")
    for failure in result.liveness_failures:
        print(f"LIVENESS {failure}")
    print(f"invariant violations: {len(result.violations)}")
    if result.exit_code:
        print(f"replay: {replay_command(scenario)}")
    print(f"trace-hash: {result.trace_hash}")
    return result.exit_code


def _explore_one(job: tuple[int, float, tuple[str, ...], bool]) -> tuple[int, int, str, str]:
    from sim.run import EXIT_CRASH, replay_command, run_scenario
    seed, duration, faults, liveness = job
    args = argparse.Namespace(duration=duration, faults=faults, liveness=liveness)
    scenario = _scenario(seed, args)
    try:
        result = run_scenario(scenario)
    except Exception as exc:
        return seed, EXIT_CRASH, f"crash: {exc!r}", replay_command(scenario)
    detail = "; ".join([str(v) for v in result.violations[:3]] + result.liveness_failures[:2])
    return seed, result.exit_code, detail, replay_command(scenario)


def cmd_explore(args) -> int:
    jobs = [(seed, args.duration, tuple(args.faults), args.liveness)
            for seed in range(args.start, args.start + args.seeds)]
    passed = failed = 0
    if args.jobs > 1:
        import multiprocessing
        with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
            outcomes = pool.imap(_explore_one, jobs, chunksize=4)
            for outcome in outcomes:
                passed, failed = _report(outcome, passed, failed)
    else:
        for job in jobs:
            passed, failed = _report(_explore_one(job), passed, failed)
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


def _report(outcome, passed: int, failed: int) -> tuple[int, int]:
    seed, code, detail, command = outcome
    if code == 0:
        return passed + 1, failed
    print(f"seed {seed} failed (exit {code}): {detail}\n  replay: {command}", flush=True)
    sys.stdout.flush()
    return passed, failed + 1
