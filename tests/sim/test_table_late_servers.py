"""The simulator's table workload with servers that join late: the first server owns every
range, the late ones get theirs handed over (bkcore.table.rebalance) while clients and watchers
go on, and the history stays clean."""

import dataclasses
import re

from bksim.run import run_scenario
from bksim.scenario import S, Scenario


def handovers_of(summary: list[str]) -> int:
    (count,) = re.findall(r"ranges handed over (\d+)", " ".join(summary))
    return int(count)


def test_servers_that_join_late_get_ranges_handed_over_and_the_history_stays_clean():
    drawn = Scenario.draw(seed=7, duration_ns=5 * S, faults=(), is_liveness=True, workload="table")
    scenario = dataclasses.replace(drawn, table_server_count=1, table_late_server_count=2, table_range_count=3)
    result = run_scenario(scenario)
    problems = [str(v) for v in result.violations] + result.liveness_failures
    assert not problems, f"{problems[:3]} in {scenario.describe()}"
    assert handovers_of(result.summary) >= 1, result.summary
