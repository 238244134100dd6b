"""FileSystem: the file operations bookie storage logic needs, behind one interface.

Storage logic (journal files, LastLogMark, entry logs) is written against this protocol and
runs unchanged on the simulator's SimFileSystem (crash-point testing) and on real files
(bktransports.filesystem.OsFileSystem). Paths are '/'-separated and relative to the bookie's
root. The real driver calls these from a worker thread: sync() and sync_dir() block.

Durability contract (POSIX with fdatasync):
- appended or written bytes, and preallocated space, survive a crash only after sync(path);
- a created, renamed or deleted name survives a crash only after sync_dir(its directory).
"""

from __future__ import annotations

from typing import Protocol


class FileSystemError(Exception):
    """An I/O error that is not 'no space left'."""


class DiskFullError(FileSystemError):
    """No space left on the device; the write did not happen."""


class FileSystem(Protocol):
    def makedirs(self, path: str) -> None: ...
    def list_dir(self, path: str) -> list[str]: ...       # sorted names; [] for a missing dir
    def exists(self, path: str) -> bool: ...
    def size(self, path: str) -> int: ...
    def read(self, path: str, offset: int = 0, size: int = -1) -> bytes: ...
    def append(self, path: str, data: bytes) -> None: ...  # creates the file if missing
    # Positional write: overwrites [offset, offset + len(data)) and grows the file if that runs
    # past its end (an offset past the end leaves a hole that reads as zeros); creates the file.
    def write_at(self, path: str, offset: int, data: bytes) -> None: ...
    # Grows the file to at least `size` bytes that read as zeros (fallocate, or zeros written),
    # so that later writes inside it change no file size; never shrinks it. Creates the file.
    def preallocate(self, path: str, size: int) -> None: ...
    def sync(self, path: str) -> None: ...
    # A hint, changing no data: bytes [offset, offset + size), already synced, will not be read
    # soon, so the OS may forget their cached pages (posix_fadvise DONTNEED).
    def drop_cached(self, path: str, offset: int, size: int) -> None: ...
    def sync_dir(self, path: str) -> None: ...
    def rename(self, source: str, destination: str) -> None: ...   # replaces destination
    def delete(self, path: str) -> None: ...
    def usage(self) -> tuple[int, int]: ...                # (used bytes, total bytes) of the device


def parent_of(path: str) -> str:
    return path.rpartition("/")[0] or "."


def write_atomically(fs: FileSystem, path: str, data: bytes) -> None:
    """Replace a small file so that a crash leaves either the old or the new content:
    write a temp file, sync it, rename it over, sync the directory."""
    temporary = path + ".tmp"
    if fs.exists(temporary):
        fs.delete(temporary)
    fs.append(temporary, data)
    fs.sync(temporary)
    fs.rename(temporary, path)
    fs.sync_dir(parent_of(path))
