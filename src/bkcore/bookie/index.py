"""The entry index: (ledger, entry) -> entry log location, plus per-ledger state.

Keys are bytes ordered like the tuples they encode (big-endian, non-negative ids):
  b"E" + u64 ledger + u64 entry   -> u64 log id + u64 offset
  b"L" + u64 ledger                -> msgpack {master_key, fenced, lac, lac_body}
  b"M" + u64 entry log id          -> msgpack {ledger id: bytes of its records in that log}
`IndexStore` is the durable key/value store under it: lmdb on real disks
(transports/lmdb_index.py), MemoryIndexStore in tests and the simulator. write() applies one
batch atomically and durably (a committed transaction).
"""

from __future__ import annotations

import functools
import struct
from bisect import bisect_left, insort
from itertools import repeat
from typing import Iterable, Iterator, Mapping, Protocol

from bkcore.runs import leading_equal_count

ENTRY_PREFIX = b"E"
LEDGER_PREFIX = b"L"
LOG_META_PREFIX = b"M"
_U64 = struct.Struct(">Q")
_U64_PAIR = struct.Struct(">QQ")
_ENTRY_KEY = struct.Struct(">cQQ")      # ENTRY_PREFIX, ledger, entry: the same bytes as prefix + _U64_PAIR

# entry_key(ledger_id, entry_id), pack_location(log_id, offset) and unpack_location(value) are
# the structs' own C functions (entry_key with its prefix bound by a partial): they run for
# every entry stored or read, and a Python function around each would double its cost.
entry_key = functools.partial(_ENTRY_KEY.pack, ENTRY_PREFIX)
pack_location = _U64_PAIR.pack
unpack_location = _U64_PAIR.unpack


def unpack_locations(values: list[bytes]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(log ids, offsets) of packed locations, up to the first value that is not one: all of them
    in one unpack, not a call and a tuple each."""
    count = len(values)
    packed = b"".join(values)
    if len(packed) != count * _U64_PAIR.size:
        count = next(index for index, value in enumerate(values) if len(value) != _U64_PAIR.size)
        packed = b"".join(values[:count])
    fields = struct.unpack(">%dQ" % (2 * count), packed)
    return fields[0::2], fields[1::2]


def entry_prefix(ledger_id: int) -> bytes:
    return ENTRY_PREFIX + _U64.pack(ledger_id)


def entry_id_of(key: bytes) -> int:
    return _U64_PAIR.unpack_from(key, 1)[1]


def ledger_key(ledger_id: int) -> bytes:
    return LEDGER_PREFIX + _U64.pack(ledger_id)


def ledger_id_of(key: bytes) -> int:
    return _U64.unpack_from(key, 1)[0]


def log_meta_key(log_id: int) -> bytes:
    return LOG_META_PREFIX + _U64.pack(log_id)


def log_id_of_meta_key(key: bytes) -> int:
    return _U64.unpack_from(key, 1)[0]


class IndexStore(Protocol):
    def get(self, key: bytes) -> bytes | None: ...
    def last_key_with_prefix(self, prefix: bytes) -> bytes | None: ...
    def keys_with_prefix(self, prefix: bytes) -> Iterator[bytes]: ...
    # Up to count_max (key, value) pairs in key order from the first key >= `first`.
    def items_from(self, first: bytes, count_max: int) -> list[tuple[bytes, bytes]]: ...
    # A batch read's locations in one pass, not a lookup each: the values of the ledger's entries
    # first_entry_id, first_entry_id + 1, ... up to the first one not indexed, count_max at most.
    def entry_locations(self, ledger_id: int, first_entry_id: int, count_max: int) -> list[bytes]: ...
    # puts: a mapping, or (key, value) pairs (an iterator is consumed once). Deletes go first.
    def write(self, puts: Mapping[bytes, bytes] | Iterable[tuple[bytes, bytes]], deletes: list[bytes]) -> None: ...


def entry_locations_plain(index: IndexStore, ledger_id: int, first_entry_id: int, count_max: int) -> list[bytes]:
    """IndexStore.entry_locations from items_from, its keys checked against the keys expected."""
    items = index.items_from(entry_key(ledger_id, first_entry_id), count_max)
    expected = list(map(entry_key, repeat(ledger_id, len(items)), range(first_entry_id, first_entry_id + len(items))))
    count = leading_equal_count([bytes(key) for key, _ in items], expected)
    return [bytes(value) for _, value in items[:count]]


class MemoryIndexStore:
    """A committed-on-write sorted map: nothing is pending, so a crash loses nothing written.

    How: a dict holds the values (point lookups: nearly every query) and a list holds the same
    keys in order (range queries: bisect). A checkpoint's few new keys are placed one by one
    with insort (C: a binary search and one move of the list's tail), a large batch by one sort
    (C: the new keys merged into the sorted run), both cheaper than a sorted container's
    Python-level inserts."""

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        # Invariant: exactly the keys of _data, in increasing order.
        self._keys: list[bytes] = []
        self.write_count = 0

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def _range(self, prefix: bytes) -> tuple[int, int]:
        """The slice of _keys that starts with prefix (keys are at most 17 bytes long)."""
        keys = self._keys
        return bisect_left(keys, prefix), bisect_left(keys, prefix + b"\xff" * 17)

    def last_key_with_prefix(self, prefix: bytes) -> bytes | None:
        start, end = self._range(prefix)
        return self._keys[end - 1] if end > start else None

    def keys_with_prefix(self, prefix: bytes) -> Iterator[bytes]:
        start, end = self._range(prefix)
        return iter(self._keys[start:end])      # a copy: the caller may write while iterating

    def items_from(self, first: bytes, count_max: int) -> list[tuple[bytes, bytes]]:
        data = self._data
        start = bisect_left(self._keys, first)
        return [(key, data[key]) for key in self._keys[start:start + count_max]]

    def entry_locations(self, ledger_id: int, first_entry_id: int, count_max: int) -> list[bytes]:
        return entry_locations_plain(self, ledger_id, first_entry_id, count_max)

    def write(self, puts: Mapping[bytes, bytes] | Iterable[tuple[bytes, bytes]], deletes: list[bytes]) -> None:
        if not isinstance(puts, dict):
            puts = dict(puts)
        data, keys = self._data, self._keys
        for key in deletes:
            if data.pop(key, None) is not None:
                del keys[bisect_left(keys, key)]
        new_keys = [key for key in puts if key not in data]
        data.update(puts)
        if len(new_keys) * 16 > len(keys):
            keys.extend(new_keys)
            keys.sort()
        else:
            for key in new_keys:
                insort(keys, key)
        self.write_count += 1

    def invariants(self) -> None:
        assert self._keys == sorted(self._data)
