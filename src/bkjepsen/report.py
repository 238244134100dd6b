"""The report of a run: counts of operations by kind and outcome, faults by kind, the
violations found, where the results are, the replay command, and last `valid: true|false`.
write_results puts history.jsonl, timeline.html, latency.html and report.txt in the folder.
replay_command lives here, the one place that spells it; bkjepsen.runner prints it at the start.
"""

from __future__ import annotations

import argparse
import os
from collections import Counter

from bkjepsen.plots import latency_html, timeline_html

VIOLATIONS_SHOWN_MAX = 30


def replay_command(args: argparse.Namespace) -> str:
    """The command that runs this again with the same options and seed (bkjepsen.runner's
    parse_args reads them)."""
    return (f"jepsen-like/run --workload {args.workload} --nemesis {args.nemesis} --time {args.time:g} "
            f"--seed {args.seed} --metastore {args.metastore} --bookies {args.bookies}"
            + (f" --stream-storage-servers {args.stream_storage_servers}" if args.workload == "table" else ""))


def report_lines(result, args, folder: str) -> list[str]:
    history = result.history
    outcomes = Counter((op.kind, op.outcome) for op in history.ops)
    lines = [f"workload {args.workload}, metastore {args.metastore}, {args.bookies} bookies, "
             f"{args.time:g} s, seed {args.seed}",
             f"operations: {len(history.ops)}"]
    for kind in sorted({kind for kind, _ in outcomes}):
        counts = ", ".join(f"{outcome} {outcomes[kind, outcome]}" for outcome in ("ok", "unknown", "fail")
                           if outcomes[kind, outcome])
        lines.append(f"  {kind:<12} {counts}")
    faults = ", ".join(f"{kind} {count}" for kind, count in sorted(result.nemesis_counts.items())) or "none"
    lines.append(f"nemesis: {faults}")
    lines += [f"note: {note}" for note in result.notes]
    lines.append(f"violations: {len(result.violations)}")
    lines += [f"  {violation}" for violation in result.violations[:VIOLATIONS_SHOWN_MAX]]
    if len(result.violations) > VIOLATIONS_SHOWN_MAX:
        lines.append(f"  ... and {len(result.violations) - VIOLATIONS_SHOWN_MAX} more (report.txt)")
    lines.append(f"results: {folder}")
    lines.append(f"replay: {replay_command(args)}")
    lines.append(f"valid: {'true' if result.is_valid else 'false'}")
    return lines


def write_results(result, args, folder: str) -> None:
    result.history.write_jsonl(os.path.join(folder, "history.jsonl"))
    title = f"{args.workload} seed {args.seed}"
    with open(os.path.join(folder, "timeline.html"), "w") as file:
        file.write(timeline_html(result.history, f"timeline: {title}"))
    with open(os.path.join(folder, "latency.html"), "w") as file:
        file.write(latency_html(result.history, f"latency: {title}"))
    with open(os.path.join(folder, "report.txt"), "w") as file:
        lines = report_lines(result, args, folder)
        file.write("\n".join(lines[:-1] + [f"  {v}" for v in result.violations[VIOLATIONS_SHOWN_MAX:]]
                             + lines[-1:]) + "\n")


def print_report(result, args, folder: str) -> None:
    print("\n".join(report_lines(result, args, folder)), flush=True)
