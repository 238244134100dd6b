"""Checker: the ledger invariants, judged from a History alone.

1. lost-ack       no acknowledged entry is lost: a closed ledger's last entry id is >= every
                  acknowledged entry id (this also covers a fenced writer acked past recovery),
                  and no read of an acknowledged or closed-in entry says "no such entry"
                  (unless someone asked to delete the ledger);
2. changed        a read of an acknowledged entry returns exactly the acknowledged bytes;
3. phantom        every entry read was written by some add at that position with those bytes;
4. divergent      all reads of one entry agree on its bytes;
5. lac-backwards  the LAC one process observes for a ledger never goes down;
6. close-changed  every observation of a closed ledger agrees on its last entry id and length;
7. read-past-close an entry some reader saw lies within the closed range (if it was seen, every
                  later reader must see it);
8. replica-divergent  at the end, every bookie copy of an entry in a closed ledger is identical;
9. under-replicated   ...and at least Qa bookies of its write set hold it (acknowledged means
                  durable on Qa bookies, and recovery rewrites what it keeps to Qa bookies).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from bksim.history import History


@dataclass(frozen=True, slots=True)
class Violation:
    rule: str
    ledger_id: int
    detail: str

    def __str__(self) -> str:
        return f"{self.rule}: ledger {self.ledger_id}: {self.detail}"


def check(history: History) -> list[Violation]:
    found: list[Violation] = []
    written: dict[tuple[int, int], set[bytes]] = defaultdict(set)
    acked: dict[tuple[int, int], bytes] = {}
    for add in history.adds:
        written[add.ledger_id, add.entry_id].add(add.payload)
        if add.outcome == "ok":
            previous = acked.get((add.ledger_id, add.entry_id))
            if previous is not None and previous != add.payload:
                found.append(Violation("changed", add.ledger_id, f"entry {add.entry_id} acknowledged twice with different bytes"))
            acked[add.ledger_id, add.entry_id] = add.payload

    closed: dict[int, tuple[int, int]] = {}
    for close in sorted(history.closes, key=lambda c: c.at_ns):
        seen = closed.setdefault(close.ledger_id, (close.last_entry_id, close.length))
        if seen != (close.last_entry_id, close.length):
            found.append(Violation("close-changed", close.ledger_id,
                                   f"closed at {seen} and later seen closed at {(close.last_entry_id, close.length)}"))

    for (ledger_id, entry_id) in sorted(acked):
        if ledger_id in closed and entry_id > closed[ledger_id][0]:
            found.append(Violation("lost-ack", ledger_id, f"entry {entry_id} was acknowledged but the ledger "
                                                          f"closed at {closed[ledger_id][0]}"))

    first_read: dict[tuple[int, int], bytes] = {}
    for read in history.reads:
        key = (read.ledger_id, read.entry_id)
        if read.payload is None:
            if read.ledger_id in history.deletions:
                continue   # deleted: garbage collection may have taken its entries
            if key in acked:
                found.append(Violation("lost-ack", read.ledger_id, f"acknowledged entry {read.entry_id} read as missing "
                                                                    f"by {read.process}"))
            elif read.ledger_id in closed and read.entry_id <= closed[read.ledger_id][0]:
                found.append(Violation("lost-ack", read.ledger_id, f"entry {read.entry_id} within the closed range "
                                                                    f"read as missing by {read.process}"))
            continue
        if read.payload not in written.get(key, ()):
            found.append(Violation("phantom", read.ledger_id, f"entry {read.entry_id} read by {read.process} was never written"))
        if key in acked and acked[key] != read.payload:
            found.append(Violation("changed", read.ledger_id, f"entry {read.entry_id} read by {read.process} differs from "
                                                              f"the acknowledged bytes"))
        previous = first_read.setdefault(key, read.payload)
        if previous != read.payload:
            found.append(Violation("divergent", read.ledger_id, f"entry {read.entry_id} read with two different contents"))
        if read.ledger_id in closed and read.entry_id > closed[read.ledger_id][0]:
            found.append(Violation("read-past-close", read.ledger_id, f"entry {read.entry_id} was read by {read.process} "
                                                                      f"but the ledger closed at {closed[read.ledger_id][0]}"))

    for replica in history.replicas:
        held = [(bookie, body) for bookie, body in replica.copies if body is not None]
        if len({body for _, body in held}) > 1:
            found.append(Violation("replica-divergent", replica.ledger_id,
                                   f"entry {replica.entry_id} differs between {[b for b, _ in held]}"))
        if len(held) < replica.ack_quorum_size:
            found.append(Violation("under-replicated", replica.ledger_id,
                                   f"entry {replica.entry_id} held by {len(held)} of {replica.copies and [b for b, _ in replica.copies]}, "
                                   f"ack quorum {replica.ack_quorum_size}"))

    highest_lac: dict[tuple[str, int], int] = {}
    for record in history.lacs:
        key = (record.process, record.ledger_id)
        if record.lac < highest_lac.get(key, -1):
            found.append(Violation("lac-backwards", record.ledger_id, f"{record.process} saw LAC {record.lac} "
                                                                       f"after {highest_lac[key]}"))
        highest_lac[key] = max(record.lac, highest_lac.get(key, -1))
    return found
