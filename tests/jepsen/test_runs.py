"""Short jepsen-like runs of real processes (CI's version of issue 7's harness): the ledger
workload under kill -9, pauses, proxy partitions and torn journal tails, and the table
workload under faults of the stream storage process; each must end `valid: true` and leave a
history and plots behind. About 90 s together on a 2-core machine."""

import os
import subprocess
import sys

import pytest

RUN = os.path.join(os.path.dirname(__file__), "..", "..", "jepsen-like", "run")


@pytest.mark.parametrize("workload, nemesis, seconds, seed", [
    ("ledger", "kill,pause,partition,corrupt", 25, 11),
    ("table", "kill,pause,leader", 20, 12),
])
def test_a_short_run_is_valid(tmp_path, workload, nemesis, seconds, seed):
    completed = subprocess.run(
        [sys.executable, RUN, "--workload", workload, "--nemesis", nemesis, "--time", str(seconds),
         "--seed", str(seed), "--results", str(tmp_path)],
        capture_output=True, text=True, timeout=240)
    lines = completed.stdout.strip().splitlines()
    assert lines and lines[-1] == "valid: true", completed.stdout[-3000:] + completed.stderr[-3000:]
    assert completed.returncode == 0
    (folder,) = os.listdir(tmp_path)
    for name in ("history.jsonl", "timeline.html", "latency.html", "report.txt"):
        assert os.path.getsize(os.path.join(tmp_path, folder, name)) > 0
    assert f"--seed {seed}" in completed.stdout      # the replay command
