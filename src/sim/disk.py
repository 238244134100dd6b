"""SimDisk: one file on a simulated disk with a page cache in front of it.

Owns the file's bytes and which of them are durable. Rules:
- append(), write_at() and preallocate() change the page cache; sync() makes every change so far
  durable. preallocate() grows the file with bytes that read as zeros (like fallocate), and
  write_at() overwrites any range, so a write need not grow the file.
- crash() is power loss: durable content survives and unsynced changes are undone, except that
  with torn_write_probability a strict prefix of the unsynced bytes survives, counted in the
  order they were written: the writes before the cut whole, the one it falls in torn at that
  offset (a torn write), the ones after it lost. Preallocated space counts as written zeros.
  What survives a crash is on the platter, so it counts as durable afterwards.
- read_range() returns the current content (durable and cached). With bit_flip_probability one
  random bit of the returned copy is flipped: a read error, never what is stored.
- A full disk (set_full(True), a full_probability_per_write fault, or size_max reached) refuses
  the whole write or preallocation with DiskFull and leaves the file unchanged.
- Latencies are drawn here but not waited for: the caller schedules completion after them.
How: unsynced changes are kept as an undo log (what each write replaced), undone newest first on
a crash; preallocated space that was never written is not stored, only counted in the size.
Every random choice comes from the rng passed in. SimFileSystem (sim/filesystem.py) builds
directories of these files.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from math import log1p as _log1p
from typing import NamedTuple

from bksim.options import DiskOptions

SIZE_MAX_DEFAULT = 1 << 40     # 1 TiB: the file's capacity unless the caller says otherwise


class DiskFull(Exception):
    """The write did not happen: no space left."""


@dataclass(frozen=True, slots=True)
class DiskStatistics:
    bytes_written: int        # appended, written at an offset, or preallocated (zeros)
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
    # rng.expovariate(1 / extra_ns) from the same one uniform draw u, without the call, and as
    # -log1p(-u) rather than its -log(1 - u): equal but for rounding in the last bit, and
    # log1p takes its one argument directly where log parses an argument tuple.
    return options.fsync_latency_min_ns + int(-_log1p(-rng.random()) / (1 / extra_ns))


class _Change(NamedTuple):
    """One unsynced change and what it replaced, enough to undo it or to redo a prefix of it."""
    offset: int
    size: int
    data: bytes | None           # None: preallocated zeros
    replaced: bytes              # the stored bytes it overwrote
    stored_size_before: int      # len(_data) before it
    size_before: int             # the file's size before it


# _Change(*fields) without the Python-level __new__ a NamedTuple class adds: one per write.
_new_change = functools.partial(tuple.__new__, _Change)


class SimDisk:
    def __init__(self, *, rng: random.Random, options: DiskOptions, size_max: int = SIZE_MAX_DEFAULT) -> None:
        assert size_max >= 0
        self.rng = rng
        self.options = options
        self.size_max = size_max
        # The content is _data followed by _size - len(_data) zeros (preallocated, never written).
        # Invariant: len(_data) <= _size <= size_max.
        self._data = bytearray()
        self._size = 0
        # Changes since the last sync, oldest first; _unsynced_size is the sum of their sizes.
        self._unsynced: list[_Change] = []
        self._unsynced_size = 0
        self._is_full = False
        self._written = self._syncs = self._crashes = self._torn = self._flips = self._full = 0
        self._bytes_lost = self._size_peak = 0

    @property
    def size(self) -> int:
        """Bytes in the file now, durable or not."""
        return self._size

    @property
    def durable_size(self) -> int:
        """The file's size after a crash now (without a torn write)."""
        return self._unsynced[0].size_before if self._unsynced else self._size

    @property
    def is_full(self) -> bool:
        return self._is_full

    def set_full(self, is_full: bool) -> None:
        """Force (or stop forcing) every write to fail with DiskFull."""
        self._is_full = is_full

    def _refuse_if_full(self, size: int, end: int) -> None:
        options = self.options
        if self._is_full or (options.full_probability_per_write
                             and self.rng.random() < options.full_probability_per_write):
            self._full += 1
            raise DiskFull(f"no space left for {size} bytes")
        if end > self.size_max:
            self._full += 1
            raise DiskFull(f"{size} bytes would pass size_max={self.size_max}")

    def append(self, data: bytes) -> int:
        """Write at the end of the file; returns the write latency in ns. Raises DiskFull
        (nothing written) when the disk is full."""
        return self.write_at(self._size, data)

    def write_at(self, offset: int, data: bytes) -> int:
        """Overwrite [offset, offset + len(data)) in the page cache, growing the file if it runs
        past the end; returns the write latency in ns. Raises DiskFull (nothing written)."""
        assert offset >= 0
        if type(data) is not bytes:
            data = bytes(data)          # kept in the undo log: a caller's buffer may change
        size = len(data)
        end = offset + size
        options = self.options
        if self._is_full or options.full_probability_per_write or end > self.size_max:
            self._refuse_if_full(size, end)         # (the only case it can refuse)
        if size:
            # The undo record, spelled out: every journal group and entry log write comes here,
            # and nearly all of them append past the stored bytes (nothing replaced).
            stored = self._data
            stored_size = len(stored)
            replaced = bytes(stored[offset:end]) if offset < stored_size else b""
            self._unsynced.append(_new_change((offset, size, data, replaced, stored_size, self._size)))
            self._unsynced_size += size
            if offset == stored_size:
                # _store of a write right after the stored bytes (a journal group, an entry log
                # append), spelled out: extend the bytearray in place and grow the file (_grow).
                stored += data
                if end > self._size:
                    self._size = end
                    if end > self._size_peak:
                        self._size_peak = end
            else:
                self._store(offset, data)
            self._written += size
        return options.write_latency_ns

    def preallocate(self, size: int) -> int:
        """Grow the file to `size` bytes with zeros (nothing if it is that large already);
        returns the write latency in ns. Raises DiskFull (nothing changed)."""
        grown = size - self._size
        if grown <= 0:
            return 0
        self._refuse_if_full(grown, size)
        self._unsynced.append(_Change(self._size, grown, None, b"", len(self._data), self._size))
        self._unsynced_size += grown
        self._grow(size)
        self._written += grown
        return self.options.write_latency_ns

    def _store(self, offset: int, data) -> None:
        stored = self._data
        stored_size = len(stored)
        if offset >= stored_size:
            if offset > stored_size:
                stored += bytes(offset - stored_size)    # into preallocated space or a hole
            # An append (nearly every write): extending a bytearray in place costs about a tenth
            # of assigning to a slice at its end (measured on CPython 3.11: ~0.1 vs ~1 us).
            stored += data
        else:
            stored[offset:offset + len(data)] = data
        self._grow(offset + len(data))

    def _grow(self, size: int) -> None:
        if size > self._size:
            self._size = size
            if size > self._size_peak:
                self._size_peak = size

    def sync_latency_ns(self) -> int:
        """Draw how long the next fsync takes (including the occasional slow one)."""
        return draw_sync_latency_ns(self.rng, self.options)

    def sync(self) -> None:
        """Everything written so far is durable."""
        self._unsynced.clear()
        self._unsynced_size = 0
        self._syncs += 1

    def crash(self) -> None:
        """Power loss: unsynced changes are lost, but for a torn prefix now and then."""
        self._crashes += 1
        unsynced_size = self._unsynced_size
        kept_size = 0
        if (unsynced_size and self.options.torn_write_probability
                and self.rng.random() < self.options.torn_write_probability):
            kept_size = self.rng.randrange(unsynced_size)
            self._torn += 1
        self._bytes_lost += unsynced_size - kept_size
        changes = self._unsynced
        index = 0
        while index < len(changes) and kept_size >= changes[index].size:    # kept whole
            kept_size -= changes[index].size
            index += 1
        for change in reversed(changes[index:]):
            self._data[change.offset:change.offset + len(change.replaced)] = change.replaced
            del self._data[change.stored_size_before:]
            self._size = change.size_before
        if kept_size:                   # the change the cut falls in: its first kept_size bytes land
            torn = changes[index]
            if torn.data is None:
                self._grow(torn.offset + kept_size)
            else:
                self._store(torn.offset, torn.data[:kept_size])
        changes.clear()
        self._unsynced_size = 0

    def read_range(self, offset: int = 0, size: int = -1) -> bytes:
        """Bytes [offset, offset + size) (size -1: to the end); with bit_flip_probability one
        bit of the returned copy is flipped. Copies only the range, not the file."""
        end = self._size if size < 0 else min(self._size, offset + size)
        data = bytes(self._data[offset:end])                        # slices clamp
        if offset + len(data) < end:
            data += bytes(end - offset - len(data))                 # preallocated zeros
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
        return DiskStatistics(bytes_written=self._written, syncs=self._syncs, crashes=self._crashes,
                              torn_writes=self._torn, bit_flips=self._flips, full_refusals=self._full,
                              bytes_lost=self._bytes_lost, size_peak=self._size_peak)

    def invariants(self) -> None:
        assert 0 <= len(self._data) <= self._size <= self.size_max
        assert self._unsynced_size == sum(change.size for change in self._unsynced)
        assert self.durable_size <= self.size_max
