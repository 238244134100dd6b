"""SimDisk: one append-only file with a page cache in front of it.

Bytes appended sit in the cache until sync(); a crash keeps only what was synced, except that a
torn write may leave a random prefix of the unsynced bytes behind. Reads may come back with one
flipped bit (a read error, not what is stored). A full disk refuses a write whole.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from sim.options import DiskOptions


class DiskFull(Exception):
    """The write did not happen: no space left."""


@dataclass(frozen=True, slots=True)
class DiskStatistics:
    bytes_appended: int
    syncs: int
    crashes: int
    torn_writes: int
    bit_flips: int
    full_refusals: int


def draw_sync_latency_ns(rng: random.Random, options: DiskOptions) -> int:
    """How long one fsync takes: a minimum, an exponential tail, now and then a slow one."""
    if options.slow_fsync_probability and rng.random() < options.slow_fsync_probability:
        return options.slow_fsync_latency_ns
    extra = options.fsync_latency_mean_ns - options.fsync_latency_min_ns
    return options.fsync_latency_min_ns + (int(rng.expovariate(1 / extra)) if extra > 0 else 0)


class SimDisk:
    def __init__(self, *, rng: random.Random, options: DiskOptions) -> None:
        self.rng = rng
        self.options = options
        self._data = bytearray()
        self._durable_size = 0
        self._is_full = False
        self._appended = self._syncs = self._crashes = self._torn = self._flips = self._full = 0

    @property
    def size(self) -> int:
        return len(self._data)

    @property
    def durable_size(self) -> int:
        return self._durable_size

    def set_full(self, is_full: bool) -> None:
        self._is_full = is_full

    def append(self, data: bytes) -> int:
        """Append to the page cache; returns the write latency. Raises DiskFull (nothing written)."""
        options = self.options
        if self._is_full or (options.full_probability_per_write and self.rng.random() < options.full_probability_per_write):
            self._full += 1
            raise DiskFull(f"no space left for {len(data)} bytes")
        self._data += data
        self._appended += len(data)
        return options.write_latency_ns

    def sync_latency_ns(self) -> int:
        return draw_sync_latency_ns(self.rng, self.options)

    def sync(self) -> None:
        self._durable_size = len(self._data)
        self._syncs += 1

    def crash(self) -> None:
        self._crashes += 1
        unsynced = len(self._data) - self._durable_size
        kept = 0
        if unsynced and self.options.torn_write_probability and self.rng.random() < self.options.torn_write_probability:
            kept = self.rng.randrange(unsynced)
            self._torn += 1
        del self._data[self._durable_size + kept:]
        self._durable_size = len(self._data)

    def truncate(self, size: int) -> None:
        """Cut the file to `size` bytes, durably (a repair after a torn tail)."""
        assert 0 <= size <= len(self._data)
        del self._data[size:]
        self._durable_size = min(self._durable_size, size)

    def read_all(self) -> bytes:
        data = bytes(self._data)
        if data and self.options.bit_flip_probability and self.rng.random() < self.options.bit_flip_probability:
            flipped = bytearray(data)
            index = self.rng.randrange(len(flipped))
            flipped[index] ^= 1 << self.rng.randrange(8)
            self._flips += 1
            return bytes(flipped)
        return data

    def statistics(self) -> DiskStatistics:
        return DiskStatistics(self._appended, self._syncs, self._crashes, self._torn, self._flips, self._full)
