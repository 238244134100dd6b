"""Fault knobs of the simulated network and disks: one frozen options object per component.

Rules: the zero value of every fault knob means "no fault" (latencies are not faults: they keep
reasonable defaults). `none()` gives a component with no faults; `swarm(rng)` draws one seed's
own mix of faults (swarm testing), each kind sometimes exactly off, so that some seeds see no
loss, some no duplication, and so on. swarm() always makes the same number of draws whatever
it picks, so adding a knob at the end does not shift the knobs drawn before it.

Options are validated on construction: a bad knob is a programmer bug (ValueError).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

US = 1_000
MS = 1_000_000
S = 1_000_000_000


def _check_probability(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], not {value!r}")


def _check_non_negative(name: str, value: int) -> None:
    if value < 0:
        raise ValueError(f"{name} must be >= 0, not {value!r}")


@dataclass(frozen=True, slots=True)
class NetworkOptions:
    """Latency is latency_min_ns plus an exponential tail whose mean makes the total average
    latency_mean_ns (so latency_mean_ns >= latency_min_ns)."""

    latency_min_ns: int = 50 * US
    latency_mean_ns: int = 200 * US
    loss_probability: float = 0.0            # per message
    duplicate_probability: float = 0.0       # per delivered message: it arrives twice
    reorder_probability: float = 0.0         # per copy: an extra delay of up to reorder_delay_max_ns
    reorder_delay_max_ns: int = 5 * MS
    partition_probability_per_second: float = 0.0
    partition_duration_mean_ns: int = 0      # exponential
    one_way_partition_probability: float = 0.0

    def __post_init__(self) -> None:
        _check_non_negative("latency_min_ns", self.latency_min_ns)
        if self.latency_mean_ns < self.latency_min_ns:
            raise ValueError(f"latency_mean_ns {self.latency_mean_ns} < latency_min_ns {self.latency_min_ns}")
        _check_non_negative("reorder_delay_max_ns", self.reorder_delay_max_ns)
        _check_non_negative("partition_duration_mean_ns", self.partition_duration_mean_ns)
        _check_non_negative("partition_probability_per_second", self.partition_probability_per_second)
        for name in ("loss_probability", "duplicate_probability", "reorder_probability",
                     "one_way_partition_probability"):
            _check_probability(name, getattr(self, name))

    @classmethod
    def none(cls) -> NetworkOptions:
        """No faults; latency 50 µs minimum, 200 µs on average (a few ms at the far tail)."""
        return cls()

    @classmethod
    def swarm(cls, rng: random.Random) -> NetworkOptions:
        latency_min_ns = rng.choice([20 * US, 50 * US, 200 * US])
        return cls(
            latency_min_ns=latency_min_ns,
            latency_mean_ns=max(latency_min_ns, rng.choice([100 * US, 500 * US, 2 * MS])),
            loss_probability=rng.choice([0.0, 0.0, 0.01, 0.05, 0.15, 0.3]),
            duplicate_probability=rng.choice([0.0, 0.0, 0.01, 0.1]),
            reorder_probability=rng.choice([0.0, 0.05, 0.3]),
            partition_probability_per_second=rng.choice([0.0, 0.0, 0.1, 0.3, 1.0]),
            partition_duration_mean_ns=rng.choice([200 * MS, 1 * S, 3 * S]),
            one_way_partition_probability=rng.choice([0.0, 0.3, 0.7]))


@dataclass(frozen=True, slots=True)
class DiskOptions:
    """fsync takes fsync_latency_min_ns plus an exponential tail averaging to
    fsync_latency_mean_ns, except that with slow_fsync_probability it takes slow_fsync_latency_ns."""

    write_latency_ns: int = 10 * US          # an append into the page cache
    fsync_latency_min_ns: int = 100 * US
    fsync_latency_mean_ns: int = 300 * US
    slow_fsync_probability: float = 0.0
    slow_fsync_latency_ns: int = 0
    torn_write_probability: float = 0.0      # per crash: a random prefix of the unsynced bytes survives
    bit_flip_probability: float = 0.0        # per read of the whole file: one bit of the copy flips
    full_probability_per_write: float = 0.0  # the append fails whole with DiskFull

    def __post_init__(self) -> None:
        _check_non_negative("write_latency_ns", self.write_latency_ns)
        _check_non_negative("fsync_latency_min_ns", self.fsync_latency_min_ns)
        if self.fsync_latency_mean_ns < self.fsync_latency_min_ns:
            raise ValueError(f"fsync_latency_mean_ns {self.fsync_latency_mean_ns} < "
                             f"fsync_latency_min_ns {self.fsync_latency_min_ns}")
        _check_non_negative("slow_fsync_latency_ns", self.slow_fsync_latency_ns)
        for name in ("slow_fsync_probability", "torn_write_probability", "bit_flip_probability",
                     "full_probability_per_write"):
            _check_probability(name, getattr(self, name))

    @classmethod
    def none(cls) -> DiskOptions:
        """No faults; writes 10 µs, fsync 100 µs minimum, 300 µs on average (~1 ms at the tail)."""
        return cls()

    @classmethod
    def swarm(cls, rng: random.Random) -> DiskOptions:
        fsync_latency_min_ns = rng.choice([50 * US, 100 * US, 500 * US])
        return cls(
            fsync_latency_min_ns=fsync_latency_min_ns,
            fsync_latency_mean_ns=max(fsync_latency_min_ns, rng.choice([200 * US, 1 * MS, 5 * MS])),
            slow_fsync_probability=rng.choice([0.0, 0.01, 0.05]),
            slow_fsync_latency_ns=rng.choice([50 * MS, 500 * MS, 3 * S]),
            torn_write_probability=rng.choice([0.0, 0.5, 1.0]),
            bit_flip_probability=rng.choice([0.0, 0.0, 0.1, 0.5]),
            full_probability_per_write=rng.choice([0.0, 0.0, 0.0005, 0.002]))
