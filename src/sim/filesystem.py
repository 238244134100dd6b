"""SimFileSystem: directories of SimDisk files with POSIX crash semantics.

File contents follow SimDisk (unsynced writes and preallocations lost on a crash, maybe a torn
last write, bit flips on reads, full disks). Names follow directories: creating, renaming or
deleting a name is durable only after sync_dir() of its directory; a crash rolls every directory
back to its last synced listing (a deleted file can come back, a renamed one can revert, a new
one vanish).
"""

from __future__ import annotations

import dataclasses
import random

from bkcore.bookie.fs import DiskFullError, FileSystemError
from bksim.disk import DiskFull, SimDisk, draw_sync_latency_ns
from bksim.options import DiskOptions


# Paths split into (directory, name) as _split does, kept: splitting is pure, and every read,
# write and sync splits its path (rpartition makes a tuple and two strs each time, a lookup
# nothing). At most _SPLITS_COUNT_MAX paths are kept; past that the cache is emptied and refills.
_SPLITS_COUNT_MAX = 4096
_splits: dict[str, tuple[str, str]] = {}


def _split_new(path: str) -> tuple[str, str]:
    """_split of a path not in _splits, which keeps it."""
    directory, _, name = path.rpartition("/")
    split = (directory or ".", name)
    if len(_splits) >= _SPLITS_COUNT_MAX:
        _splits.clear()
    _splits[path] = split
    return split


class SimulatedCrash(Exception):
    """Raised by a SimFileSystem armed with crash_at_operation_index, at that operation."""


