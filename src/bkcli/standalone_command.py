"""`bk standalone`: until the real cluster exists (issue 4), run a simulated cluster with
faults and print what happened, so the README's first command shows the system working."""

from __future__ import annotations


def add_parser(commands) -> None:
    standalone = commands.add_parser("standalone", help="run a local cluster (for now: simulated, with faults)")
    standalone.add_argument("--seed", type=int, default=1)
    standalone.add_argument("--duration", type=float, default=10.0)
    standalone.set_defaults(run=cmd_standalone)


def cmd_standalone(args) -> int:
    from bkcli.sim_commands import cmd_run
    from sim.scenario import FAULT_KINDS
    import argparse
    print("bk standalone: the real TCP cluster is not built yet; running a simulated cluster of")
    print("bookies, writers, tailing readers and recoveries with faults instead.\n")
    return cmd_run(argparse.Namespace(seed=args.seed, duration=args.duration, faults=FAULT_KINDS,
                                      liveness=True))
