"""Ledger storage: where a bookie keeps entries and per-ledger state once they are journaled.

The Bookie only talks to the `LedgerStorage` protocol. `MemoryLedgerStorage` is the in-memory
implementation (tests, and simulated bookies that rebuild it from the journal after a crash);
`durable_storage.DurableLedgerStorage` is the entry-log + index one.

Contract, for every implementation:
- set_master_key() creates a ledger's state; the first key stays (a later call is a no-op);
- changes to a ledger that does not exist (never created, or deleted by GC while a record for
  it was in flight) are dropped: the bookie applies journal records in order, so a ledger's
  MASTER_KEY record always comes before its other records;
- every change is idempotent, because crash replay applies records again;
- a stored record that cannot be read back intact raises StorageIOError, which the bookie
  answers with IO_ERROR, never "no such entry".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Protocol

from sortedcontainers import SortedDict

from bkcore.wire import INVALID_ENTRY_ID


class StorageIOError(Exception):
    """A stored record exists but cannot be read back intact."""


class LedgerStorage(Protocol):
    def has_ledger(self, ledger_id: int) -> bool: ...
    def set_master_key(self, ledger_id: int, master_key: bytes) -> None: ...
    def master_key(self, ledger_id: int) -> bytes | None: ...
    def set_fenced(self, ledger_id: int) -> None: ...
    def is_fenced(self, ledger_id: int) -> bool: ...
    def add_entry(self, ledger_id: int, entry_id: int, body: bytes) -> None: ...
    def add_entries(self, ledger_id: int, first_entry_id: int, bodies) -> None: ...  # consecutive ids
    def get_entry(self, ledger_id: int, entry_id: int) -> bytes | None: ...      # None: no such entry
    # Entries first_entry_id, first_entry_id + 1, ... up to the first one missing, at most
    # count_max of them and size_max bytes (the first whatever its size); may stop sooner,
    # before an entry that cannot be read (StorageIOError only when that is the first).
    def get_entries(self, ledger_id: int, first_entry_id: int, count_max: int, size_max: int) -> list[bytes]: ...
    def last_entry_id(self, ledger_id: int) -> int: ...                          # INVALID_ENTRY_ID if none
    def set_explicit_lac(self, ledger_id: int, lac: int, body: bytes) -> None: ...  # keeps the max lac
    def explicit_lac(self, ledger_id: int) -> tuple[int, bytes] | None: ...
    def delete_ledger(self, ledger_id: int) -> None: ...
    def ledger_ids(self) -> list[int]: ...                                       # ascending


def entries_one_at_a_time(storage: LedgerStorage, ledger_id: int, first_entry_id: int, count_max: int,
                          size_max: int) -> list[bytes]:
    """get_entries() by get_entry() calls: for storages that have nothing faster."""
    bodies: list[bytes] = []
    size = 0
    for entry_id in range(first_entry_id, first_entry_id + count_max):
        try:
            body = storage.get_entry(ledger_id, entry_id)
        except StorageIOError:
            if not bodies:
                raise
            break
        if body is None or (bodies and size + len(body) > size_max):
            break
        bodies.append(body)
        size += len(body)
    return bodies


@dataclass(slots=True)
class _LedgerState:
    master_key: bytes
    is_fenced: bool = False
    entries: SortedDict = field(default_factory=SortedDict)      # entry_id -> packed body
    explicit_lac: tuple[int, bytes] | None = None


class MemoryLedgerStorage:
    """Everything in dicts. `corrupt_entries` holds (ledger_id, entry_id) pairs that a test
    declared unreadable: get_entry() raises StorageIOError for them while they are stored."""

    def __init__(self, *, corrupt_entries: Iterable[tuple[int, int]] = ()) -> None:
        self._ledgers: dict[int, _LedgerState] = {}
        self.corrupt_entries: set[tuple[int, int]] = set(corrupt_entries)

    def mark_corrupt(self, *, ledger_id: int, entry_id: int) -> None:
        self.corrupt_entries.add((ledger_id, entry_id))

    def has_ledger(self, ledger_id: int) -> bool:
        return ledger_id in self._ledgers

    def set_master_key(self, ledger_id: int, master_key: bytes) -> None:
        if ledger_id not in self._ledgers:
            self._ledgers[ledger_id] = _LedgerState(master_key)

    def master_key(self, ledger_id: int) -> bytes | None:
        state = self._ledgers.get(ledger_id)
        return None if state is None else state.master_key

    def set_fenced(self, ledger_id: int) -> None:
        state = self._ledgers.get(ledger_id)
        if state is not None:
            state.is_fenced = True

    def is_fenced(self, ledger_id: int) -> bool:
        state = self._ledgers.get(ledger_id)
        return state is not None and state.is_fenced

    def add_entry(self, ledger_id: int, entry_id: int, body: bytes) -> None:
        state = self._ledgers.get(ledger_id)
        if state is not None:
            state.entries[entry_id] = body

    def add_entries(self, ledger_id: int, first_entry_id: int, bodies) -> None:
        for offset, body in enumerate(bodies):
            self.add_entry(ledger_id, first_entry_id + offset, body)

    def get_entry(self, ledger_id: int, entry_id: int) -> bytes | None:
        state = self._ledgers.get(ledger_id)
        if state is None:
            return None
        body = state.entries.get(entry_id)
        if body is not None and (ledger_id, entry_id) in self.corrupt_entries:
            raise StorageIOError(f"ledger {ledger_id} entry {entry_id}: checksum mismatch in storage")
        return body

    def get_entries(self, ledger_id: int, first_entry_id: int, count_max: int, size_max: int) -> list[bytes]:
        return entries_one_at_a_time(self, ledger_id, first_entry_id, count_max, size_max)

    def last_entry_id(self, ledger_id: int) -> int:
        state = self._ledgers.get(ledger_id)
        if state is None or not state.entries:
            return INVALID_ENTRY_ID
        return state.entries.peekitem(-1)[0]

    def set_explicit_lac(self, ledger_id: int, lac: int, body: bytes) -> None:
        state = self._ledgers.get(ledger_id)
        if state is not None and (state.explicit_lac is None or lac > state.explicit_lac[0]):
            state.explicit_lac = (lac, body)

    def explicit_lac(self, ledger_id: int) -> tuple[int, bytes] | None:
        state = self._ledgers.get(ledger_id)
        return None if state is None else state.explicit_lac

    def delete_ledger(self, ledger_id: int) -> None:
        self._ledgers.pop(ledger_id, None)

    def ledger_ids(self) -> list[int]:
        return sorted(self._ledgers)
