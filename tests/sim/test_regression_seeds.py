"""Seeds that once found a bug in the stream and table layers, each kept with the fix that made
it pass (3 simulated seconds, as found). They run on every change, whatever the sweeps' ranges.
Knobs drawn after a seed was found (later additions to Scenario.draw) may have changed its run
since, so a seed here guards its bug less surely than the unit test beside each fix."""

import pytest

from bksim.run import replay_command, run_scenario
from bksim.scenario import S, Scenario

REGRESSION_SEEDS = [
    # (workload, seed, liveness, the fix[, simulated seconds: 3 unless given])
    ("stream", 2, False, "a roll keeps the txids write() handed out meanwhile (bkcore.stream.writer)"),
    ("stream", 3, False, "the same: two records had one txid"),
    ("stream", 20, False, "a long-poll failure leaves a tail as itself, not in a group (bkcore.runtime.race)"),
    ("stream", 24, False, "a tail whose metastore session expired stops instead of spinning"),
    ("table", 1, False, "a restarted server replaces its previous session's claims (bkcore.table.ownership)"),
    ("table", 31, True, "ranges open in a task of the service, not in the request that needs them"),
    ("table", 90, True, "creating a stream again completes one whose creation crashed half-way"),
    ("table", 180, True, "a read waits for the commands accepted before it (bkcore.table.range)"),
    ("mixed", 26, True, "watches resume from the last revision delivered (bkcore.table.watch_resume)"),
    ("mixed", 2164, False, "the read fix of table seed 180, found again by bk sim explore"),
    ("table", 52, False, "a watch counts as started once its log is in the history, whatever came after "
                         "(bksim.workload_table); 10 simulated seconds", 10),
    ("table", 2012, False, "raft-lite confirms a ping only after a heartbeat round (bkmetastore.raftlite.core); "
                           "5 simulated seconds", 5),
]


@pytest.mark.parametrize("workload, seed, is_liveness, fix, seconds",
                         [(*row, 3)[:5] for row in REGRESSION_SEEDS],
                         ids=[f"{row[0]}-{row[1]}" for row in REGRESSION_SEEDS])
def test_a_seed_that_found_a_bug_stays_clean(workload, seed, is_liveness, fix, seconds):
    scenario = Scenario.draw(seed=seed, duration_ns=seconds * S, is_liveness=is_liveness, workload=workload)
    result = run_scenario(scenario)
    problems = [str(v) for v in result.violations] + result.liveness_failures
    assert not problems, f"{problems[:3]} (fixed by: {fix}) -- replay: {replay_command(scenario)}"
