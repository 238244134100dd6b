"""SimNetwork: who hears whom, and after how long.

Owns the fate of every message: latency (a minimum plus an exponential tail, scaled per link),
loss, duplication, reordering (an extra random delay on some copies), and partitions, symmetric
or one-way, that end at their until_ns or when heal() is called. It does not carry messages:
the world asks delivery_delays_ns() and schedules one delivery per delay it gets back.

Rules: every random choice comes from the rng passed in, drawn in an order that depends only on
the calls made (nodes are strings; sets of them are only tested for membership, and any list of
them is sorted before the rng touches it). A knob at zero draws nothing.

At most partition_count_max partitions are in force at once; partition() beyond that raises
TooManyPartitions, and a random partition that would exceed it is not started (and counted).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from math import log1p as _log1p

from bksim.options import NetworkOptions

# Each directed link gets one of these latency multipliers on first use: some links are slow.
LINK_LATENCY_SCALES = (0.5, 1.0, 1.0, 2.0, 5.0)
PARTITION_COUNT_MAX_DEFAULT = 64


class TooManyPartitions(Exception):
    """partition() would put more than partition_count_max partitions in force."""


@dataclass(frozen=True, slots=True)
class Partition:
    side_a: frozenset[str]
    side_b: frozenset[str]
    is_one_way: bool          # only side_a -> side_b is cut
    until_ns: int | None      # None: until heal()

    def blocks(self, source: str, destination: str) -> bool:
        if source in self.side_a and destination in self.side_b:
            return True
        return not self.is_one_way and source in self.side_b and destination in self.side_a


@dataclass(frozen=True, slots=True)
class NetworkStatistics:
    delivered: int            # messages that got through (a duplicated one counts once here)
    lost: int
    duplicated: int
    blocked: int              # dropped by a partition
    reordered: int            # copies given an extra delay
    partitions: int           # partitions started, explicit and random
    partitions_refused: int   # random partitions not started for want of room
    partitions_active_peak: int

    def __str__(self) -> str:
        return (f"delivered={self.delivered} lost={self.lost} duplicated={self.duplicated} "
                f"blocked={self.blocked} reordered={self.reordered} partitions={self.partitions}")


class SimNetwork:
    def __init__(self, *, rng: random.Random, options: NetworkOptions,
                 partition_count_max: int = PARTITION_COUNT_MAX_DEFAULT) -> None:
        assert partition_count_max >= 1
        self.rng = rng
        self.options = options
        self.partition_count_max = partition_count_max
        self._partitions: list[Partition] = []
        # The directed links those partitions cut: source -> destinations it cannot reach.
        # Invariant: always derived from _partitions (_set_partitions keeps them in step), so a
        # message's check is two lookups however many partitions are in force.
        self._cut_links: dict[str, frozenset[str]] = {}
        # Earliest until_ns among _partitions (None if none expires): pruning waits for it.
        self._next_expiry_at_ns: int | None = None
        # Each link gets its own latency scale, drawn from the rng when the link is first used
        # (first use happens in a seed-determined order, so this stays deterministic). Kept by
        # source, then destination: two lookups of strings cost less than building a key tuple.
        self._link_scales: dict[str, dict[str, float]] = {}
        self._delivered = self._lost = self._duplicated = self._blocked = self._reordered = 0
        self._partition_count = self._partitions_refused = self._partitions_active_peak = 0
        self._set_latency_rate()

    def _set_latency_rate(self) -> None:
        options = self.options
        extra_ns = options.latency_mean_ns - options.latency_min_ns
        self._latency_rate = 1 / extra_ns if extra_ns > 0 else 0.0
        # The knobs fate_ns reads for every message, copied out of the options (kept in step
        # with them here, the only place options change after construction).
        self._loss_probability = options.loss_probability
        self._duplicate_probability = options.duplicate_probability
        self._reorder_probability = options.reorder_probability
        self._latency_min_ns = options.latency_min_ns

    # -- messages ---------------------------------------------------------------------------

    def delivery_delays_ns(self, *, source: str, destination: str, now_ns: int) -> list[int]:
        """The fate of one message sent now: [] if blocked or lost, [delay] normally, and
        [delay, delay] if duplicated (each copy has its own latency)."""
        return self.delays_ns(source, destination, now_ns)

    def delays_ns(self, source: str, destination: str, now_ns: int) -> list[int]:
        """delivery_delays_ns with positional arguments."""
        fate = self.fate_ns(source, destination, now_ns)
        if fate is None:
            return []
        return [fate] if type(fate) is int else fate

    def fate_ns(self, source: str, destination: str, now_ns: int) -> int | list[int] | None:
        """delays_ns for the world's send loop, without a list in the common case: the delay
        of the one copy that arrives (an int), None if none does, or the list of delays of a
        duplicated message. The same draws as delays_ns, in the same order."""
        if self._partitions:
            # is_blocked(), spelled out: while partitions are in force every message asks.
            if self._next_expiry_at_ns is not None and now_ns >= self._next_expiry_at_ns:
                self._prune(now_ns)
            cut = self._cut_links.get(source)
            if cut is not None and destination in cut:
                self._blocked += 1
                return None
        rng = self.rng
        loss_probability = self._loss_probability
        if loss_probability and rng.random() < loss_probability:
            self._lost += 1
            return None
        self._delivered += 1
        duplicate_probability = self._duplicate_probability
        if duplicate_probability and rng.random() < duplicate_probability:
            self._duplicated += 1
            return [self._latency_ns(source, destination), self._latency_ns(source, destination)]
        # One copy (nearly always): _latency_ns(source, destination), spelled out.
        scales = self._link_scales.get(source)
        if scales is None:
            scales = self._link_scales[source] = {}
        scale = scales.get(destination)
        if scale is None:
            scale = scales[destination] = rng.choice(LINK_LATENCY_SCALES)
        latency_ns = self._latency_min_ns
        latency_rate = self._latency_rate
        if latency_rate:
            latency_ns += int(-_log1p(-rng.random()) / latency_rate * scale)
        reorder_probability = self._reorder_probability
        if reorder_probability and rng.random() < reorder_probability:
            latency_ns += rng.randrange(self.options.reorder_delay_max_ns + 1)
            self._reordered += 1
        return latency_ns

    def _latency_ns(self, source: str, destination: str) -> int:
        options = self.options
        rng = self.rng
        scales = self._link_scales.setdefault(source, {})
        scale = scales.get(destination)
        if scale is None:
            scale = scales[destination] = rng.choice(LINK_LATENCY_SCALES)
        latency_ns = options.latency_min_ns
        if self._latency_rate:
            # An exponential draw with rate _latency_rate from one uniform draw, as
            # Random.expovariate makes it, without the cost of calling it: this runs for every
            # message (-log1p(-u) for its -log(1 - u): see bksim.disk.draw_sync_latency_ns).
            latency_ns += int(-_log1p(-rng.random()) / self._latency_rate * scale)
        if options.reorder_probability and rng.random() < options.reorder_probability:
            latency_ns += rng.randrange(options.reorder_delay_max_ns + 1)
            self._reordered += 1
        return latency_ns

    # -- partitions -------------------------------------------------------------------------

    def is_blocked(self, source: str, destination: str, now_ns: int) -> bool:
        """Whether a partition in force at now_ns cuts source -> destination."""
        if not self._partitions:
            return False
        if self._next_expiry_at_ns is not None and now_ns >= self._next_expiry_at_ns:
            self._prune(now_ns)
        cut = self._cut_links.get(source)
        return cut is not None and destination in cut

    def _prune(self, now_ns: int) -> None:
        self._set_partitions([p for p in self._partitions if p.until_ns is None or p.until_ns > now_ns])

    def _set_partitions(self, partitions: list[Partition]) -> None:
        """Put exactly these partitions in force (the only way _partitions changes)."""
        self._partitions = partitions
        self._next_expiry_at_ns = min((p.until_ns for p in partitions if p.until_ns is not None), default=None)
        cut: dict[str, set[str]] = {}
        for partition in partitions:
            for source in partition.side_a:
                cut.setdefault(source, set()).update(partition.side_b)
            if not partition.is_one_way:
                for source in partition.side_b:
                    cut.setdefault(source, set()).update(partition.side_a)
        self._cut_links = {source: frozenset(destinations) for source, destinations in cut.items()}

    def partition(self, side_a: set[str] | frozenset[str], side_b: set[str] | frozenset[str], *,
                  is_one_way: bool = False, until_ns: int | None = None) -> None:
        """Cut side_a <-> side_b (only side_a -> side_b if one-way) until until_ns or heal().
        Expired partitions are dropped lazily (by is_blocked and maybe_start_random_partition)."""
        assert not (set(side_a) & set(side_b)), f"sides overlap: {sorted(set(side_a) & set(side_b))}"
        if len(self._partitions) >= self.partition_count_max:
            raise TooManyPartitions(f"{len(self._partitions)} partitions in force "
                                    f"(partition_count_max={self.partition_count_max})")
        added = Partition(frozenset(side_a), frozenset(side_b), is_one_way, until_ns)
        self._set_partitions([*self._partitions, added])
        self._partition_count += 1
        self._partitions_active_peak = max(self._partitions_active_peak, len(self._partitions))

    def heal(self, *, end_random_faults: bool = False) -> None:
        """End every partition; with end_random_faults also stop losing, duplicating and
        reordering messages and starting new partitions (latency stays)."""
        self._set_partitions([])
        if end_random_faults:
            self.options = dataclasses.replace(self.options, loss_probability=0.0, duplicate_probability=0.0,
                                               reorder_probability=0.0, partition_probability_per_second=0.0)
            self._set_latency_rate()

    def maybe_start_random_partition(self, *, nodes: list[str], now_ns: int, interval_ns: int) -> bool:
        """Called every interval_ns: with partition_probability_per_second (scaled to the
        interval) split the nodes at random into two sides, one-way with
        one_way_partition_probability, for an exponential duration. Returns whether it did."""
        options = self.options
        if options.partition_probability_per_second <= 0 or len(nodes) < 2:
            return False
        rng = self.rng
        if rng.random() >= options.partition_probability_per_second * interval_ns / 1e9:
            return False
        shuffled = sorted(nodes)
        rng.shuffle(shuffled)
        cut = rng.randrange(1, len(shuffled))
        duration_ns = int(rng.expovariate(1 / max(options.partition_duration_mean_ns, 1)))
        is_one_way = rng.random() < options.one_way_partition_probability
        if self._partitions:
            self._prune(now_ns)
        if len(self._partitions) >= self.partition_count_max:
            self._partitions_refused += 1
            return False
        self.partition(set(shuffled[:cut]), set(shuffled[cut:]), is_one_way=is_one_way,
                       until_ns=now_ns + max(duration_ns, 1))
        return True

    def partitions_in_force(self, now_ns: int) -> list[Partition]:
        """A read-only view for checkers and traces."""
        if self._partitions:
            self._prune(now_ns)
        return list(self._partitions)

    def statistics(self) -> NetworkStatistics:
        return NetworkStatistics(
            delivered=self._delivered, lost=self._lost, duplicated=self._duplicated, blocked=self._blocked,
            reordered=self._reordered, partitions=self._partition_count,
            partitions_refused=self._partitions_refused, partitions_active_peak=self._partitions_active_peak)
