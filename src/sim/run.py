"""One simulated run: build the world from a seed, run faults then heal, check the history.

Phases: safety (faults everywhere for `duration`), then heal (every bookie restarts, partitions
and outages end) and verify (the ledger workload recovers and reads back every ledger; the
stream and table workloads read their streams and tables whole). In liveness mode the healed
cluster must also finish every operation and the verification within `settle_ns`.
Exit codes follow the house style: 0 ok, 127 crash, 128 liveness failure, 129 violation.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import time
from dataclasses import dataclass, field

from bkcore.ledger.metadata import LedgerMetadata
from bkcore.ledger.schedule import write_set
from bkcore.metaops import Get, MetaCode
from bksim.checker import Violation, check
from bksim.history import History
from bksim.nemesis import FaultStep, Nemesis, apply_schedule
from bksim.plants import planted
from bksim.tasks import finish_async_generator_quietly
from bksim.scenario import MS, S, Scenario
from bksim.workload import LedgerWorkload
from bksim.world import SimWorld

EXIT_OK, EXIT_CRASH, EXIT_LIVENESS, EXIT_VIOLATION = 0, 127, 128, 129
STEP_NS = 100 * MS
# Net allocations between young-generation garbage collections during a run (CPython's default
# is 700). A run allocates a stream of short-lived tuples, messages and effects; at 700 the
# collector runs every few events and mostly walks objects about to be freed anyway (measured on
# `bk bench sim`: about 5% of wall time in collections at 700, 2% at this setting). Collection
# itself is unchanged.
GC_YOUNG_THRESHOLD = 10_000


@dataclass(slots=True)
class RunResult:
    scenario: Scenario
    trace_hash: str
    events_count: int
    simulated_ns: int
    wall_seconds: float
    violations: list[Violation] = field(default_factory=list)
    liveness_failures: list[str] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if self.violations:
            return EXIT_VIOLATION
        if self.liveness_failures:
            return EXIT_LIVENESS
        return EXIT_OK


def replay_command(scenario: Scenario, plant: str | None = None) -> str:
    command = (f"bk sim run --workload {scenario.workload} --seed {scenario.seed} "
               f"--duration {scenario.duration_ns / S:g}")
    if plant is not None:
        command += f" --plant {plant}"
    if scenario.faults != Scenario.draw(seed=scenario.seed).faults:
        command += f" --faults {','.join(sorted(scenario.faults)) or 'none'}"
    if scenario.is_liveness:
        command += " --liveness"
    return command


def _has_pending_adds(history: History) -> bool:
    return history.pending_add_count > 0


def _record_replicas(world: SimWorld, workload: LedgerWorkload, history: History) -> None:
    """Look at what every bookie holds for every closed ledger (read-only views)."""
    for ledger_id, info in sorted(workload.ledgers.items()):
        if info.is_deleted:
            continue
        result = world.metastore.read_applied(Get(world.layout.ledger_path(ledger_id)))
        if result.code is not MetaCode.OK:
            continue
        metadata = LedgerMetadata.from_bytes(result.data, version=result.version)
        if not metadata.is_closed:
            continue
        ensemble_size, write_quorum_size = metadata.ensemble_size, metadata.write_quorum_size
        for entry_id in range(metadata.last_entry_id + 1):
            ensemble = metadata.ensemble_for(entry_id)
            copies = []
            for position in write_set(entry_id, ensemble_size=ensemble_size, write_quorum_size=write_quorum_size):
                bookie = ensemble[position]
                core = world.bookies[bookie].core
                if core is None:
                    break   # a bookie still down: what it holds is unknown, judge nothing
                copies.append((bookie, core.storage.get_entry(ledger_id, entry_id)))
            else:
                history.replicas_seen(ledger_id=ledger_id, entry_id=entry_id,
                                      ack_quorum_size=metadata.ack_quorum_size, copies=tuple(copies))


@contextlib.contextmanager
def _simulated_async_generators():
    """Async generators first iterated during the run are finished by the simulator's own
    finalizer (bksim.tasks.finish_async_generator_quietly)."""
    hooks = sys.get_asyncgen_hooks()
    sys.set_asyncgen_hooks(firstiter=hooks.firstiter, finalizer=finish_async_generator_quietly)
    try:
        yield
    finally:
        sys.set_asyncgen_hooks(*hooks)


@contextlib.contextmanager
def _young_collections_every(allocation_count: int):
    """Raise the young-generation GC threshold for the duration, then restore the caller's."""
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], allocation_count), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)


RUNNABLE_WORKLOADS = ("ledger", "stream", "table", "mixed")


def _new_world(scenario: Scenario) -> SimWorld:
    """The scenario's cluster: its bookies, before any workload or fault."""
    world = SimWorld(scenario=scenario, bookie_config=scenario.bookie_config(),
                     client_config=scenario.client_config())
    for index in range(scenario.bookie_count):
        world.add_bookie(f"bookie-{index}")
    return world


def run_scenario(scenario: Scenario, *, schedule: list[FaultStep] = (), plant: str | None = None) -> RunResult:
    """Run the scenario (with the named planted bug swapped in, if any: bksim.plants)."""
    with _young_collections_every(GC_YOUNG_THRESHOLD), planted(plant), _simulated_async_generators():
        if scenario.workload == "ledger":
            return _run_scenario(scenario, schedule)
        return _run_service_scenario(scenario, schedule)


def _service_workload(world: SimWorld):
    from bksim.stream_history import StreamHistory
    from bksim.workload_stream import StreamWorkload
    workload = world.scenario.workload
    if workload == "stream":
        return StreamWorkload(world=world, history=StreamHistory())
    if workload == "table":
        from bksim.table_history import TableHistory
        from bksim.workload_table import TableWorkload
        return TableWorkload(world=world, history=TableHistory())
    if workload == "mixed":
        from bksim.workload_mixed import MixedWorkload
        return MixedWorkload(world=world)
    raise ValueError(f"unknown workload {workload!r}")


