"""Nemesis: injects process, network and metastore faults into a SimWorld on a fixed tick.

Every tick (100 ms of simulated time) each fault kind gets its chance, drawn from the world's
rng with the per-second probabilities of the scenario. Crashed bookies restart after an
exponential delay. Any number of bookies may be down at once; the
run's final heal restarts them all.
"""

from __future__ import annotations

from sim.scenario import MS
from sim.world import SimWorld

TICK_NS = 100 * MS
PAUSE_DURATION_MEAN_NS = 1_500 * MS


class Nemesis:
    def __init__(self, *, world: SimWorld, end_ns: int) -> None:
        self.world = world
        self.end_ns = end_ns
        self.rng = world.rng
        self.tick_fraction = TICK_NS / 1e9

    def start(self) -> None:
        self.world.loop.call_later(TICK_NS, self._tick)

    def _chance(self, per_second: float) -> bool:
        return per_second > 0 and self.rng.random() < per_second * self.tick_fraction

    def _tick(self) -> None:
        world, scenario = self.world, self.world.scenario
        now_ns = world.now_ns
        if now_ns >= self.end_ns or not world.faults_enabled:
            return
        for bookie_id in sorted(world.bookies):
            if self._chance(scenario.crash_probability_per_second):
                delay_ns = int(self.rng.expovariate(1 / scenario.restart_delay_mean_ns))
                world.crash_bookie(bookie_id, restart_after_ns=delay_ns)
            elif self._chance(scenario.pause_probability_per_second):
                world.pause_node(bookie_id, int(self.rng.expovariate(1 / PAUSE_DURATION_MEAN_NS)))
        for client_id in sorted(world.clients):
            if self._chance(scenario.pause_probability_per_second / 2):
                world.pause_node(client_id, int(self.rng.expovariate(1 / PAUSE_DURATION_MEAN_NS)))
        nodes = sorted(world.bookies) + sorted(world.clients)
        world.network.maybe_start_random_partition(nodes=nodes, now_ns=now_ns, interval_ns=TICK_NS)
        metastore = scenario.metastore
        if world.metastore_down_until_ns <= now_ns and self._chance(metastore.outage_probability_per_second):
            duration_ns = int(self.rng.expovariate(1 / max(metastore.outage_duration_mean_ns, 1)))
            world.metastore_down_until_ns = now_ns + duration_ns
            world.trace.record(now_ns, "metastore-down", duration_ns)
        world.loop.call_later(TICK_NS, self._tick)
