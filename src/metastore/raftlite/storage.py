"""RaftStorage: a raft-lite node's durable state on real files, in its data directory.

    state      msgpack [term, voted_for], replaced atomically (temp, fsync, rename, fsync dir)
    snapshot   msgpack [index, term, state machine], replaced atomically
    log        records: u32 length | u32 crc32c | msgpack [index, term, command], appended and
               fdatasync'ed; rewritten atomically when a suffix is dropped or a snapshot
               covers a prefix

load() rebuilds a PersistentState. A torn last log record (a crash mid-append) is dropped and
reported; a bad record followed by good ones is an error naming the offset. Every write here
blocks: the server calls them from a worker thread, one at a time, in effect order.
"""

from __future__ import annotations

import os
import struct

import crc32c
import msgpack

from bkmetastore.raftlite.core import PersistentState

RECORD_HEADER = struct.Struct(">II")


class RaftStorageError(Exception):
    pass


class RaftStorage:
    def __init__(self, directory: str) -> None:
        self.directory = os.path.abspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        self._log_path = os.path.join(self.directory, "log")
        self._log_fd: int | None = None
        self._first_index = 1               # index of the log file's first record
        self._next_index = 1                # index the next appended record gets
        self.tail_problem: str | None = None

    # -- files ----------------------------------------------------------------------------------

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def _replace(self, name: str, data: bytes) -> None:
        temp = self._path(name + ".tmp")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temp, self._path(name))
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def _read(self, name: str) -> bytes | None:
        try:
            with open(self._path(name), "rb") as file:
                return file.read()
        except FileNotFoundError:
            return None

    @staticmethod
    def _record(index: int, term: int, command: list) -> bytes:
        payload = msgpack.packb([index, term, command], use_bin_type=True)
        return RECORD_HEADER.pack(len(payload), crc32c.crc32c(payload)) + payload

    # -- load -----------------------------------------------------------------------------------

    def load(self) -> PersistentState:
        state = PersistentState()
        hard = self._read("state")
        if hard is not None:
            state.term, state.voted_for = msgpack.unpackb(hard, raw=False)
        snapshot = self._read("snapshot")
        if snapshot is not None:
            state.snapshot_index, state.snapshot_term, state.snapshot_state = msgpack.unpackb(
                snapshot, raw=False, strict_map_key=False)
        data = self._read("log") or b""
        offset = 0
        entries: list[tuple[int, int, list]] = []
        while offset < len(data):
            if len(data) - offset < RECORD_HEADER.size:
                self.tail_problem = f"{self._log_path}: {len(data) - offset} stray bytes at the end (torn write)"
                break
            length, checksum = RECORD_HEADER.unpack_from(data, offset)
            end = offset + RECORD_HEADER.size + length
            payload = data[offset + RECORD_HEADER.size:end]
            if end > len(data) or crc32c.crc32c(payload) != checksum:
                if end >= len(data):
                    self.tail_problem = f"{self._log_path}: torn last record at offset {offset}"
                    break
                raise RaftStorageError(f"{self._log_path}: bad record at offset {offset} with more after it; "
                                       f"restore this node from a peer (delete its data dir and let it catch up)")
            entries.append(tuple(msgpack.unpackb(payload, raw=False)))
            offset = end
        expected = state.snapshot_index + 1
        for index, term, command in entries:
            if index <= state.snapshot_index:
                continue
            if index != expected:
                raise RaftStorageError(f"{self._log_path}: entry {index} where {expected} was expected")
            state.log.append([term, command])
            expected += 1
        self._rewrite(state.snapshot_index + 1, state.log)   # drops a torn tail for good
        return state

    # -- effects --------------------------------------------------------------------------------

    def save_hard_state(self, term: int, voted_for: int | None) -> None:
        self._replace("state", msgpack.packb([term, voted_for]))

    def save_log(self, first_index: int, entries: list) -> None:
        """Drop entries at or after first_index, then append `entries` from there."""
        if first_index == self._next_index:
            self._append(first_index, entries)
            return
        kept = [entry for index, entry in self._all_entries() if index < first_index]
        self._rewrite(self._first_index, kept + entries)

    def save_snapshot(self, index: int, term: int, state: list) -> None:
        self._replace("snapshot", msgpack.packb([index, term, state], use_bin_type=True))
        self._rewrite(index + 1, [entry for i, entry in self._all_entries() if i > index])

    # -- log file -----------------------------------------------------------------------------

    def _append(self, first_index: int, entries: list) -> None:
        data = b"".join(self._record(first_index + k, term, command) for k, (term, command) in enumerate(entries))
        os.write(self._log_fd, data)
        os.fdatasync(self._log_fd)
        self._next_index = first_index + len(entries)

    def _all_entries(self) -> list[tuple[int, list]]:
        data = self._read("log") or b""
        found, offset = [], 0
        while offset + RECORD_HEADER.size <= len(data):
            length, _ = RECORD_HEADER.unpack_from(data, offset)
            start = offset + RECORD_HEADER.size
            index, term, command = msgpack.unpackb(data[start:start + length], raw=False)
            found.append((index, [term, command]))
            offset = start + length
        return found

    def _rewrite(self, first_index: int, entries: list) -> None:
        """Replace the log file atomically with `entries` numbered from first_index."""
        if self._log_fd is not None:
            os.close(self._log_fd)
        data = b"".join(self._record(first_index + k, term, command) for k, (term, command) in enumerate(entries))
        self._replace("log", data)
        self._log_fd = os.open(self._log_path, os.O_WRONLY | os.O_APPEND)
        self._first_index = first_index
        self._next_index = first_index + len(entries)

    def close(self) -> None:
        if self._log_fd is not None:
            os.close(self._log_fd)
            self._log_fd = None
