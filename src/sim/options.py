"""Fault knobs of the simulated network and disks. The zero value of every knob means "no
fault"; `swarm(rng)` draws a seed's own mix, with each kind of fault sometimes off entirely."""

from __future__ import annotations

import random
from dataclasses import dataclass

US = 1_000
MS = 1_000_000
S = 1_000_000_000


@dataclass(frozen=True, slots=True)
class NetworkOptions:
    latency_min_ns: int = 50 * US
    latency_mean_ns: int = 200 * US          # exponential tail above the minimum
    loss_probability: float = 0.0
    duplicate_probability: float = 0.0
    reorder_probability: float = 0.0         # chance of an extra delay of up to reorder_delay_max_ns
    reorder_delay_max_ns: int = 5 * MS
    partition_probability_per_second: float = 0.0
    partition_duration_mean_ns: int = 0
    one_way_partition_probability: float = 0.0

    @classmethod
    def none(cls) -> NetworkOptions:
        return cls()

    @classmethod
    def swarm(cls, rng: random.Random) -> NetworkOptions:
        return cls(
            latency_min_ns=rng.choice([20 * US, 50 * US, 200 * US]),
            latency_mean_ns=rng.choice([100 * US, 500 * US, 2 * MS]),
            loss_probability=rng.choice([0.0, 0.0, 0.01, 0.05, 0.15, 0.3]),
            duplicate_probability=rng.choice([0.0, 0.0, 0.01, 0.1]),
            reorder_probability=rng.choice([0.0, 0.05, 0.3]),
            partition_probability_per_second=rng.choice([0.0, 0.0, 0.1, 0.3, 1.0]),
            partition_duration_mean_ns=rng.choice([200 * MS, 1 * S, 3 * S]),
            one_way_partition_probability=rng.choice([0.0, 0.3, 0.7]))


@dataclass(frozen=True, slots=True)
class DiskOptions:
    write_latency_ns: int = 10 * US
    fsync_latency_min_ns: int = 100 * US
    fsync_latency_mean_ns: int = 300 * US
    slow_fsync_probability: float = 0.0
    slow_fsync_latency_ns: int = 0
    torn_write_probability: float = 0.0      # on crash: a random prefix of unsynced bytes survives
    bit_flip_probability: float = 0.0        # per read of the whole file
    full_probability_per_write: float = 0.0

    @classmethod
    def none(cls) -> DiskOptions:
        return cls()

    @classmethod
    def swarm(cls, rng: random.Random) -> DiskOptions:
        return cls(
            fsync_latency_min_ns=rng.choice([50 * US, 100 * US, 500 * US]),
            fsync_latency_mean_ns=rng.choice([200 * US, 1 * MS, 5 * MS]),
            slow_fsync_probability=rng.choice([0.0, 0.01, 0.05]),
            slow_fsync_latency_ns=rng.choice([50 * MS, 500 * MS, 3 * S]),
            torn_write_probability=rng.choice([0.0, 0.5, 1.0]),
            bit_flip_probability=rng.choice([0.0, 0.0, 0.1, 0.5]),
            full_probability_per_write=rng.choice([0.0, 0.0, 0.0005, 0.002]))