# After healing, in-flight operations settle this long before the verifier starts.
SERVICE_DRAIN_NS = 2 * S


def _run_service_scenario(scenario: Scenario, schedule: list[FaultStep]) -> RunResult:
    """The stream and table workloads: application processes over the simulated cluster."""
    started = time.perf_counter()
    world = _new_world(scenario)
    workload = _service_workload(world)
    workload.start()
    world.start_checkpoints()
    Nemesis(world=world, end_ns=scenario.duration_ns).start()
    workload.start_nemesis(scenario.duration_ns)
    apply_schedule(world, list(schedule))
    world.loop.run_until(scenario.duration_ns)

    workload.stop_writing()
    world.heal()
    workload.heal()
    healed_at_ns = world.now_ns
    world.loop.run_until(healed_at_ns + SERVICE_DRAIN_NS)
    workload.start_verification()
    deadline_ns = healed_at_ns + scenario.settle_ns
    while world.now_ns < deadline_ns and not workload.is_verified:
        world.loop.run_until(world.now_ns + STEP_NS)

    workload.stop()
    result = RunResult(scenario=scenario, trace_hash=world.trace.hexdigest(),
                       events_count=world.loop.events_run_count, simulated_ns=world.now_ns,
                       wall_seconds=time.perf_counter() - started)
    result.violations = workload.check()
    if scenario.is_liveness and not workload.is_verified:
        last = workload.verify_failures[-1] if workload.verify_failures else "no progress"
        result.liveness_failures.append(f"the final read was unfinished {scenario.settle_ns / S:g}s after healing "
                                        f"({last})")
    counts = world.counts
    result.summary = workload.summary() + [
        f"faults: crashes={counts.crashes} restarts={counts.restarts} pauses={counts.pauses} "
        f"disk_full_kills={counts.disk_full_kills} torn_tails={counts.journal_tails_repaired} "
        f"metastore_losses={counts.metadata_connection_losses} checkpoints={counts.checkpoints}",
        f"network: {world.network.statistics()}",
        f"events: {result.events_count} in {result.simulated_ns / S:.1f} simulated s, "
        f"{result.wall_seconds:.2f} wall s",
    ]
    return result


def _run_scenario(scenario: Scenario, schedule: list[FaultStep]) -> RunResult:
    started = time.perf_counter()
    world = _new_world(scenario)
    history = History()
    workload = LedgerWorkload(world=world, history=history)
    workload.start()
    world.start_checkpoints()
    Nemesis(world=world, end_ns=scenario.duration_ns).start()
    apply_schedule(world, list(schedule))
    world.loop.run_until(scenario.duration_ns)

    workload.stop_writing()
    world.heal()
    healed_at_ns = world.now_ns
    # Let in-flight operations settle before reading everything back.
    drain_deadline_ns = healed_at_ns + scenario.settle_ns // 2
    while world.now_ns < drain_deadline_ns and _has_pending_adds(history):
        world.loop.run_until(world.now_ns + STEP_NS)
    workload.start_verification()
    deadline_ns = healed_at_ns + scenario.settle_ns
    while world.now_ns < deadline_ns and not (workload.is_verified and not _has_pending_adds(history)):
        world.loop.run_until(world.now_ns + STEP_NS)

    result = RunResult(scenario=scenario, trace_hash=world.trace.hexdigest(),
                       events_count=world.loop.events_run_count, simulated_ns=world.now_ns,
                       wall_seconds=time.perf_counter() - started)
    if workload.is_verified:
        _record_replicas(world, workload, history)
    result.violations = check(history)
    pending = [a for a in history.adds if a.outcome == "pending"]
    assert len(pending) == history.pending_add_count
    if scenario.is_liveness:
        if pending:
            result.liveness_failures.append(f"{len(pending)} adds unresolved {scenario.settle_ns / S:g}s after healing")
        if not workload.is_verified:
            last = workload.verifier.failures[-1] if workload.verifier.failures else "no progress"
            result.liveness_failures.append(f"read-back of every ledger unfinished after healing ({last})")
    counts = world.counts
    outcomes = {kind: sum(1 for a in history.adds if a.outcome == kind) for kind in ("ok", "unknown", "pending")}
    result.summary = [
        f"ledgers: {len(workload.ledgers)} created, {sum(i.is_deleted for i in workload.ledgers.values())} deleted; "
        f"verified: {'yes' if workload.is_verified else 'no'}",
        f"adds: {len(history.adds)} invoked, {outcomes['ok']} acknowledged, {outcomes['unknown']} failed "
        f"(outcome unknown), {outcomes['pending']} unresolved",
        f"reads: {len(history.reads)}; LAC observations: {len(history.lacs)}; closes seen: {len(history.closes)}",
        f"faults: crashes={counts.crashes} restarts={counts.restarts} pauses={counts.pauses} "
        f"disk_full_kills={counts.disk_full_kills} torn_tails={counts.journal_tails_repaired} "
        f"refused_starts={counts.restart_refusals} metastore_losses={counts.metadata_connection_losses} "
        f"checkpoints={counts.checkpoints} ledgers_collected={counts.ledgers_collected} "
        f"readonly_transitions={counts.readonly_transitions} compacted_entries={counts.entries_compacted} "
        f"reclaimed_log_bytes={counts.log_bytes_reclaimed}",
        f"network: {world.network.statistics()}",
        f"events: {result.events_count} in {result.simulated_ns / S:.1f} simulated s, "
        f"{result.wall_seconds:.2f} wall s",
    ]
    return result
