"""WatchTable: which one-shot watches to fire for a batch of changed paths.

Shared by every backend that learns of changes as a list of (path, is_membership_change) pairs
(the memory store's take_changes(), raft-lite's applied commands, the simulator's tree). A
watch is anything with fire(reason); the table makes them with the factory it is given
(bkmetastore.api.Watch for trio code, the simulator's own for simulated processes). A data watch on P fires when
P is created, changed or deleted; a children watch on P fires when a child of P is created or
deleted (and, to be safe, when P itself is created or deleted).
"""

from __future__ import annotations

from typing import Callable


class OneShotWatch:
    """A one-shot notification that something watched may have changed, over an event of the
    caller's runtime (trio's, for bkmetastore.api.Watch; a simulated process's in the simulator)."""

    __slots__ = ("_event", "reason")

    def __init__(self, event) -> None:
        self._event = event
        self.reason = ""

    def fire(self, reason: str = "changed") -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    @property
    def is_fired(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> str:
        """Wait until the watch fires; returns why ("changed", "connection lost", ...)."""
        await self._event.wait()
        return self.reason


def parent_of(path: str) -> str:
    parent = path.rpartition("/")[0]
    return parent or "/"


class WatchTable:
    def __init__(self, new_watch: Callable[[], object]) -> None:
        self._new_watch = new_watch
        self._data_watches: dict[str, list] = {}
        self._children_watches: dict[str, list] = {}

    def add(self, path: str, *, is_children: bool):
        return self.add_watch(path, self._new_watch(), is_children=is_children)

    def add_watch(self, path: str, watch, *, is_children: bool):
        table = self._children_watches if is_children else self._data_watches
        table.setdefault(path, []).append(watch)
        return watch

    def fire_changes(self, changes: list[tuple[str, bool]]) -> None:
        for path, is_membership_change in changes:
            self._fire(self._data_watches, path)
            if is_membership_change:
                self._fire(self._children_watches, path)
                self._fire(self._children_watches, parent_of(path))

    def fire_all(self, reason: str) -> None:
        """The connection or session was lost: every watcher must re-read."""
        for table in (self._data_watches, self._children_watches):
            for watches in table.values():
                for watch in watches:
                    watch.fire(reason)
            table.clear()

    def __len__(self) -> int:
        return sum(len(w) for w in self._data_watches.values()) + sum(
            len(w) for w in self._children_watches.values())

    @staticmethod
    def _fire(table: dict[str, list], path: str) -> None:
        for watch in table.pop(path, ()):
            watch.fire("changed")
