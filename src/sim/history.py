"""History: what the workload saw, recorded from outside the system.

The workload records every operation it started and how it ended: ok, failed (the outcome of a
failed add is unknown: the entry may or may not exist), and every observation (entries read,
LACs learnt, closed metadata seen). The checker (checker.py) judges only this record.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bkcore.wire import store_fields_directly


@dataclass(slots=True)
class AddRecord:
    process: str
    ledger_id: int
    entry_id: int
    payload: bytes
    invoked_at_ns: int
    outcome: str = "pending"       # pending | ok | unknown
    completed_at_ns: int = -1


@store_fields_directly
@dataclass(frozen=True, slots=True)
class ReadRecord:
    process: str
    ledger_id: int
    entry_id: int
    payload: bytes | None          # None: the read said "no such entry"
    at_ns: int


@store_fields_directly
@dataclass(frozen=True, slots=True)
class LacRecord:
    process: str
    ledger_id: int
    lac: int
    at_ns: int


@store_fields_directly
@dataclass(frozen=True, slots=True)
class CloseRecord:
    process: str
    ledger_id: int
    last_entry_id: int
    length: int
    at_ns: int


@store_fields_directly
@dataclass(frozen=True, slots=True)
class ReplicaRecord:
    """What the bookies of one entry's write set hold at the end (None: that bookie has no copy)."""

    ledger_id: int
    entry_id: int
    ack_quorum_size: int
    copies: tuple[tuple[str, bytes | None], ...]


@dataclass(slots=True)
class History:
    adds: list[AddRecord] = field(default_factory=list)
    reads: list[ReadRecord] = field(default_factory=list)
    lacs: list[LacRecord] = field(default_factory=list)
    closes: list[CloseRecord] = field(default_factory=list)
    replicas: list[ReplicaRecord] = field(default_factory=list)
    # Ledgers someone asked to delete: their entries may vanish at any later time (GC).
    deletions: set[int] = field(default_factory=set)
    # Adds whose outcome is still "pending" (the run asks after every step while it settles).
    # Invariant: kept in step by add_invoked, add_ok and add_unknown, the only writers of outcomes.
    pending_add_count: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.pending_add_count = sum(1 for a in self.adds if a.outcome == "pending")

    def add_invoked(self, *, process: str, ledger_id: int, entry_id: int, payload: bytes, now_ns: int) -> int:
        self.adds.append(AddRecord(process, ledger_id, entry_id, payload, now_ns))
        self.pending_add_count += 1
        return len(self.adds) - 1

    def add_ok(self, index: int, *, now_ns: int) -> None:
        record = self.adds[index]
        if record.outcome == "pending":
            self.pending_add_count -= 1
        record.outcome, record.completed_at_ns = "ok", now_ns

    def add_unknown(self, index: int, *, now_ns: int) -> None:
        record = self.adds[index]
        if record.outcome == "pending":
            self.pending_add_count -= 1
        record.outcome, record.completed_at_ns = "unknown", now_ns

    def read_ok(self, *, process: str, ledger_id: int, entry_id: int, payload: bytes, now_ns: int) -> None:
        self.reads.append(ReadRecord(process, ledger_id, entry_id, payload, now_ns))

    def read_missing(self, *, process: str, ledger_id: int, entry_id: int, now_ns: int) -> None:
        self.reads.append(ReadRecord(process, ledger_id, entry_id, None, now_ns))

    def lac_seen(self, *, process: str, ledger_id: int, lac: int, now_ns: int) -> None:
        self.lacs.append(LacRecord(process, ledger_id, lac, now_ns))

    def closed_seen(self, *, process: str, ledger_id: int, last_entry_id: int, length: int, now_ns: int) -> None:
        self.closes.append(CloseRecord(process, ledger_id, last_entry_id, length, now_ns))

    def delete_invoked(self, *, ledger_id: int) -> None:
        self.deletions.add(ledger_id)

    def replicas_seen(self, *, ledger_id: int, entry_id: int, ack_quorum_size: int,
                      copies: tuple[tuple[str, bytes | None], ...]) -> None:
        self.replicas.append(ReplicaRecord(ledger_id, entry_id, ack_quorum_size, copies))

    def acked_count(self) -> int:
        return sum(1 for a in self.adds if a.outcome == "ok")
