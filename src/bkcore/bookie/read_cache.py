"""ReadCache: entries a bookie keeps in memory after reads and checkpoints, least recently used
out first, bounded both by count (readCacheMaxEntries) and by bytes
(dbStorage_readAheadCacheMaxSizeMb): 4,096 entries of 5 MiB would otherwise be 20 GiB.

Keys are memory keys (entrylog.memory_key: ledger << 64 | entry). A body larger than the byte
bound is not kept at all.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Iterable

from bkcore.bookie.entrylog import ENTRY_ID_BITS


class ReadCache:
    __slots__ = ("_entries", "size", "count_max", "size_max")

    def __init__(self, *, count_max: int, size_max: int) -> None:
        self._entries: OrderedDict[int, bytes] = OrderedDict()
        self.size = 0                 # bytes of the bodies held
        self.count_max = count_max
        self.size_max = size_max

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: int) -> bool:
        return key in self._entries

    def peek(self, key: int) -> bytes | None:
        """The body, without making it the most recently used (a scan's look)."""
        return self._entries.get(key)

    def use(self, key: int) -> bytes | None:
        """The body, now the most recently used."""
        body = self._entries.get(key)
        if body is not None:
            self._entries.move_to_end(key)
        return body

    def put(self, key: int, body: bytes) -> None:
        """Keep body as the most recently used, evicting the least recently used past a bound."""
        entries = self._entries
        previous = entries.pop(key, None)
        if previous is not None:
            self.size -= len(previous)
        if len(body) > self.size_max:
            return
        entries[key] = body
        self.size += len(body)
        while len(entries) > self.count_max or self.size > self.size_max:
            self.size -= len(entries.popitem(last=False)[1])

    def discard(self, key: int) -> None:
        body = self._entries.pop(key, None)
        if body is not None:
            self.size -= len(body)

    def discard_all(self, keys: Iterable[int]) -> None:
        """discard() of many keys, which are nearly never held: one C-level test first."""
        if self._entries and not self._entries.keys().isdisjoint(keys):
            for key in keys:
                self.discard(key)

    def discard_ledger(self, ledger_id: int) -> None:
        for key in [key for key in self._entries if key >> ENTRY_ID_BITS == ledger_id]:
            self.discard(key)

    def clear(self) -> None:
        self._entries.clear()
        self.size = 0