class SimFileSystem:
    def __init__(self, *, rng: random.Random, options: DiskOptions, capacity_size: int = 1 << 40) -> None:
        self.rng = rng
        self.options = options
        # The device's size: appends that would pass it fail whole (DiskFullError).
        self.capacity_size = capacity_size
        # directory -> {name: file}; the durable listing is what survives a crash.
        self._dirs: dict[str, dict[str, SimDisk]] = {".": {}}
        self._durable_dirs: dict[str, dict[str, SimDisk]] = {".": {}}
        self.is_full = False
        self._used_size: int | None = 0
        # Crash-point testing: count every mutating operation; at index crash_at_operation_index
        # the operation happens only partly (an append may land torn) and SimulatedCrash is raised.
        self.operation_count = 0
        self.crash_at_operation_index: int | None = None

    def _split(self, path: str) -> tuple[str, str]:
        # (parent_of(path), last component), with one rpartition.
        directory, _, name = path.rpartition("/")
        return directory or ".", name

    def _dir(self, path: str) -> dict[str, SimDisk]:
        listing = self._dirs.get(path)
        if listing is None:
            raise FileSystemError(f"{path}: no such directory")
        return listing

    def _file(self, path: str) -> SimDisk:
        directory, name = _splits.get(path) or _split_new(path)     # _split and _dir, inlined: every
        listing = self._dirs.get(directory)                         # read and sync comes through here
        if listing is None:
            raise FileSystemError(f"{directory}: no such directory")
        disk = listing.get(name)
        if disk is None:
            raise FileSystemError(f"{path}: no such file")
        return disk

    def makedirs(self, path: str) -> None:
        # Directories themselves are treated as durable once made (mkdir -p at install time).
        parts = path.split("/")
        for index in range(1, len(parts) + 1):
            prefix = "/".join(parts[:index])
            self._dirs.setdefault(prefix, {})
            self._durable_dirs.setdefault(prefix, {})

    def list_dir(self, path: str) -> list[str]:
        return sorted(self._dirs.get(path, {}))

    def exists(self, path: str) -> bool:
        if path in self._dirs:
            return True
        directory, name = self._split(path)
        return name in self._dirs.get(directory, {})

    def size(self, path: str) -> int:
        return self._file(path).size

    def read(self, path: str, offset: int = 0, size: int = -1) -> bytes:
        directory, name = _splits.get(path) or _split_new(path)     # _file, inlined: entry reads come here
        listing = self._dirs.get(directory)
        disk = None if listing is None else listing.get(name)
        if disk is None:
            self._file(path)                            # raises the error that fits
        return disk.read_range(offset, size)

    def _operation(self) -> bool:
        """Count a mutating operation; True if the armed crash strikes now."""
        index = self.operation_count
        self.operation_count += 1
        return index == self.crash_at_operation_index

    def _disk_for_write(self, path: str) -> SimDisk:
        directory, _, name = path.rpartition("/")
        listing = self._dir(directory or ".")
        disk = listing.get(name)
        if disk is None:
            disk = SimDisk(rng=self.rng, options=self.options)
            listing[name] = disk
        return disk

    def _check_room(self, path: str, grown_size: int) -> None:
        used_size = self._used_size if self._used_size is not None else self.used_size()
        if self.is_full or used_size + grown_size > self.capacity_size:
            raise DiskFullError(f"{path}: no space left on device")

    def append(self, path: str, data: bytes) -> None:
        self._write(path, None, data)

    def write_at(self, path: str, offset: int, data: bytes) -> None:
        if offset < 0:
            raise FileSystemError(f"{path}: negative offset {offset}")
        self._write(path, offset, data)

    def _write(self, path: str, offset: int | None, data: bytes) -> None:
        """At `offset`, or at the end for None. At the armed crash point the write lands partly."""
        # _operation(), inlined (an index compared with None only when a crash is armed)
        crash_at_operation_index = self.crash_at_operation_index
        strikes = crash_at_operation_index is not None and self.operation_count == crash_at_operation_index
        self.operation_count += 1
        directory, name = _splits.get(path) or _split_new(path)     # _disk_for_write, its common case inlined
        listing = self._dirs.get(directory)
        disk = None if listing is None else listing.get(name)
        if disk is None:
            disk = self._disk_for_write(path)
        size_before = disk.size
        if offset is None:
            offset = size_before
        grown_size = offset + len(data) - size_before     # max(0, ...) without the builtin's call
        if grown_size < 0:
            grown_size = 0
        used_size = self._used_size                     # _check_room, its common case inlined
        if used_size is None or self.is_full or used_size + grown_size > self.capacity_size:
            self._check_room(path, grown_size)
        if strikes:
            disk.write_at(offset, data[:self.rng.randrange(len(data) + 1)])
            self._used_size = None
            raise SimulatedCrash(f"crash during a write to {path}")
        try:
            disk.write_at(offset, data)
        except DiskFull:
            raise DiskFullError(f"{path}: no space left on device") from None
        self._used_size += grown_size       # the file's size is now max(size_before, offset + len(data))

    def preallocate(self, path: str, size: int) -> None:
        """At the armed crash point the file grows only partly."""
        strikes = self._operation()
        disk = self._disk_for_write(path)
        size_before = disk.size
        grown_size = max(0, size - size_before)
        self._check_room(path, grown_size)
        if strikes:
            disk.preallocate(size_before + self.rng.randrange(grown_size + 1))
            self._used_size = None
            raise SimulatedCrash(f"crash during preallocation of {path}")
        try:
            disk.preallocate(size)
        except DiskFull:
            raise DiskFullError(f"{path}: no space left on device") from None
        self._used_size += grown_size

    def _crash_before(self, what: str) -> None:
        if self._operation():
            raise SimulatedCrash(f"crash before {what}")

    def sync(self, path: str) -> None:
        # _crash_before, inlined, without building its message every time.
        if self.operation_count == self.crash_at_operation_index:
            self.operation_count += 1
            raise SimulatedCrash(f"crash before sync of {path}")
        self.operation_count += 1
        self._file(path).sync()

    def drop_cached(self, path: str, offset: int, size: int) -> None:
        """Nothing to forget: the simulated disk has no page cache. (Not an operation either, so
        crash points and traces are those of a bookie that never asks.)"""

    def sync_dir(self, path: str) -> None:
        if self._operation():
            raise SimulatedCrash(f"crash before sync of directory {path}")
        self._durable_dirs[path] = dict(self._dir(path))

    def rename(self, source: str, destination: str) -> None:
        self._crash_before(f"rename of {source}")
        disk = self._file(source)
        source_dir, source_name = self._split(source)
        target_dir, target_name = self._split(destination)
        del self._dir(source_dir)[source_name]
        self._dir(target_dir)[target_name] = disk
        self._used_size = None

    def delete(self, path: str) -> None:
        self._crash_before(f"delete of {path}")
        self._file(path)
        directory, name = self._split(path)
        del self._dir(directory)[name]
        self._used_size = None

    def used_size(self) -> int:
        """Bytes in files that have a name, preallocated space included (deleted files free their
        space at once). Cached: writes add to it; deletes, renames, crashes and truncations recount."""
        if self._used_size is None:
            files = {id(disk): disk for listing in self._dirs.values() for disk in listing.values()}
            self._used_size = sum(disk.size for disk in files.values())
        return self._used_size

    def usage(self) -> tuple[int, int]:
        return self.used_size(), self.capacity_size

    def heal(self) -> None:
        """End disk faults (slow fsyncs, torn writes, bit flips, full disk); latencies stay."""
        self.options = dataclasses.replace(self.options, slow_fsync_probability=0.0, torn_write_probability=0.0,
                                           bit_flip_probability=0.0, full_probability_per_write=0.0)
        self.is_full = False
        for listing in (*self._dirs.values(), *self._durable_dirs.values()):
            for disk in listing.values():
                disk.options = self.options

    def crash(self) -> None:
        """Power loss: every directory reverts to its synced listing, every file to its synced bytes."""
        self._dirs = {path: dict(listing) for path, listing in self._durable_dirs.items()}
        self._used_size = None
        seen: set[int] = set()
        for path in sorted(self._dirs):
            for name in sorted(self._dirs[path]):
                disk = self._dirs[path][name]
                if id(disk) not in seen:   # identity only: a file named twice crashes once
                    seen.add(id(disk))
                    disk.crash()

    def sync_latency_ns(self) -> int:
        return draw_sync_latency_ns(self.rng, self.options)
