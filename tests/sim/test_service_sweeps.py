"""Seed sweeps of the workloads that run stream storage in simulated processes: stream, table
and mixed, each over SIM_SERVICE_SEEDS seeds (300 under CI, 20 locally) of 3 simulated
seconds, half of them in liveness mode; every one clean."""

import os

import pytest

from bksim.run import replay_command, run_scenario
from bksim.scenario import S, Scenario

IS_CI = os.environ.get("CI") == "true"
SWEEP_SEED_COUNT = int(os.environ.get("SIM_SERVICE_SEEDS", "300" if IS_CI else "20"))
CHUNK_SIZE = 50


@pytest.mark.parametrize("chunk_start", range(0, SWEEP_SEED_COUNT, CHUNK_SIZE))
@pytest.mark.parametrize("workload", ["stream", "table", "mixed"])
def test_service_seed_sweep(workload, chunk_start):
    failures = []
    for seed in range(chunk_start, min(chunk_start + CHUNK_SIZE, SWEEP_SEED_COUNT)):
        scenario = Scenario.draw(seed=seed, duration_ns=3 * S, is_liveness=seed % 2 == 0, workload=workload)
        result = run_scenario(scenario)
        problems = [str(v) for v in result.violations] + result.liveness_failures
        if problems:
            failures.append(f"{problems[0]} -- replay: {replay_command(scenario)}")
    assert not failures, "\n".join(failures)
