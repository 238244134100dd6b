"""SimNetwork: who hears whom, after how long. Latency (a minimum plus an exponential tail, scaled
per link), loss, duplication, reordering, and partitions (symmetric or one-way) that heal by
themselves or when heal() is called."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from sim.options import NetworkOptions


LINK_LATENCY_SCALES = (0.5, 1.0, 1.0, 2.0, 5.0)


@dataclass(frozen=True, slots=True)
class _Partition:
    side_a: frozenset[str]
    side_b: frozenset[str]
    is_one_way: bool          # only side_a -> side_b is cut
    until_ns: int | None

    def blocks(self, source: str, destination: str) -> bool:
        if source in self.side_a and destination in self.side_b:
            return True
        return not self.is_one_way and source in self.side_b and destination in self.side_a


@dataclass(frozen=True, slots=True)
class NetworkStatistics:
    delivered: int
    lost: int
    duplicated: int
    blocked: int
    partitions: int

    def __str__(self) -> str:
        return (f"delivered={self.delivered} lost={self.lost} duplicated={self.duplicated} "
                f"blocked={self.blocked} partitions={self.partitions}")


class SimNetwork:
    def __init__(self, *, rng: random.Random, options: NetworkOptions) -> None:
        self.rng = rng
        self.options = options
        self._partitions: list[_Partition] = []
        # Each link gets its own latency scale, drawn from the rng when the link is first used
        # (first use happens in a seed-determined order, so this stays deterministic).
        self._link_scale: dict[tuple[str, str], float] = {}
        self._delivered = self._lost = self._duplicated = self._blocked = self._partition_count = 0
        extra = options.latency_mean_ns - options.latency_min_ns
        self._latency_rate = 1 / extra if extra > 0 else 0.0

    def _latency_ns(self, link: tuple[str, str]) -> int:
        options = self.options
        scale = self._link_scale.get(link)
        if scale is None:
            scale = self._link_scale[link] = self.rng.choice(LINK_LATENCY_SCALES)
        latency = options.latency_min_ns
        if self._latency_rate:
            latency += int(self.rng.expovariate(self._latency_rate) * scale)
        if options.reorder_probability and self.rng.random() < options.reorder_probability:
            latency += self.rng.randrange(options.reorder_delay_max_ns + 1)
        return latency

    def is_blocked(self, source: str, destination: str, now_ns: int) -> bool:
        if not self._partitions:
            return False
        self._partitions = [p for p in self._partitions if p.until_ns is None or p.until_ns > now_ns]
        return any(p.blocks(source, destination) for p in self._partitions)

    def delivery_delays_ns(self, *, source: str, destination: str, now_ns: int) -> list[int]:
        if self.is_blocked(source, destination, now_ns):
            self._blocked += 1
            return []
        options = self.options
        if options.loss_probability and self.rng.random() < options.loss_probability:
            self._lost += 1
            return []
        self._delivered += 1
        link = (source, destination)
        if options.duplicate_probability and self.rng.random() < options.duplicate_probability:
            self._duplicated += 1
            return [self._latency_ns(link), self._latency_ns(link)]
        return [self._latency_ns(link)]

    def partition(self, side_a: set[str], side_b: set[str], *, is_one_way: bool = False,
                  until_ns: int | None = None) -> None:
        self._partitions.append(_Partition(frozenset(side_a), frozenset(side_b), is_one_way, until_ns))
        self._partition_count += 1

    def heal(self, *, end_random_faults: bool = False) -> None:
        """End every partition; with end_random_faults also stop losing, duplicating and
        reordering messages and starting new partitions (latency stays)."""
        self._partitions.clear()
        if end_random_faults:
            self.options = dataclasses.replace(self.options, loss_probability=0.0, duplicate_probability=0.0,
                                               reorder_probability=0.0, partition_probability_per_second=0.0)

    def maybe_start_random_partition(self, *, nodes: list[str], now_ns: int, interval_ns: int) -> bool:
        options = self.options
        if options.partition_probability_per_second <= 0 or len(nodes) < 2:
            return False
        if self.rng.random() >= options.partition_probability_per_second * interval_ns / 1e9:
            return False
        shuffled = sorted(nodes)
        self.rng.shuffle(shuffled)
        cut = self.rng.randrange(1, len(shuffled))
        duration_ns = int(self.rng.expovariate(1 / max(options.partition_duration_mean_ns, 1)))
        is_one_way = self.rng.random() < options.one_way_partition_probability
        self.partition(set(shuffled[:cut]), set(shuffled[cut:]), is_one_way=is_one_way,
                       until_ns=now_ns + duration_ns)
        return True

    def statistics(self) -> NetworkStatistics:
        return NetworkStatistics(self._delivered, self._lost, self._duplicated, self._blocked, self._partition_count)
