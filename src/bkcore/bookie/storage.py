"""Ledger storage: where a bookie keeps entries and per-ledger state once they are journaled.

The Bookie only talks to the `LedgerStorage` protocol. `MemoryLedgerStorage` is the in-memory
implementation (the simulator rebuilds it from the journal after a crash); the entry-log + lmdb
implementation comes with issue 3. A record that cannot be read raises StorageIOError, which the
bookie answers with IO_ERROR, never "no such entry".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

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
    def get_entry(self, ledger_id: int, entry_id: int) -> bytes | None: ...
    def last_entry_id(self, ledger_id: int) -> int: ...
    def set_explicit_lac(self, ledger_id: int, lac: int, body: bytes) -> None: ...
    def explicit_lac(self, ledger_id: int) -> tuple[int, bytes] | None: ...
    def delete_ledger(self, ledger_id: int) -> None: ...
    def ledger_ids(self) -> list[int]: ...


@dataclass(slots=True)
class _LedgerState:
    master_key: bytes
    is_fenced: bool = False
    entries: SortedDict = field(default_factory=SortedDict)
    explicit_lac: tuple[int, bytes] | None = None


class MemoryLedgerStorage:
    def __init__(self) -> None:
        self._ledgers: dict[int, _LedgerState] = {}
        # Entries a test marked unreadable: (ledger, entry).
        self.corrupt_entries: set[tuple[int, int]] = set()

    def _state(self, ledger_id: int) -> _LedgerState:
        """State of a ledger; a deleted one gets a throwaway state, so records in flight for it
        are dropped (see DurableLedgerStorage._change)."""
        state = self._ledgers.get(ledger_id)
        return state if state is not None else _LedgerState(b"")

    def has_ledger(self, ledger_id: int) -> bool:
        return ledger_id in self._ledgers

    def set_master_key(self, ledger_id: int, master_key: bytes) -> None:
        state = self._ledgers.get(ledger_id)
        if state is None:
            self._ledgers[ledger_id] = _LedgerState(master_key)

    def master_key(self, ledger_id: int) -> bytes | None:
        state = self._ledgers.get(ledger_id)
        return None if state is None else state.master_key

    def set_fenced(self, ledger_id: int) -> None:
        self._state(ledger_id).is_fenced = True

    def is_fenced(self, ledger_id: int) -> bool:
        state = self._ledgers.get(ledger_id)
        return state is not None and state.is_fenced

    def add_entry(self, ledger_id: int, entry_id: int, body: bytes) -> None:
        self._state(ledger_id).entries[entry_id] = body

    def get_entry(self, ledger_id: int, entry_id: int) -> bytes | None:
        state = self._ledgers.get(ledger_id)
        if state is None:
            return None
        body = state.entries.get(entry_id)
        if body is not None and (ledger_id, entry_id) in self.corrupt_entries:
            raise StorageIOError(f"ledger {ledger_id} entry {entry_id}: checksum mismatch in storage")
        return body

    def last_entry_id(self, ledger_id: int) -> int:
        state = self._ledgers.get(ledger_id)
        if state is None or not state.entries:
            return INVALID_ENTRY_ID
        return state.entries.keys()[-1]

    def set_explicit_lac(self, ledger_id: int, lac: int, body: bytes) -> None:
        state = self._state(ledger_id)
        if state.explicit_lac is None or lac > state.explicit_lac[0]:
            state.explicit_lac = (lac, body)

    def explicit_lac(self, ledger_id: int) -> tuple[int, bytes] | None:
        state = self._ledgers.get(ledger_id)
        return None if state is None else state.explicit_lac

    def delete_ledger(self, ledger_id: int) -> None:
        self._ledgers.pop(ledger_id, None)

    def ledger_ids(self) -> list[int]:
        return sorted(self._ledgers)
