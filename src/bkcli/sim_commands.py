"""`bk sim run`, `bk sim explore` and `bk sim plants`: the deterministic simulator from the
command line."""

from __future__ import annotations

import argparse
import time
import traceback

from bksim.scenario import FAULT_KINDS, S, WORKLOADS


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


def _plant(text: str) -> str:
    from bksim.plants import plant_names
    if text not in plant_names():
        raise argparse.ArgumentTypeError(f"unknown plant {text!r}; choose from {', '.join(plant_names())}")
    return text


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=float, default=10.0, help="simulated seconds of faults (default 10)")
    parser.add_argument("--faults", type=_faults, default=FAULT_KINDS,
                        help=f"comma-separated fault kinds: {', '.join(FAULT_KINDS)}; or all (default), none")
    parser.add_argument("--liveness", action="store_true",
                        help="also require every operation to finish after the cluster heals")
    parser.add_argument("--workload", choices=WORKLOADS, default=None,
                        help="what the run does (default: run draws one from the seed; explore covers each)")
    parser.add_argument("--plant", type=_plant, default=None, metavar="BUG",
                        help="swap in a named bug (bk sim plants lists them): the run should fail")


def add_parser(commands) -> None:
    sim = commands.add_parser("sim", help="run the deterministic simulator")
    sub = sim.add_subparsers(dest="sim_command", required=True)
    run = sub.add_parser("run", help="run one seed and print what happened")
    run.add_argument("--seed", type=int, required=True)
    _add_common(run)
    run.set_defaults(run=cmd_run)
    explore = sub.add_parser("explore", help="run many seeds; print the replay command of each failure")
    explore.add_argument("--seeds", type=int, required=True, help="how many seeds (of each workload)")
    explore.add_argument("--start", type=int, default=0, help="first seed (default 0)")
    explore.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    _add_common(explore)
    explore.set_defaults(run=cmd_explore)
    plants = sub.add_parser("plants", help="list the planted bugs: NAME WORKLOAD SEEDS")
    plants.set_defaults(run=cmd_plants)


def _scenario(seed: int, *, duration: float, faults, liveness: bool, workload: str | None):
    from bksim.scenario import Scenario
    return Scenario.draw(seed=seed, duration_ns=int(duration * S), faults=faults, is_liveness=liveness,
                         workload=workload)


def cmd_run(args) -> int:
    from bksim.run import EXIT_CRASH, replay_command, run_scenario
    scenario = _scenario(args.seed, duration=args.duration, faults=args.faults, liveness=args.liveness,
                         workload=args.workload)
    for line in scenario.describe():
        print(line)
    if args.plant:
        print(f"planted bug: {args.plant}")
    try:
        result = run_scenario(scenario, plant=args.plant)
    except Exception:
        traceback.print_exc()
        print(f"crash; replay: {replay_command(scenario, args.plant)}")
        return EXIT_CRASH
    for line in result.summary:
        print(line)
    for violation in result.violations:
        print(f"VIOLATION {violation}")
    for failure in result.liveness_failures:
        print(f"LIVENESS {failure}")
    print(f"invariant violations: {len(result.violations)}")
    if result.exit_code:
        print(f"replay: {replay_command(scenario, args.plant)}")
    print(f"trace-hash: {result.trace_hash}")
    return result.exit_code


def explore_one(job: tuple) -> tuple[int, str, int, str, str]:
    """Run one (seed, workload): (seed, workload, exit code, what failed, replay command)."""
    from bksim.run import EXIT_CRASH, replay_command, run_scenario
    seed, workload, duration, faults, liveness, plant = job
    scenario = _scenario(seed, duration=duration, faults=faults, liveness=liveness, workload=workload)
    try:
        result = run_scenario(scenario, plant=plant)
    except Exception as exc:
        return seed, workload, EXIT_CRASH, f"crash: {exc!r}", replay_command(scenario, plant)
    detail = "; ".join([str(v) for v in result.violations[:3]] + result.liveness_failures[:2])
    return seed, workload, result.exit_code, detail, replay_command(scenario, plant)


def explore_jobs(args) -> list[tuple]:
    from bksim.run import RUNNABLE_WORKLOADS
    workloads = [args.workload] if args.workload else list(RUNNABLE_WORKLOADS)
    return [(seed, workload, args.duration, tuple(args.faults), args.liveness, args.plant)
            for workload in workloads for seed in range(args.start, args.start + args.seeds)]


def cmd_explore(args) -> int:
    jobs = explore_jobs(args)
    progress = _Progress(len(jobs))
    if args.jobs > 1:
        import multiprocessing
        with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
            for outcome in pool.imap(explore_one, jobs, chunksize=2):
                progress.report(outcome)
    else:
        for job in jobs:
            progress.report(explore_one(job))
    progress.finish()
    print(f"{progress.passed} passed, {progress.failed} failed")
    return 0 if progress.failed == 0 else 1


class _Progress:
    """Failures as they come (with their replay commands); on a terminal, a running count
    (bkcli.progress: nothing of it into a pipe)."""

    def __init__(self, total: int) -> None:
        from bkcli.progress import Progress
        self.total = total
        self.passed = self.failed = 0
        self._started = time.monotonic()
        self._line = Progress("runs")

    def report(self, outcome: tuple) -> None:
        seed, workload, code, detail, command = outcome
        if code == 0:
            self.passed += 1
        else:
            self.failed += 1
            self._line.clear()
            print(f"seed {seed} ({workload}) failed (exit {code}): {detail}\n  replay: {command}", flush=True)
        done = self.passed + self.failed
        rate = done / max(time.monotonic() - self._started, 1e-9) * 60
        self._line.update(done, self.total, note=f"{self.passed} passed, {self.failed} failed ({rate:.0f}/min)")

    def finish(self) -> None:
        self._line.clear()


def cmd_plants(args) -> int:
    from bksim.plants import PLANTS
    for name in sorted(PLANTS):
        plant = PLANTS[name]
        print(f"{plant.name} {plant.workload} {plant.seeds}")
    return 0
