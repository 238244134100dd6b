"""Every planted bug is caught by its workload's checker within the number of seeds it states,
from more than one start; and without the plant the same code is clean (the sweeps)."""

import subprocess
import sys
import os

import pytest

from bksim.plants import PLANTS, planted
from bksim.run import run_scenario
from bksim.scenario import S, Scenario

STARTS = (0, 5000)
SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src")


def first_caught(name: str, start: int) -> int | None:
    plant = PLANTS[name]
    for seed in range(start, start + plant.seeds):
        scenario = Scenario.draw(seed=seed, duration_ns=3 * S, workload=plant.workload, is_liveness=True)
        if run_scenario(scenario, plant=name).exit_code != 0:
            return seed
    return None


@pytest.mark.parametrize("start", STARTS)
@pytest.mark.parametrize("name", sorted(PLANTS))
def test_each_plant_is_caught_within_its_seeds(name, start):
    assert first_caught(name, start) is not None, \
        f"{name} went uncaught for {PLANTS[name].seeds} {PLANTS[name].workload} seeds from {start}"


def test_a_plant_is_undone_after_its_run():
    from bkcore.client.handles import WriteHandle
    before = WriteHandle.start_add
    with planted("stream-ack-before-durable"):
        assert WriteHandle.start_add is not before
    assert WriteHandle.start_add is before


def test_the_cli_lists_plants_and_replays_them():
    env = dict(os.environ, PYTHONPATH=SRC)
    listing = subprocess.run([sys.executable, "-m", "bkcli.main", "sim", "plants"], capture_output=True,
                             text=True, env=env, timeout=60).stdout.split("\n")
    rows = [line.split() for line in listing if line]
    assert {row[0] for row in rows} == set(PLANTS)
    assert all(len(row) == 3 and row[2].isdigit() for row in rows)
    seed = first_caught("stream-ack-before-durable", 0)
    run = subprocess.run([sys.executable, "-m", "bkcli.main", "sim", "run", "--workload", "stream", "--seed",
                          str(seed), "--duration", "3", "--liveness", "--plant", "stream-ack-before-durable"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode in (128, 129), run.stdout[-2000:]     # liveness failure or violation
    assert "replay: bk sim run --workload stream" in run.stdout and "--plant stream-ack-before-durable" in run.stdout
