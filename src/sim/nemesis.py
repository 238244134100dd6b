"""Nemesis: injects process, network and metastore faults into a SimWorld on a fixed tick.

Every tick (100 ms of simulated time) each fault kind gets its chance, drawn from the world's
rng with the per-second probabilities of the scenario. Crashed bookies restart after an
exponential delay. Any number of bookies may be down at once; the
run's final heal restarts them all.
"""

from __future__ import annotations

from dataclasses import dataclass

from bksim.scenario import MS
from bksim.world import SimWorld

TICK_NS = 100 * MS
PAUSE_DURATION_MEAN_NS = 1_500 * MS


@dataclass(frozen=True, slots=True)
class FaultStep:
    """One scheduled fault: at `at_ns`, do `action` to `target` for `duration_ns`.
    Actions: crash (restart after duration), pause, isolate (partition the target from every
    other node), cut (one-way: the target hears nobody), metastore-down."""

    at_ns: int
    action: str
    target: int            # index into the sorted bookie list (ignored by metastore-down)
    duration_ns: int


SCHEDULED_ACTIONS = ("crash", "pause", "isolate", "cut", "metastore-down")


def apply_schedule(world: SimWorld, steps: list[FaultStep]) -> None:
    """Schedule explicit faults (hypothesis generates these; failures shrink to a few steps)."""
    for step in steps:
        assert step.action in SCHEDULED_ACTIONS, step.action
        world.loop.call_at(step.at_ns, _apply_step, world, step)


def _apply_step(world: SimWorld, step: FaultStep) -> None:
    if not world.faults_enabled:
        return
    bookies = sorted(world.bookies)
    target = bookies[step.target % len(bookies)]
    now_ns = world.now_ns
    world.trace.record(now_ns, "step", step.action, target, step.duration_ns)
    if step.action == "crash":
        world.crash_bookie(target, restart_after_ns=step.duration_ns)
    elif step.action == "pause":
        world.pause_node(target, step.duration_ns)
    elif step.action in ("isolate", "cut"):
        others = set(world.nodes) - {target}
        if step.action == "isolate":
            world.network.partition({target}, others, until_ns=now_ns + step.duration_ns)
        else:
            world.network.partition(others, {target}, is_one_way=True, until_ns=now_ns + step.duration_ns)
    else:
        world.metastore_down_until_ns = max(world.metastore_down_until_ns, now_ns + step.duration_ns)


class Nemesis:
    def __init__(self, *, world: SimWorld, end_ns: int) -> None:
        self.world = world
        self.end_ns = end_ns
        self.rng = world.rng
        self.tick_fraction = TICK_NS / 1e9

    def start(self) -> None:
        self.world.loop.call_later(TICK_NS, self._tick)

    def chance(self, per_second: float) -> bool:
        """Whether something with this rate per second happens in this tick."""
        return per_second > 0 and self.rng.random() < per_second * self.tick_fraction

    def _tick(self) -> None:
        world, scenario = self.world, self.world.scenario
        now_ns = world.now_ns
        if now_ns >= self.end_ns or not world.faults_enabled:
            return
        bookie_ids, client_ids = sorted(world.bookies), sorted(world.clients)
        for bookie_id in bookie_ids:
            if self.chance(scenario.crash_probability_per_second):
                delay_ns = int(self.rng.expovariate(1 / scenario.restart_delay_mean_ns))
                world.crash_bookie(bookie_id, restart_after_ns=delay_ns)
            elif self.chance(scenario.pause_probability_per_second):
                world.pause_node(bookie_id, int(self.rng.expovariate(1 / PAUSE_DURATION_MEAN_NS)))
        for client_id in client_ids:
            if self.chance(scenario.pause_probability_per_second / 2):
                world.pause_node(client_id, int(self.rng.expovariate(1 / PAUSE_DURATION_MEAN_NS)))
        world.network.maybe_start_random_partition(nodes=bookie_ids + client_ids, now_ns=now_ns, interval_ns=TICK_NS)
        metastore = scenario.metastore
        if world.metastore_down_until_ns <= now_ns and self.chance(metastore.outage_probability_per_second):
            duration_ns = int(self.rng.expovariate(1 / max(metastore.outage_duration_mean_ns, 1)))
            world.metastore_down_until_ns = now_ns + duration_ns
            world.trace.record(now_ns, "metastore-down", duration_ns)
        world.metastore.draw_faults(self)
        world.loop.call_later(TICK_NS, self._tick)
