"""An operator's actions on the cluster that both `bk shell` and a bookie's HTTP admin API run:
checking that a bookie takes and returns entries (bookiesanity, /api/v1/bookie/sanity),
recovering a lost bookie's ledgers onto others (recover, /api/v1/autorecovery/bookie) and
decommissioning a stopped one (decommission, /api/v1/autorecovery/decommission).

Each works on a client of the cluster (`bk`: bkclient's BookKeeper or bkcore.client.handles'
BookKeeperClient on a driver), and says what it refuses with a RecoveryRefused whose message
names the bookie and what to do; callers word their own hints around it.
"""

from __future__ import annotations

from typing import Callable

from bkcore.metaops import Delete, Get, MetaCode
from bktransports.autorecovery import RecoveryReport, recover_bookie

SANITY_PASSWORD = b"bookiesanity"


class RecoveryRefused(Exception):
    """A recovery or decommission that must not start; the message says why."""


class NotOfCluster(RecoveryRefused):
    """The address never joined this cluster (it has no cookie)."""


class StillRegistered(RecoveryRefused):
    """The bookie is registered (running): it cannot be decommissioned."""


async def check_cluster_bookie(bk, bookie: str) -> None:
    """Refuse an address that never joined this cluster (every bookie that did has a cookie),
    rather than "recovering" nothing from it."""
    path = bk.layout.cookie_path(bookie)
    result = await bk.store.execute(Get(path))
    if result.code is MetaCode.NO_NODE:
        raise NotOfCluster(f"{bookie} is not a bookie of this cluster (no cookie at {path})")
    if result.code is not MetaCode.OK:
        raise ConnectionError(f"reading {path} failed: {result.code.name}")


async def check_decommissionable(bk, bookie: str) -> None:
    """A bookie of this cluster that is not registered (it has stopped)."""
    await check_cluster_bookie(bk, bookie)
    if bookie in await bk.list_bookies() or bookie in await bk.list_bookies(readonly=True):
        raise StillRegistered(f"{bookie} is still registered: stop it before decommissioning it")


async def delete_cookie(bk, bookie: str) -> None:
    """Forget the bookie: with its cookie gone, a bookie may join afresh under that address."""
    result = await bk.store.execute(Delete(bk.layout.cookie_path(bookie)))
    if result.code not in (MetaCode.OK, MetaCode.NO_NODE):
        raise ConnectionError(f"deleting {bk.layout.cookie_path(bookie)} failed: {result.code.name}")


async def recover(bk, bookie: str, *, delete_cookie_after: bool = False, dry_run: bool = False,
                  ledger_ids: list[int] | None = None, skip_open: bool = False,
                  targets: set[str] | None = None,
                  progress: Callable[[int, int], None] = lambda done, total: None) -> RecoveryReport:
    """Copy every fragment of `bookie` onto other writable bookies (of `targets` only, when
    given); then, with delete_cookie_after, and only if every copy succeeded, delete its cookie.
    The report's failures say what could not be copied."""
    report = await recover_bookie(bk, bookie, dry_run=dry_run, ledger_ids=ledger_ids, skip_open=skip_open,
                                  targets=targets, progress=progress)
    if delete_cookie_after and not dry_run and not report.failures:
        await delete_cookie(bk, bookie)
        report.cookie_deleted = True
    return report


async def decommission(bk, bookie: str, *, delete_cookie_after: bool = True,
                       progress: Callable[[int, int], None] = lambda done, total: None) -> RecoveryReport:
    """A stopped bookie's fragments copied elsewhere, then (delete_cookie_after, if every copy
    succeeded) its cookie deleted. Call check_decommissionable first."""
    return await recover(bk, bookie, delete_cookie_after=delete_cookie_after, progress=progress)


async def bookie_sanity(bk, bookie: str, *, entry_count: int) -> bool:
    """Whether `bookie`, alone in an ensemble of one, takes entry_count entries and returns them
    as they were; the ledger is deleted after."""
    payloads = [b"sanity %d" % index for index in range(entry_count)]
    ledger = await bk.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, bookies=[bookie],
                                    password=SANITY_PASSWORD)
    try:
        await ledger.add_many(payloads)
        await ledger.close()
        reader = await bk.open_ledger(ledger.ledger_id, password=SANITY_PASSWORD, recovery=False)
        return await reader.read(0, entry_count - 1) == payloads
    finally:
        await bk.delete_ledger(ledger.ledger_id)
