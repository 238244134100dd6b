"""Garbage collection of deleted ledgers (BookKeeper's GarbageCollectorThread, ledger part).

A bookie keeps entries of a ledger only while its metadata exists. One GC round:
1. snapshot the ledgers this bookie holds (bkActiveLedgers) — before listing metadata, so a
   ledger created during the round is never mistaken for a deleted one;
2. list the ledgers that exist in metadata (zkActiveLedgers), walking the layout: the flat
   layout is one listing; the hierarchical one goes partition by partition (2/4/4 digits), so
   no listing holds every ledger id at once;
3. delete from storage every snapshotted ledger that metadata does not have.
Storage deletions become durable at the next checkpoint; entries the journal replays for a
deleted ledger after a crash are simply collected again.

The metastore is reached through a `list_children(path) -> list[str] | None` function (None:
the path does not exist; it must raise, not return None, when the store cannot be reached), so
the same walk runs against the simulator's store and real ones. A missing root deletes nothing:
a bookie pointed at the wrong metadata root must not collect every ledger it holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

from bkcore.ledger.layout import LedgerLayout

ListChildren = Callable[[str], "list[str] | None"]


class MetadataRootMissing(Exception):
    pass


def _ledger_id_from_name(name: str) -> int | None:
    if not name.startswith("L"):
        return None
    try:
        return int(name[1:])
    except ValueError:
        return None


def metadata_ledger_ids(layout: LedgerLayout, list_children: ListChildren) -> Iterator[list[int]]:
    """Ledger ids that exist in metadata, one partition (one listing) at a time, ascending."""
    root_children = list_children(layout.root)
    if root_children is None:
        raise MetadataRootMissing(f"metadata root {layout.root} does not exist; not collecting anything")
    if not layout.is_hierarchical:
        yield sorted(i for i in map(_ledger_id_from_name, root_children) if i is not None)
        return
    for top in sorted(n for n in root_children if len(n) == 2 and n.isdigit()):
        for middle in sorted(n for n in (list_children(f"{layout.root}/{top}") or []) if len(n) == 4 and n.isdigit()):
            leaves = list_children(f"{layout.root}/{top}/{middle}") or []
            ids = []
            for leaf in leaves:
                if leaf.startswith("L") and len(leaf) == 5 and leaf[1:].isdigit():
                    ids.append(int(top + middle + leaf[1:]))
            yield sorted(ids)


@dataclass(frozen=True, slots=True)
class GcReport:
    bookie_ledger_count: int
    metadata_ledger_count: int
    deleted_ledger_ids: tuple[int, ...]


def find_garbage(held_ledger_ids, layout: LedgerLayout, list_children: ListChildren) -> GcReport:
    """Steps 1 and 2: which of `held_ledger_ids` (the snapshot, taken first) metadata lacks.
    Touches no storage, so a real bookie can walk the metastore away from its event loop."""
    held = set(held_ledger_ids)
    held_count = len(held)
    existing_count = 0
    try:
        for partition in metadata_ledger_ids(layout, list_children):
            existing_count += len(partition)
            held.difference_update(partition)
    except MetadataRootMissing:
        return GcReport(held_count, 0, ())
    return GcReport(held_count, existing_count, tuple(sorted(held)))


def collect_garbage(storage, layout: LedgerLayout, list_children: ListChildren) -> GcReport:
    """One GC round over `storage` (a LedgerStorage). Returns what it deleted."""
    report = find_garbage(storage.ledger_ids(), layout, list_children)
    for ledger_id in report.deleted_ledger_ids:      # 3. what metadata no longer has
        storage.delete_ledger(ledger_id)
    return report
