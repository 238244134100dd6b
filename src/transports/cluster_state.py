"""What the metastore says about the cluster as a whole, for the tools that show it (the HTTP
admin endpoint's cluster_info and list_under_replicated_ledger, `bk shell clusterinfo` and
`listunderreplicated`): one reading, the same answer in each.

    await cluster_info(store, layout)            BookKeeper's cluster_info fields
    chosen_underreplicated(marks, missing=B, excluding=B)   the marks to show
"""

from __future__ import annotations

from bkcore.metaops import Children, Get, MetaCode
from bktransports.autorecovery import is_replication_enabled, list_underreplicated


async def children(store, path: str) -> list[str]:
    """The sorted children of `path` ([] when it does not exist); ConnectionError when the
    metastore cannot say."""
    result = await store.execute(Children(path))
    if result.code is MetaCode.NO_NODE:
        return []
    if result.code is not MetaCode.OK:
        raise ConnectionError(f"the metastore cannot list {path}: {result.code.name}")
    return sorted(result.children)


async def registered_bookies(store, layout) -> tuple[list[str], list[str]]:
    """(writable, readonly) bookie ids, as registered now."""
    writable = [name for name in await children(store, layout.available_path) if name != "readonly"]
    return writable, await children(store, layout.readonly_path)


async def auditor(store, layout) -> str | None:
    """The elected auditor's name (its bookie's id for a bookie's autorecovery), or None."""
    result = await store.execute(Get(layout.auditor_path))
    if result.code is MetaCode.NO_NODE:
        return None
    if result.code is not MetaCode.OK:
        raise ConnectionError(f"the metastore cannot read {layout.auditor_path}: {result.code.name}")
    return result.data.decode("utf-8", "replace")


async def cluster_info(store, layout) -> dict:
    """BookKeeper's cluster_info: every bookie with a cookie counts; the unavailable ones have a
    cookie and no registration."""
    writable, readonly = await registered_bookies(store, layout)
    known = set(await children(store, layout.cookies_path)) | set(writable) | set(readonly)
    marks = [name for name in await children(store, layout.underreplicated_path) if name.startswith("urL")]
    elected = await auditor(store, layout)
    return {"auditorElected": elected is not None, "auditorId": elected or "",
            "clusterUnderReplicated": bool(marks),
            "ledgerReplicationEnabled": await is_replication_enabled(store, layout),
            "totalBookiesCount": len(known), "writableBookiesCount": len(writable),
            "readonlyBookiesCount": len(readonly), "unavailableBookiesCount": len(known - set(writable) - set(readonly))}


async def chosen_underreplicated(store, layout, *, missing: str | None = None,
                                 excluding: str | None = None) -> dict[int, list[str]]:
    """The ledgers marked under-replicated whose lost bookies include `missing` and not
    `excluding` (each when given), with those lost bookies, by ledger id."""
    marks = await list_underreplicated(store, layout)
    return {ledger_id: lost for ledger_id, lost in sorted(marks.items())
            if (missing is None or missing in lost) and (excluding is None or excluding not in lost)}
