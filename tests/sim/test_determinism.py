"""Same seed, same history: two runs in separate processes with different PYTHONHASHSEED print
the same trace hash, for every workload; different seeds print different ones."""

import os
import subprocess
import sys

import pytest

from sim.run import RUNNABLE_WORKLOADS

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src")


def trace_hash(seed: int, hash_seed: str, workload: str, duration: str = "2") -> str:
    env = dict(os.environ, PYTHONHASHSEED=hash_seed, PYTHONPATH=SRC)
    completed = subprocess.run(
        [sys.executable, "-m", "bkcli.main", "sim", "run", "--workload", workload, "--seed", str(seed),
         "--duration", duration],
        capture_output=True, text=True, env=env, timeout=300)
    last_line = completed.stdout.strip().splitlines()[-1]
    assert last_line.startswith("trace-hash: "), completed.stdout + completed.stderr
    return last_line.split(": ", 1)[1]


@pytest.mark.parametrize("workload", RUNNABLE_WORKLOADS)
@pytest.mark.parametrize("seed", [3, 11])        # the service workloads draw raft-lite for 3, memory for 11
def test_same_seed_same_trace_across_processes(seed, workload):
    assert trace_hash(seed, "0", workload) == trace_hash(seed, "12345", workload)


@pytest.mark.parametrize("workload", RUNNABLE_WORKLOADS)
def test_different_seeds_differ(workload):
    assert trace_hash(5, "1", workload) != trace_hash(6, "1", workload)
