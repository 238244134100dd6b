"""OsFileSystem: the FileSystem interface over real files, with fdatasync and directory fsync.

Open append handles are cached per path (a journal appends thousands of times a second);
rename and delete close them first. Blocking: call from a worker thread in async code.
"""

from __future__ import annotations

import errno
import os
import shutil

from bkcore.bookie.fs import DiskFullError, FileSystemError


class OsFileSystem:
    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)
        self._handles: dict[str, int] = {}

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

    def append(self, path: str, data: bytes) -> None:
        fd = self._handle(path)
        view = memoryview(data)
        try:
            while view:
                written = os.write(fd, view)
                view = view[written:]
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise DiskFullError(f"{self._path(path)}: no space left on device") from None
            raise FileSystemError(f"{self._path(path)}: {exc}") from None

    def sync(self, path: str) -> None:
        fd = self._handles.get(path)
        if fd is not None:
            os.fdatasync(fd)
            return
        fd = os.open(self._path(path), os.O_RDONLY)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)

    def sync_dir(self, path: str) -> None:
        fd = os.open(self._path(path), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _close(self, path: str) -> None:
        fd = self._handles.pop(path, None)
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

    def close(self) -> None:
        for path in list(self._handles):
            self._close(path)
