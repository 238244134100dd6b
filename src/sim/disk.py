"""SimDisk: one append-only file on a simulated disk with a page cache in front of it.

Owns the file's bytes and how much of them is durable. Rules:
- append() puts bytes in the page cache; sync() makes everything appended so far durable.
- crash() is power loss: durable bytes survive and unsynced ones are lost, except that with
  torn_write_probability a random strict prefix of the unsynced bytes survives (a torn write).
  What survives a crash is on the platter, so it counts as durable afterwards.
- read_all() returns the current content (durable and cached). With bit_flip_probability one
  random bit of the returned copy is flipped: a read error, never what is stored.
- A full disk (set_full(True), a full_probability_per_write fault, or size_max reached) refuses
  the whole write with DiskFull and leaves the file unchanged.
- Latencies are drawn here but not waited for: the caller schedules completion after them.
Every random choice comes from the rng passed in. SimFileSystem (sim/filesystem.py) builds
directories of these files.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from math import log as _log

from sim.options import DiskOptions

SIZE_MAX_DEFAULT = 1 << 40     # 1 TiB: the file's capacity unless the caller says otherwise


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
    bytes_lost: int           # unsynced bytes dropped by crashes
    size_peak: int


def draw_sync_latency_ns(rng: random.Random, options: DiskOptions) -> int:
    """How long one fsync takes: a minimum, an exponential tail, now and then a slow one."""
    if options.slow_fsync_probability and rng.random() < options.slow_fsync_probability:
        return options.slow_fsync_latency_ns
    extra_ns = options.fsync_latency_mean_ns - options.fsync_latency_min_ns
    if extra_ns <= 0:
        return options.fsync_latency_min_ns
    # rng.expovariate(1 / extra_ns), computed as it does (one uniform draw) without the call.
    return options.fsync_latency_min_ns + int(-_log(1.0 - rng.random()) / (1 / extra_ns))


class SimDisk:
    def __init__(self, *, rng: random.Random, options: DiskOptions, size_max: int = SIZE_MAX_DEFAULT) -> None:
        assert size_max >= 0
        self.rng = rng
        self.options = options
        self.size_max = size_max
        self._data = bytearray()
        # Invariant: 0 <= _durable_size <= len(_data); bytes before it survive a crash.
        self._durable_size = 0
        self._is_full = False
        self._appended = self._syncs = self._crashes = self._torn = self._flips = self._full = 0
        self._bytes_lost = self._size_peak = 0

    @property
    def size(self) -> int:
        """Bytes in the file now, durable or not."""
        return len(self._data)

    @property
    def durable_size(self) -> int:
        """Bytes that would survive a crash now."""
        return self._durable_size

    @property
    def is_full(self) -> bool:
        return self._is_full

    def set_full(self, is_full: bool) -> None:
        """Force (or stop forcing) every append to fail with DiskFull."""
        self._is_full = is_full

    def append(self, data: bytes) -> int:
        """Append to the page cache; returns the write latency in ns. Raises DiskFull (nothing
        written) when the disk is full."""
        options = self.options
        if self._is_full or (options.full_probability_per_write
                             and self.rng.random() < options.full_probability_per_write):
            self._full += 1
            raise DiskFull(f"no space left for {len(data)} bytes")
        if len(self._data) + len(data) > self.size_max:
            self._full += 1
            raise DiskFull(f"{len(data)} bytes would pass size_max={self.size_max}")
        self._data += data
        self._appended += len(data)
        if len(self._data) > self._size_peak:
            self._size_peak = len(self._data)
        return options.write_latency_ns

    def sync_latency_ns(self) -> int:
        """Draw how long the next fsync takes (including the occasional slow one)."""
        return draw_sync_latency_ns(self.rng, self.options)

    def sync(self) -> None:
        """Everything appended so far is durable."""
        self._durable_size = len(self._data)
        self._syncs += 1

    def crash(self) -> None:
        """Power loss: unsynced bytes are lost, but for a torn prefix now and then."""
        self._crashes += 1
        unsynced_size = len(self._data) - self._durable_size
        kept_size = 0
        if (unsynced_size and self.options.torn_write_probability
                and self.rng.random() < self.options.torn_write_probability):
            kept_size = self.rng.randrange(unsynced_size)
            self._torn += 1
        self._bytes_lost += unsynced_size - kept_size
        del self._data[self._durable_size + kept_size:]
        self._durable_size = len(self._data)

    def truncate(self, size: int) -> None:
        """Cut the file to `size` bytes, durably (a repair after a torn tail)."""
        assert 0 <= size <= len(self._data), (size, len(self._data))
        del self._data[size:]
        self._durable_size = min(self._durable_size, size)

    def read_range(self, offset: int = 0, size: int = -1) -> bytes:
        """Bytes [offset, offset + size) (size -1: to the end); with bit_flip_probability one
        bit of the returned copy is flipped. Copies only the range, not the file."""
        data = bytes(self._data[offset:] if size < 0 else self._data[offset:offset + size])   # slices clamp
        if data and self.options.bit_flip_probability and self.rng.random() < self.options.bit_flip_probability:
            flipped = bytearray(data)
            flipped[self.rng.randrange(len(flipped))] ^= 1 << self.rng.randrange(8)
            self._flips += 1
            return bytes(flipped)
        return data

    def read_all(self) -> bytes:
        """The file's content; with bit_flip_probability one bit of this copy is flipped."""
        return self.read_range(0, -1)

    def statistics(self) -> DiskStatistics:
        return DiskStatistics(bytes_appended=self._appended, syncs=self._syncs, crashes=self._crashes,
                              torn_writes=self._torn, bit_flips=self._flips, full_refusals=self._full,
                              bytes_lost=self._bytes_lost, size_peak=self._size_peak)

    def invariants(self) -> None:
        assert 0 <= self._durable_size <= len(self._data) <= self.size_max
