"""The table service's indexes in lmdb: one environment per stream-storage server, one named
database per table range.

A range's index is derived data. The range's journal stream is the source of truth, and an
owner rebuilds the index from a checkpoint plus the journal each time it opens the range. So
commits skip fsync (`sync=False`): a crash can lose the last commits, but lmdb keeps the file
consistent, and nothing reads the index before it is rebuilt. What lmdb adds over a dict is that a
table's state lives on disk, not in the heap, and that a checkpoint reads a consistent snapshot
(an lmdb read transaction) while commands go on being applied.

lmdb keys are at most 511 bytes; table keys may be as long as a table command allows (about
1 MiB). A longer key is stored under its first LONG_KEY_PREFIX_SIZE bytes plus a 16-byte hash
of the whole key, with the whole key kept in front of its value (see _stored). That keeps the
order of keys that differ within their prefixes; scans sort the few keys that share one.

Writes run on the trio thread that owns the ranges. The calls are short (one key, one scan, one
commit), and lmdb answers them from its memory map. A snapshot (one read transaction) may be read
from any thread: the gRPC handler threads answer gets from snapshots, each command (or group of
commands applied together: KvIndex.batch, one write transaction) being one commit, so a snapshot
shows whole commands only.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from typing import Iterable, Iterator

import lmdb

from bkcore.table.kv import KvIndex, KvIndexSnapshot

MAP_SIZE_DEFAULT = 1 << 36     # address space only: the file grows as data arrives
RANGE_DATABASES_MAX = 4096
LMDB_KEY_SIZE_MAX = 511        # lmdb's default build (Environment.max_key_size())
LONG_KEY_HASH_SIZE = 16
# Keys up to this size are stored as they are; longer ones as this many bytes and a hash.
LONG_KEY_PREFIX_SIZE = LMDB_KEY_SIZE_MAX - LONG_KEY_HASH_SIZE


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
        self._batch_txn = None          # the write transaction of a batch() under way

    def get(self, key: bytes) -> bytes | None:
        if self._batch_txn is not None:
            return _get(self._batch_txn, key)
        with self._env.begin(db=self._db, buffers=False) as txn:
            return _get(txn, key)

    def scan(self, start: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Pairs with start <= key < end, read in one transaction and returned as a list's
        iterator (the caller may write while it iterates)."""
        if self._batch_txn is not None:
            return iter(_scan(self._batch_txn, start, end))
        with self._env.begin(db=self._db) as txn:
            return iter(_scan(txn, start, end))

    def write(self, changes: dict[bytes, bytes | None]) -> None:
        with self._full_as_index_full():
            if self._batch_txn is not None:
                _write(self._batch_txn, changes)
                return
            with self._env.begin(db=self._db, write=True) as txn:
                _write(txn, changes)

    @contextlib.contextmanager
    def batch(self):
        """One write transaction for the block's writes (see KvIndex.batch)."""
        if self._batch_txn is not None:
            yield
            return
        with self._full_as_index_full():
            txn = self._batch_txn = self._env.begin(db=self._db, write=True)
            try:
                yield
            except BaseException:
                txn.abort()
                raise
            else:
                txn.commit()
            finally:
                self._batch_txn = None

    @contextlib.contextmanager
    def _full_as_index_full(self):
        try:
            yield
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
            txn.cursor().putmulti(_stored(key, value) for key, value in items)

    def snapshot(self) -> LmdbSnapshot:
        return LmdbSnapshot(self._env.begin(db=self._db, buffers=False))


class LmdbSnapshot(KvIndexSnapshot):
    """One lmdb read transaction (py-lmdb opens environments without thread-local readers, so
    any thread may use one, one thread at a time)."""

    def __init__(self, txn) -> None:
        self._txn = txn

    def get(self, key: bytes) -> bytes | None:
        return _get(self._txn, key)

    def scan(self, start: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        return iter(_scan(self._txn, start, end))

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        return _in_key_order(self._txn.cursor())

    def close(self) -> None:
        self._txn.abort()


def _database_name(table: str, range_id: int) -> bytes:
    return f"{table}~{range_id}".encode()


def _items_of(txn) -> Iterator[tuple[bytes, bytes]]:
    try:
        yield from _in_key_order(txn.cursor())
    finally:
        txn.abort()


# -- long keys ----------------------------------------------------------------------------------

def _stored_key(key: bytes) -> bytes:
    if len(key) <= LONG_KEY_PREFIX_SIZE:
        return key
    return key[:LONG_KEY_PREFIX_SIZE] + hashlib.blake2b(key, digest_size=LONG_KEY_HASH_SIZE).digest()


def _stored(key: bytes, value: bytes) -> tuple[bytes, bytes]:
    """The lmdb pair of an index pair: a long key's value starts with the key and its size."""
    if len(key) <= LONG_KEY_PREFIX_SIZE:
        return key, value
    return _stored_key(key), len(key).to_bytes(4, "big") + key + value


def _write(txn, changes: dict[bytes, bytes | None]) -> None:
    for key, value in changes.items():
        if value is None:
            txn.delete(_stored_key(key))
        else:
            txn.put(*_stored(key, value))


def _unstored(stored_key: bytes, stored_value: bytes) -> tuple[bytes, bytes]:
    if len(stored_key) <= LONG_KEY_PREFIX_SIZE:
        return bytes(stored_key), bytes(stored_value)
    size = int.from_bytes(stored_value[:4], "big")
    return bytes(stored_value[4:4 + size]), bytes(stored_value[4 + size:])


def _get(txn, key: bytes) -> bytes | None:
    stored = txn.get(_stored_key(key))
    if stored is None:
        return None
    found, value = _unstored(_stored_key(key), stored)
    return value if found == key else None       # (another key with the same hash: not this one)


def _scan(txn, start: bytes, end: bytes) -> list[tuple[bytes, bytes]]:
    """Pairs with start <= key < end in key order. A long key sorts among the others by its
    prefix; so the lmdb scan starts at start's prefix, ends past every key below `end` (a long
    `end`: its prefix and the largest hash), and the pairs are then filtered and put in order."""
    first = start[:LONG_KEY_PREFIX_SIZE]
    last = end if len(end) <= LONG_KEY_PREFIX_SIZE else end[:LONG_KEY_PREFIX_SIZE] + b"\xff" * (LONG_KEY_HASH_SIZE + 1)
    pairs = []
    cursor = txn.cursor()
    if cursor.set_range(first):
        for stored_key, stored_value in cursor:
            if stored_key >= last:
                break
            key, value = _unstored(stored_key, stored_value)
            if start <= key < end:
                pairs.append((key, value))
    pairs.sort()
    return pairs


def _in_key_order(pairs: Iterable[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
    """Stored pairs as index pairs in key order: the long keys that share a prefix come
    together in lmdb (after any short key equal to the prefix) and are sorted here."""
    group: list[tuple[bytes, bytes]] = []
    for stored_key, stored_value in pairs:
        pair = _unstored(stored_key, stored_value)
        if group and stored_key[:LONG_KEY_PREFIX_SIZE] != group[0][0][:LONG_KEY_PREFIX_SIZE]:
            group.sort()
            yield from group
            group = []
        if len(stored_key) > LONG_KEY_PREFIX_SIZE:
            group.append(pair)
        else:
            yield from sorted(group)
            group = []
            yield pair
    yield from sorted(group)
