"""OsFileSystem: the FileSystem interface over real files, with fdatasync and directory fsync.

Open write handles are cached per path (a journal writes thousands of times a second): one
opened O_APPEND for append(), one without it for write_at() and preallocate() (on Linux a
pwrite to an O_APPEND descriptor appends, whatever its offset); rename and delete close them
first. preallocate() uses posix_fallocate, or writes zeros where the file system or the
platform has no fallocate. drop_cached() is posix_fadvise(DONTNEED), where there is one.
Blocking: call from a worker thread in async code.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil

from bkcore.bookie.fs import DiskFullError, FileSystemError

INDEX_DIR = "index"                     # a bookie's lmdb index, under its dataDir
# The files a bookie keeps, by kind: (the directory, given its JournalConfig; their suffix).
_FILE_KINDS = {"journal": (lambda config: config.journal_dir, ".txn"),
               "entrylog": (lambda config: config.ledger_dirs[0], ".log"),
               "index": (lambda config: INDEX_DIR, "")}
FILE_KINDS = tuple(_FILE_KINDS)

# posix_fallocate's answers that mean "not here" (then zeros are written instead).
_NO_FALLOCATE_ERRNOS = frozenset({errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL})
ZERO_CHUNK_SIZE = 1024 * 1024
# drop_cached's advice; None where the platform has no posix_fadvise (then it does nothing).
_FADVISE_DONTNEED = getattr(os, "POSIX_FADV_DONTNEED", None) if hasattr(os, "posix_fadvise") else None


def _fallocate(fd: int, offset: int, size: int) -> bool:
    """posix_fallocate; False where the platform or the file system has none."""
    if not hasattr(os, "posix_fallocate"):
        return False
    try:
        os.posix_fallocate(fd, offset, size)
    except OSError as exc:
        if exc.errno in _NO_FALLOCATE_ERRNOS:
            return False
        raise
    return True


def bookie_files(data_dir: str, journal_config, kinds: tuple[str, ...] = FILE_KINDS) -> list[dict]:
    """The journal, entry log and index files of the bookie whose dataDir and JournalConfig
    these are, of `kinds` (of FILE_KINDS): {"kind", "file" (its path), "size"} each, by kind,
    then by name (journal and entry log names grow with time)."""
    rows = []
    for kind in kinds:
        directory_of, suffix = _FILE_KINDS[kind]
        directory = os.path.join(data_dir, directory_of(journal_config))
        names = sorted(os.listdir(directory)) if os.path.isdir(directory) else []
        for name in names:
            path = os.path.join(directory, name)
            if name.endswith(suffix) and os.path.isfile(path):
                rows.append({"kind": kind, "file": path, "size": os.path.getsize(path)})
    return rows


class OsFileSystem:
    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)
        self._handles: dict[str, int] = {}               # O_APPEND
        self._positional_handles: dict[str, int] = {}    # for pwrite

    def _path(self, path: str) -> str:
        full = os.path.normpath(os.path.join(self.root, path))
        if full != self.root and not full.startswith(self.root + os.sep):
            raise FileSystemError(f"path {path!r} escapes the bookie root {self.root}")
        return full

    def makedirs(self, path: str) -> None:
        os.makedirs(self._path(path), exist_ok=True)

    def list_dir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(self._path(path)))
        except FileNotFoundError:
            return []

    def exists(self, path: str) -> bool:
        return os.path.exists(self._path(path))

    def size(self, path: str) -> int:
        return os.path.getsize(self._path(path))

    def read(self, path: str, offset: int = 0, size: int = -1) -> bytes:
        with open(self._path(path), "rb") as handle:
            handle.seek(offset)
            return handle.read(size)

    def _handle(self, path: str) -> int:
        fd = self._handles.get(path)
        if fd is None:
            fd = os.open(self._path(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._handles[path] = fd
        return fd

    def _positional_handle(self, path: str) -> int:
        fd = self._positional_handles.get(path)
        if fd is None:
            fd = os.open(self._path(path), os.O_WRONLY | os.O_CREAT, 0o644)
            self._positional_handles[path] = fd
        return fd

    def _io_error(self, path: str, exc: OSError) -> FileSystemError:
        if exc.errno == errno.ENOSPC:
            return DiskFullError(f"{self._path(path)}: no space left on device")
        return FileSystemError(f"{self._path(path)}: {exc}")

    def append(self, path: str, data: bytes) -> None:
        fd = self._handle(path)
        view = memoryview(data)
        try:
            while view:
                written = os.write(fd, view)
                view = view[written:]
        except OSError as exc:
            raise self._io_error(path, exc) from None

    def write_at(self, path: str, offset: int, data: bytes) -> None:
        if offset < 0:
            raise FileSystemError(f"{self._path(path)}: negative offset {offset}")
        fd = self._positional_handle(path)
        view = memoryview(data)
        try:
            while view:
                written = os.pwrite(fd, view, offset)
                view = view[written:]
                offset += written
        except OSError as exc:
            raise self._io_error(path, exc) from None

    def preallocate(self, path: str, size: int) -> None:
        fd = self._positional_handle(path)
        try:
            current_size = os.fstat(fd).st_size
            if size > current_size and not _fallocate(fd, current_size, size - current_size):
                self._write_zeros(fd, current_size, size)
        except OSError as exc:
            raise self._io_error(path, exc) from None

    @staticmethod
    def _write_zeros(fd: int, offset: int, end: int) -> None:
        zeros = bytes(min(ZERO_CHUNK_SIZE, end - offset))
        while offset < end:
            offset += os.pwrite(fd, memoryview(zeros)[:end - offset], offset)

    def _open_handle(self, path: str) -> int | None:
        """A descriptor of `path` already open here (either kind), or None."""
        fd = self._handles.get(path)
        return self._positional_handles.get(path) if fd is None else fd

    def sync(self, path: str) -> None:
        fd = self._open_handle(path)
        if fd is not None:
            os.fdatasync(fd)           # any descriptor of the file syncs all of its data
            return
        fd = os.open(self._path(path), os.O_RDONLY)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)

    def drop_cached(self, path: str, offset: int, size: int) -> None:
        fd = self._open_handle(path)
        if fd is None or _FADVISE_DONTNEED is None:
            return
        with contextlib.suppress(OSError):          # a hint: a filesystem may not take it
            os.posix_fadvise(fd, offset, size, _FADVISE_DONTNEED)

    def sync_dir(self, path: str) -> None:
        fd = os.open(self._path(path), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _close(self, path: str) -> None:
        for handles in (self._handles, self._positional_handles):
            fd = handles.pop(path, None)
            if fd is not None:
                os.close(fd)

    def rename(self, source: str, destination: str) -> None:
        self._close(source)
        self._close(destination)
        os.replace(self._path(source), self._path(destination))

    def delete(self, path: str) -> None:
        self._close(path)
        os.unlink(self._path(path))

    def usage(self) -> tuple[int, int]:
        total, used, _ = shutil.disk_usage(self.root)
        return used, total

    def disk_space(self) -> tuple[int, int]:
        """(free, total) bytes of the device, free as this process may use it: blocks reserved
        for root are not free (total - used would count them)."""
        total, _, free = shutil.disk_usage(self.root)
        return free, total

    def close(self) -> None:
        for path in [*self._handles, *self._positional_handles]:
            self._close(path)
