"""The table service's indexes in lmdb: one environment per stream-storage server, one named
database per table range.

A range's index is derived data. The range's journal stream is the source of truth, and an
owner rebuilds the index from a checkpoint plus the journal each time it opens the range. So
commits skip fsync (`sync=False`): a crash can lose the last commits, but lmdb keeps the file
consistent, and nothing reads the index before it is rebuilt. What lmdb adds over a dict is that a
table's state lives on disk, not in the heap, and that a checkpoint reads a consistent snapshot
(an lmdb read transaction) while commands go on being applied.

Writes run on the trio thread that owns the ranges. The calls are short (one key, one scan, one
commit), and lmdb answers them from its memory map. A snapshot (one read transaction) may be read
from any thread: the gRPC handler threads answer gets from snapshots, each command being one
write transaction, so a snapshot shows whole commands only.
"""

from __future__ import annotations

import os
from typing import Iterable, Iterator

import lmdb

from bkcore.table.kv import KvIndex, KvIndexSnapshot

MAP_SIZE_DEFAULT = 1 << 36     # address space only: the file grows as data arrives
RANGE_DATABASES_MAX = 4096


class IndexFull(Exception):
    """The lmdb map of the table indexes is full."""


class LmdbRangeIndexes:
    """The environment at `path` (created if missing) and the per-range databases in it."""

    def __init__(self, path: str, *, map_size: int = MAP_SIZE_DEFAULT) -> None:
        os.makedirs(path, exist_ok=True)
        self.path = path
        self.env = lmdb.open(path, map_size=map_size, subdir=True, max_dbs=RANGE_DATABASES_MAX,
                             sync=False, metasync=False, lock=True)

    def index_for(self, table: str, range_id: int) -> LmdbKvIndex:
        """The index of one range, emptied: its owner is about to rebuild it."""
        index = LmdbKvIndex(self, self.env.open_db(_database_name(table, range_id)))
        index.replace_all(())
        return index

    def drop_table(self, table: str) -> None:
        """Forget the indexes of every range of a deleted table."""
        prefix = _database_name(table, 0)[:-1]
        with self.env.begin() as txn:      # named databases are keys of the main one
            names = [bytes(key) for key, _ in txn.cursor() if key.startswith(prefix) and key[len(prefix):].isdigit()]
        for name in names:
            database = self.env.open_db(name)
            with self.env.begin(write=True) as txn:
                txn.drop(database, delete=True)

    def close(self) -> None:
        self.env.close()


class LmdbKvIndex(KvIndex):
    def __init__(self, indexes: LmdbRangeIndexes, database) -> None:
        self._env = indexes.env
        self._path = indexes.path
        self._db = database

    def get(self, key: bytes) -> bytes | None:
        with self._env.begin(db=self._db, buffers=False) as txn:
            return txn.get(key)

    def scan(self, start: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Pairs with start <= key < end, read in one transaction and returned as a list's
        iterator (the caller may write while it iterates)."""
        pairs = []
        with self._env.begin(db=self._db) as txn:
            cursor = txn.cursor()
            if cursor.set_range(start):
                for key, value in cursor:
                    if key >= end:
                        break
                    pairs.append((key, value))
        return iter(pairs)

    def write(self, changes: dict[bytes, bytes | None]) -> None:
        try:
            with self._env.begin(db=self._db, write=True) as txn:
                for key, value in changes.items():
                    if value is None:
                        txn.delete(key)
                    else:
                        txn.put(key, value)
        except lmdb.MapFullError:
            raise IndexFull(f"the table index at {self._path} is full; free disk space or restart the "
                            f"server with a larger map") from None

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every pair, as of now, even if writes happen while the caller iterates: the read
        transaction is taken here, before the first item is asked for."""
        txn = self._env.begin(db=self._db)
        return _items_of(txn)

    def replace_all(self, items: Iterable[tuple[bytes, bytes]]) -> None:
        with self._env.begin(db=self._db, write=True) as txn:
            txn.drop(self._db, delete=False)
            txn.cursor().putmulti(items)

    def snapshot(self) -> LmdbSnapshot:
        return LmdbSnapshot(self._env.begin(db=self._db, buffers=False))


class LmdbSnapshot(KvIndexSnapshot):
    """One lmdb read transaction (py-lmdb opens environments without thread-local readers, so
    any thread may use one, one thread at a time)."""

    def __init__(self, txn) -> None:
        self._txn = txn

    def get(self, key: bytes) -> bytes | None:
        return self._txn.get(key)

    def scan(self, start: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        cursor = self._txn.cursor()
        if cursor.set_range(start):
            for key, value in cursor:
                if key >= end:
                    return
                yield key, value

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(self._txn.cursor())

    def close(self) -> None:
        self._txn.abort()


def _database_name(table: str, range_id: int) -> bytes:
    return f"{table}~{range_id}".encode()


def _items_of(txn) -> Iterator[tuple[bytes, bytes]]:
    try:
        yield from txn.cursor()
    finally:
        txn.abort()
