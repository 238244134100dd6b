"""WatchedCache: the metadata values a catalog has read (segments, streams), kept while the
metastore's watch on each node says it is unchanged.

Readers list a stream's segments over and over (on every segment they finish, and on every
wake-up of a tailing reader) and read the stream node after each listing (its truncation
point), and used to read every one of those nodes again although a sealed segment's value
changes rarely (a truncation mark), an in-progress one once (when it is sealed), a stream's on
truncation. Each entry is the decoded value a Get returned together with the one-shot watch set
by that same Get; the entry serves only while its watch has not fired. The watch fires on any change of
the node (its value, its deletion) and on a lost connection or session, and every backend
delivers it before the answer to any later read of the same session (bkmetastore.api), so a
listing that reads the children first and then takes the entries whose watches are quiet sees
each node as fresh as a Get sent at that moment would.

Limits: at most `entries_max` entries. A put into a full cache first drops every entry whose
watch has fired, then, if still full, the oldest entry (it is read again when next needed; its
watch stays set in the store until the node changes, as any unneeded watch does).
"""

from __future__ import annotations

WATCHED_CACHE_ENTRIES_MAX = 4096


class WatchedCache:
    __slots__ = ("entries_max", "_entries", "hit_count", "miss_count", "eviction_count")

    def __init__(self, *, entries_max: int = WATCHED_CACHE_ENTRIES_MAX) -> None:
        assert entries_max >= 1
        self.entries_max = entries_max
        # Path -> (value, the watch its Get set). Invariant: the value is what the node held
        # when that watch was set; insertion order is age (oldest first).
        self._entries: dict[str, tuple[object, object]] = {}
        self.hit_count = 0
        self.miss_count = 0
        self.eviction_count = 0

    def get(self, path: str) -> object | None:
        """The cached value of `path` if its watch is still quiet; None otherwise."""
        entry = self._entries.get(path)
        if entry is not None:
            if not entry[1].is_fired:
                self.hit_count += 1
                return entry[0]
            del self._entries[path]
        self.miss_count += 1
        return None

    def put(self, path: str, value: object, watch) -> None:
        """Keep `value` (not None), read from `path` by the Get that set `watch` (one already
        fired is not kept)."""
        assert value is not None
        if watch.is_fired:
            self._entries.pop(path, None)
            return
        self._entries.pop(path, None)
        if len(self._entries) >= self.entries_max:
            self._entries = {p: e for p, e in self._entries.items() if not e[1].is_fired}
            if len(self._entries) >= self.entries_max:
                del self._entries[next(iter(self._entries))]
                self.eviction_count += 1
        self._entries[path] = (value, watch)

    def forget(self, path: str) -> None:
        """This session changed the node: its entry is stale (its watch fires too)."""
        self._entries.pop(path, None)

    def __len__(self) -> int:
        return len(self._entries)
