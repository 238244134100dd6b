"""Walking the ledger layout in the metastore from async code.

bkcore.bookie.gc's metadata_ledger_ids() is a plain generator over a blocking
list_children(path) function; here it runs in a worker thread whose list_children calls back
into the trio loop for each listing, so one walk serves GC, `bk shell listledgers` and the
library alike without loading the whole layout at once.
"""

from __future__ import annotations

import trio

from bkcore.bookie.gc import ListChildren, MetadataRootMissing, metadata_ledger_ids
from bkcore.ledger.layout import LedgerLayout
from bkcore.metaops import Children, MetaCode
from bkmetastore.api import MetadataStore


def blocking_children_lister(store: MetadataStore) -> ListChildren:
    """A list_children(path) for worker threads: None for a missing path, raises
    ConnectionError when the store cannot answer (so a walk never mistakes it for empty)."""
    token = trio.lowlevel.current_trio_token()

    def list_children(path: str) -> list[str] | None:
        result = trio.from_thread.run(store.execute, Children(path), trio_token=token)
        if result.code is MetaCode.NO_NODE:
            return None
        if result.code is not MetaCode.OK:
            raise ConnectionError(f"listing {path} failed: {result.code.name}")
        return list(result.children)

    return list_children


async def ledger_ids_in_metadata(store: MetadataStore, layout: LedgerLayout) -> list[int]:
    """Every ledger id with metadata, ascending ([] when the root does not exist yet)."""
    list_children = blocking_children_lister(store)

    def walk() -> list[int]:
        try:
            return [ledger_id for partition in metadata_ledger_ids(layout, list_children) for ledger_id in partition]
        except MetadataRootMissing:
            return []

    return await trio.to_thread.run_sync(walk)
