"""The INSTANCEID node: which life of a cluster this is, BookKeeper's <root>/INSTANCEID.

A random UUID, written as text when the cluster is made: by the first client or bookie to reach
a new cluster (beside its LAYOUT node, layout_node.resolve_layout), or by `bk shell
initnewcluster` where it is missing. `bk shell metaformat` writes a new one, since a formatted
cluster starts a new life; `bk shell nukeexistingcluster -i ID` deletes only the cluster whose
id it is given; `bk shell whatisinstanceid` prints it.

BookKeeper also stamps it into every bookie's cookie; cookies here carry an instance id of
their own bookie instead (bkcore.bookie.cookie), so this id identifies the cluster only.
"""

from __future__ import annotations

import uuid

from bkcore.ledger.layout import LedgerLayout
from bkcore.metaops import Create, Delete, Get, MetaCode
from bkmetastore.api import MetadataStore


async def read_instance_id(store: MetadataStore, layout: LedgerLayout) -> str | None:
    """The cluster's instance id; None where none is recorded."""
    result = await store.execute(Get(layout.instance_id_path))
    if result.code is MetaCode.NO_NODE:
        return None
    if result.code is not MetaCode.OK:
        raise ConnectionError(f"cannot read {layout.instance_id_path}: the metastore answered {result.code.name}")
    return result.data.decode("utf-8", "replace").strip()


async def ensure_instance_id(store: MetadataStore, layout: LedgerLayout) -> tuple[str, bool]:
    """The cluster's instance id, recorded now if it had none: (id, whether it was made now)."""
    made = str(uuid.uuid4())
    result = await store.execute(Create(layout.instance_id_path, made.encode()))
    if result.code is MetaCode.OK:
        return made, True
    recorded = await read_instance_id(store, layout)
    if recorded is None:
        raise ConnectionError(f"cannot record {layout.instance_id_path}: the metastore answered {result.code.name}")
    return recorded, False


async def renew_instance_id(store: MetadataStore, layout: LedgerLayout) -> str:
    """A new instance id in place of the old one (a formatted cluster is a new instance)."""
    await store.execute(Delete(layout.instance_id_path))
    instance_id, _ = await ensure_instance_id(store, layout)
    return instance_id
