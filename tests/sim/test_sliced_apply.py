"""The simulator applies a drawn share of the bookies' durable journal writes in slices
(bksim.world: begin_persisted, then apply_persisted a few records at a time), with other inputs
reaching the bookie between the slices, as a real bookie serves its other connections while it
applies a large write its journal thread synced. Runs with faults find nothing wrong."""

from bkcore.bookie import bookie as bookie_module
from bkcore.bookie.bookie import Bookie
from bksim.run import run_scenario
from bksim.scenario import S, Scenario


def test_writes_are_applied_in_slices_with_other_inputs_between_them_and_no_violation(monkeypatch):
    seen = {"slices": 0, "inputs_between": 0}
    receive, apply_persisted = Bookie.receive, Bookie.apply_persisted

    def receive_counted(self, message, **options):
        if self.is_applying:
            seen["inputs_between"] += 1
        return receive(self, message, **options)

    def apply_counted(self, now_ns, *, record_count_max=bookie_module.RECORD_COUNT_UNBOUNDED):
        if record_count_max != bookie_module.RECORD_COUNT_UNBOUNDED:
            seen["slices"] += 1
        return apply_persisted(self, now_ns, record_count_max=record_count_max)
    monkeypatch.setattr(Bookie, "receive", receive_counted)
    monkeypatch.setattr(Bookie, "apply_persisted", apply_counted)
    for seed in range(3):
        result = run_scenario(Scenario.standard(seed=seed, duration_ns=3 * S))
        assert not result.violations and not result.liveness_failures, (seed, result.violations[:1])
    assert seen["slices"] > 100 and seen["inputs_between"] > 0, seen
