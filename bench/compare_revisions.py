"""Before and after in one run: a `bk bench` command run alternately from two revisions.

    python bench/compare_revisions.py BASE [NEW] --rounds 3 \
        --field half_peak_load.add_latency_p99_ms --field pipelined.adds_per_second \
        -- ledger --bookies 1 --ensemble 1 --write-quorum 1 --ack-quorum 1 --seconds 4

BASE and NEW are git revisions of this repository (NEW: the working tree as it is). Each is
checked out in a temporary worktree (the working tree is used in place) and run through its
own src/ by this interpreter, so both use the same installed dependencies. The
rounds alternate (base, new, base, new, ...) so that a machine whose speed drifts affects both
alike. It prints one JSON object: each field's values per round for base and new, their
medians, and new/base.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]


def import_path(tree: pathlib.Path) -> str:
    """PYTHONPATH that imports this tree's packages (src/ holds them, and the links that name
    the folders installed under other names)."""
    return str(tree / "src")


def value_at(report: dict, dotted: str):
    """report's value at a dotted path; a number picks an item of a list (pipelined.1.rate)."""
    for part in dotted.split("."):
        if isinstance(report, list) and part.isdigit() and int(part) < len(report):
            report = report[int(part)]
        elif isinstance(report, dict) and part in report:
            report = report[part]
        else:
            return None
    return report


def run_bench(pythonpath: str, bench_args: list[str]) -> dict:
    environment = {**os.environ, "PYTHONPATH": pythonpath}
    completed = subprocess.run([sys.executable, "-m", "bkcli.main", "bench", *bench_args], env=environment,
                               capture_output=True, text=True)
    if completed.returncode != 0:
        raise SystemExit(f"bk bench {' '.join(bench_args)} failed:\n{completed.stderr[-2000:]}")
    return json.loads(completed.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="git revision measured first in each round")
    parser.add_argument("new", nargs="?", help="git revision to compare (default: the working tree)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--field", action="append", required=True,
                        help="dotted path into the JSON report (a number picks a list's item)")
    argv = sys.argv[1:]
    if "--" not in argv:
        parser.error("give the bk bench arguments after --, e.g. -- ledger --seconds 4")
    split = argv.index("--")
    args, bench_args = parser.parse_args(argv[:split]), argv[split + 1:]
    with tempfile.TemporaryDirectory(prefix="compare-revisions-") as scratch:
        scratch_path = pathlib.Path(scratch)
        trees = {}
        for label, revision in (("base", args.base), ("new", args.new)):
            if revision is None:
                trees[label] = ROOT
                continue
            tree = scratch_path / label
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), revision], check=True)
            trees[label] = tree
        try:
            paths = {label: import_path(tree) for label, tree in trees.items()}
            values: dict[str, dict[str, list]] = {field: {"base": [], "new": []} for field in args.field}
            for round_number in range(args.rounds):
                for label in ("base", "new"):
                    print(f"round {round_number + 1}/{args.rounds}: {label}", file=sys.stderr)
                    report = run_bench(paths[label], bench_args)
                    for field in args.field:
                        values[field][label].append(value_at(report, field))
        finally:
            for label, tree in trees.items():
                if tree != ROOT:
                    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    summary = {}
    for field, by_label in values.items():
        medians = {label: statistics.median([v for v in listed if v is not None]) if any(v is not None for v in listed)
                   else None for label, listed in by_label.items()}
        ratio = (round(medians["new"] / medians["base"], 3) if medians["base"] and medians["new"] is not None else None)
        summary[field] = {**by_label, "base_median": medians["base"], "new_median": medians["new"], "new_over_base": ratio}
    print(json.dumps({"base": args.base, "new": args.new or "working tree", "bench": bench_args, "rounds": args.rounds,
                      "fields": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
