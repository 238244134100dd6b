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
import itertools
import struct
from typing import Iterator, Protocol

from sortedcontainers import SortedDict

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
    # Up to count_max (key, value) pairs in key order from the first key >= `first`: a batch
    # read's locations in one pass, not a lookup each.
    def items_from(self, first: bytes, count_max: int) -> list[tuple[bytes, bytes]]: ...
    def write(self, puts: dict[bytes, bytes], deletes: list[bytes]) -> None: ...


class MemoryIndexStore:
    """A committed-on-write sorted map: nothing is pending, so a crash loses nothing written."""

    def __init__(self) -> None:
        self._data: SortedDict = SortedDict()
        self.write_count = 0

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def last_key_with_prefix(self, prefix: bytes) -> bytes | None:
        keys = self._data.keys()
        index = self._data.bisect_left(prefix + b"\xff" * 17) - 1
        if index >= 0 and keys[index].startswith(prefix):
            return keys[index]
        return None

    def keys_with_prefix(self, prefix: bytes) -> Iterator[bytes]:
        for key in self._data.irange(minimum=prefix):
            if not key.startswith(prefix):
                return
            yield key

    def items_from(self, first: bytes, count_max: int) -> list[tuple[bytes, bytes]]:
        data = self._data
        return [(key, data[key]) for key in itertools.islice(data.irange(minimum=first), count_max)]

    def write(self, puts: dict[bytes, bytes], deletes: list[bytes]) -> None:
        for key in deletes:
            self._data.pop(key, None)
        self._data.update(puts)
        self.write_count += 1
