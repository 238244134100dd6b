"""Autorecovery: the auditor that notices lost bookies and the workers that re-replicate.

Auditor (one per cluster, elected by an ephemeral node at <root>/underreplication/auditor):
every audit round — on any change of the bookie registrations and every audit_interval_s —
it lists the live bookies (writable and readonly), remembers since when each bookie named by a
ledger has been missing, and once one has been missing for lost_bookie_recovery_delay_s
(BookKeeper's lostBookieRecoveryDelay) it marks every ledger with final fragments on it as
under-replicated: <root>/underreplication/ledgers/urL<id>, whose data lists the lost bookies.

Workers (any number): take a marked ledger's lock (an ephemeral node), copy each fragment on
a lost bookie to a live writable bookie outside that ensemble (bkcore.client.rereplication),
and remove the mark once nothing is left on lost bookies. A worker that dies drops its lock
with its session; another worker takes the ledger over.

Cluster-wide controls in the metastore, BookKeeper's: <root>/underreplication/disable switches
replication off (workers copy nothing, audits mark nothing); .../lostBookieRecoveryDelay holds
the cluster's delay, which wins over each daemon's own; rewriting .../auditRequest asks the
auditor for an audit now, marking what is missing at once (`bk shell autorecovery`,
`lostbookierecoverydelay`, `triggeraudit`).

recover_bookie() is the same copy for one bookie over every ledger, for an operator's recovery
(bktransports.admin_ops: `bk shell recover`, the HTTP admin's /api/v1/autorecovery/bookie).
A daemon given a registry publishes its numbers there (bktransports.autorecovery_metrics).
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field
from typing import Callable

import trio

from bkcore.client.rereplication import fragments_on
from bkcore.errors import BKException, NoSuchLedger
from bkcore.metaops import Children, Create, Delete, Get, MetaCode, SetData
from bktransports.autorecovery_metrics import STANDALONE_SCOPE, autorecovery_families
from bktransports.metadata_walk import ledger_ids_in_metadata
from bktransports.metrics import OpStats, publish

log = logging.getLogger("bk.autorecovery")


@dataclass
class RecoveryReport:
    ledgers_checked: int = 0
    fragments_copied: int = 0
    entries_copied: int = 0
    failures: list[str] = field(default_factory=list)
    ledgers_on_lost: list[int] = field(default_factory=list)     # those with a fragment on a lost bookie
    ledgers_skipped: list[int] = field(default_factory=list)     # open ones, when asked to skip them
    cookie_deleted: bool = False                                  # (bktransports.admin_ops.recover)


async def live_bookies(bk) -> tuple[set[str], set[str]]:
    """(writable, all live) bookie ids: readonly bookies are alive but take no new copies."""
    writable = set(await bk.list_bookies())
    return writable, writable | set(await bk.list_bookies(readonly=True))


async def replicate_ledger(bk, ledger_id: int, lost: set[str], *, dry_run: bool = False,
                           report: RecoveryReport | None = None, targets: set[str] | None = None) -> bool:
    """Copy every final fragment of the ledger that lies on a `lost` bookie, each to a writable
    bookie outside its ensemble (one of `targets`, when given). True when none is left (or,
    with dry_run, when there was none)."""
    report = report if report is not None else RecoveryReport()
    try:
        metadata = await bk.ledger_metadata(ledger_id)
    except NoSuchLedger:
        return True                                   # deleted meanwhile: nothing to protect
    report.ledgers_checked += 1
    writable, _ = await live_bookies(bk)
    for bookie in sorted(lost):
        fragments = fragments_on(metadata, bookie)
        if fragments and ledger_id not in report.ledgers_on_lost:
            report.ledgers_on_lost.append(ledger_id)
        for fragment in fragments:
            if dry_run:
                report.fragments_copied += 1
                continue
            ensemble = dict(metadata.ensembles)[fragment.ensemble_start]
            candidates = sorted((writable if targets is None else writable & targets) - set(ensemble) - lost)
            if not candidates:
                among = "" if targets is None else f" among {sorted(targets)}"
                report.failures.append(f"ledger {ledger_id}: no writable bookie{among} outside {list(ensemble)}")
                return False
            target = random.choice(candidates)
            try:
                metadata = await bk.replicate_fragment(metadata, fragment, target)
            except BKException as exc:
                report.failures.append(f"ledger {ledger_id} entries {fragment.first_entry_id}.."
                                       f"{fragment.last_entry_id} from {bookie}: {type(exc).__name__}: {exc}")
                return False
            report.fragments_copied += 1
            report.entries_copied += len(fragment.entry_ids(metadata))
            log.info("ledger %d: entries %d..%d of %s copied to %s", ledger_id, fragment.first_entry_id,
                     fragment.last_entry_id, bookie, target)
    return not dry_run or report.fragments_copied == 0


async def recover_bookie(bk, bookie: str, *, dry_run: bool = False, ledger_ids: list[int] | None = None,
                         skip_open: bool = False, targets: set[str] | None = None,
                         progress: Callable[[int, int], None] = lambda done, total: None) -> RecoveryReport:
    """Re-replicate every ledger fragment on `bookie` (which should be down for good): of every
    ledger, or of `ledger_ids`; skip_open leaves ledgers still open (being written) alone;
    targets: copy only to these bookies."""
    report = RecoveryReport()
    ledger_ids = await ledger_ids_in_metadata(bk.store, bk.layout) if ledger_ids is None else ledger_ids
    for index, ledger_id in enumerate(ledger_ids):
        if skip_open and await _is_open(bk, ledger_id):
            report.ledgers_skipped.append(ledger_id)
        else:
            await replicate_ledger(bk, ledger_id, {bookie}, dry_run=dry_run, report=report, targets=targets)
        progress(index + 1, len(ledger_ids))
    return report


async def _is_open(bk, ledger_id: int) -> bool:
    try:
        return (await bk.ledger_metadata(ledger_id)).state.name == "OPEN"
    except NoSuchLedger:
        return False


async def list_underreplicated(store, layout) -> dict[int, list[str]]:
    """Marked ledgers and the lost bookies each mark names (a metastore session and its layout:
    a client's bk.store and bk.layout, or a bookie's)."""
    result = await store.execute(Children(layout.underreplicated_path))
    marks = {}
    for name in result.children if result.code is MetaCode.OK else ():
        if name.startswith("urL") and name[3:].isdigit():
            ledger_id = int(name[3:])
            data = await store.execute(Get(layout.underreplicated_ledger_path(ledger_id)))
            if data.code is MetaCode.OK:
                marks[ledger_id] = sorted(filter(None, data.data.decode().split("\n")))
    return marks


# -- cluster-wide controls ----------------------------------------------------------------

async def is_replication_enabled(store, layout) -> bool:
    result = await store.execute(Get(layout.replication_disabled_path))
    if result.code not in (MetaCode.OK, MetaCode.NO_NODE):
        raise ConnectionError(f"reading {layout.replication_disabled_path} failed: {result.code.name}")
    return result.code is MetaCode.NO_NODE


async def set_replication_enabled(store, layout, enabled: bool) -> None:
    path = layout.replication_disabled_path
    result = await store.execute(Delete(path) if enabled else Create(path, b""))
    if result.code not in (MetaCode.OK, MetaCode.NO_NODE, MetaCode.NODE_EXISTS):
        raise ConnectionError(f"{'deleting' if enabled else 'creating'} {path} failed: {result.code.name}")


async def cluster_recovery_delay(store, layout) -> float | None:
    """The cluster's lostBookieRecoveryDelay in seconds; None when none is set (each daemon's
    own applies), or when what is stored is no number."""
    result = await store.execute(Get(layout.recovery_delay_path))
    if result.code is MetaCode.NO_NODE:
        return None
    if result.code is not MetaCode.OK:
        raise ConnectionError(f"reading {layout.recovery_delay_path} failed: {result.code.name}")
    try:
        return max(0.0, float(result.data.decode()))
    except ValueError:
        return None


async def set_cluster_recovery_delay(store, layout, seconds: float) -> None:
    await _write(store, layout.recovery_delay_path, f"{seconds:g}".encode())


async def request_audit(store, layout) -> None:
    """Ask the auditor (whichever daemon it is) for an audit now."""
    current = await store.execute(Get(layout.audit_request_path))
    count = int(current.data or b"0") + 1 if current.code is MetaCode.OK and current.data.isdigit() else 1
    await _write(store, layout.audit_request_path, str(count).encode())


async def _write(store, path: str, data: bytes) -> None:
    for _ in range(10):
        current = await store.execute(Get(path))
        if current.code is MetaCode.NO_NODE:
            result = await store.execute(Create(path, data))
        elif current.code is MetaCode.OK:
            result = await store.execute(SetData(path, data, current.version))
        else:
            result = current
        if result.code is MetaCode.OK:
            return
        if result.code not in (MetaCode.NODE_EXISTS, MetaCode.BAD_VERSION, MetaCode.NO_NODE):
            break
    raise ConnectionError(f"writing {path} failed: {result.code.name}")


async def _first_to_fire(watches, timeout_s: float):
    """Wait for the first of `watches` to fire (returned), or timeout_s (None)."""
    fired = []
    with trio.move_on_after(timeout_s):
        async with trio.open_nursery() as nursery:
            for watch in watches:
                async def wait(watch=watch) -> None:
                    await watch.wait()
                    fired.append(watch)
                    nursery.cancel_scope.cancel()
                nursery.start_soon(wait)
    return fired[0] if fired else None


class Autorecovery:
    def __init__(self, bk, *, lost_bookie_recovery_delay_s: float = 0.0,
                 audit_interval_s: float = 60.0, worker_interval_s: float = 1.0, name: str = "",
                 registry=None, metrics_scope: str = STANDALONE_SCOPE) -> None:
        """registry: a prometheus_client registry to publish its numbers in, under
        metrics_scope (bktransports.autorecovery_metrics); None: not published."""
        self.bk = bk
        self.layout = bk.layout
        self.store = bk.store
        self.delay_s = lost_bookie_recovery_delay_s
        self.audit_interval_s = audit_interval_s
        self.worker_interval_s = worker_interval_s
        self.name = name or f"autorecovery-{random.getrandbits(32):08x}"
        self.is_auditor = False
        self._missing_since: dict[str, float] = {}
        self._delay_in_force = lost_bookie_recovery_delay_s
        self.counts = {"audits": 0, "audits_skipped": 0, "ledgers_marked": 0, "ledgers_replicated": 0,
                       "replication_failures": 0, "ledgers_checked": 0, "election_attempts": 0,
                       "fragments_copied": 0, "entries_copied": 0}
        self.audit_stats = OpStats()            # audit rounds (BookKeeper's AUDIT_BOOKIES_TIME)
        self.rereplicate_stats = OpStats()      # work_on, success: the ledger fully replicated
        if registry is not None:
            publish(registry, lambda: autorecovery_families(self, metrics_scope))

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._auditor_loop)
            nursery.start_soon(self._worker_loop)

    # -- auditor ----------------------------------------------------------------------------

    async def _auditor_loop(self) -> None:
        while True:
            self.counts["election_attempts"] += 1
            created = await self.store.execute(Create(self.layout.auditor_path, self.name.encode(), is_ephemeral=True))
            if created.code is not MetaCode.OK:
                result, watch = await self.store.execute_watch(Get(self.layout.auditor_path))
                if result.code is MetaCode.OK:
                    await watch.wait()                 # someone else audits; wait for its end
                continue
            self.is_auditor = True
            log.info("%s is the auditor", self.name)
            try:
                await self._audit_forever()
            finally:
                self.is_auditor = False

    async def _audit_forever(self) -> None:
        delay_s = None
        while True:
            _, registrations = await self.store.execute_watch(Children(self.layout.available_path))
            _, requested = await self.store.execute_watch(Get(self.layout.audit_request_path))
            _, switched = await self.store.execute_watch(Get(self.layout.replication_disabled_path))
            _, delay_set = await self.store.execute_watch(Get(self.layout.recovery_delay_path))
            await self.audit(delay_s=delay_s)
            next_round_in = self.audit_interval_s
            if self._missing_since:                    # come back when a delay runs out
                next_round_in = min(next_round_in, max(0.05, self._delay_in_force / 2))
            fired = await _first_to_fire((registrations, requested, switched, delay_set), next_round_in)
            delay_s = 0.0 if fired is requested else None     # (an audit asked for marks at once)

    async def audit(self, *, delay_s: float | None = None) -> list[int]:
        """One audit round; returns the ledgers it marked. delay_s replaces the lost bookie
        recovery delay for this round (0: a triggered audit marks what is missing now); else
        the cluster's delay applies if one is set, else this daemon's. With replication
        switched off, nothing is marked."""
        if not await is_replication_enabled(self.store, self.layout):
            self.counts["audits_skipped"] += 1
            return []
        if delay_s is None:
            cluster_delay = await cluster_recovery_delay(self.store, self.layout)
            delay_s = self.delay_s if cluster_delay is None else cluster_delay
            self._delay_in_force = delay_s
        self.counts["audits"] += 1
        started = time.perf_counter()
        marked = await self._audit(delay_s)
        self.audit_stats.observe(time.perf_counter() - started)
        return marked

    async def _audit(self, delay_s: float) -> list[int]:
        _, alive = await live_bookies(self.bk)
        now = trio.current_time()
        ledger_ids = await self.bk.list_ledgers()
        lost_by_ledger: dict[int, set[str]] = {}
        named: set[str] = set()
        for ledger_id in ledger_ids:
            try:
                metadata = await self.bk.ledger_metadata(ledger_id)
            except NoSuchLedger:
                continue
            self.counts["ledgers_checked"] += 1
            for bookie in metadata.all_bookies():
                named.add(bookie)
                if bookie in alive:
                    continue
                since = self._missing_since.setdefault(bookie, now)
                if now - since >= delay_s and fragments_on(metadata, bookie):
                    lost_by_ledger.setdefault(ledger_id, set()).add(bookie)
        for bookie in list(self._missing_since):
            if bookie in alive or bookie not in named:
                del self._missing_since[bookie]
        for ledger_id, lost in sorted(lost_by_ledger.items()):
            await self._mark(ledger_id, lost)
        return sorted(lost_by_ledger)

    async def _mark(self, ledger_id: int, lost: set[str]) -> None:
        path = self.layout.underreplicated_ledger_path(ledger_id)
        for _ in range(10):
            current = await self.store.execute(Get(path))
            if current.code is MetaCode.NO_NODE:
                result = await self.store.execute(Create(path, "\n".join(sorted(lost)).encode()))
                if result.code is MetaCode.OK:
                    self.counts["ledgers_marked"] += 1
                    log.info("ledger %d is under-replicated: %s lost", ledger_id, sorted(lost))
                    return
                continue
            if current.code is not MetaCode.OK:
                return
            known = set(filter(None, current.data.decode().split("\n")))
            if lost <= known:
                return
            merged = "\n".join(sorted(known | lost)).encode()
            if (await self.store.execute(SetData(path, merged, current.version))).code is MetaCode.OK:
                return

    # -- workers ----------------------------------------------------------------------------

    async def _worker_loop(self) -> None:
        while True:
            result, watch = await self.store.execute_watch(Children(self.layout.underreplicated_path))
            _, switched = await self.store.execute_watch(Get(self.layout.replication_disabled_path))
            if await is_replication_enabled(self.store, self.layout):
                for name in sorted(result.children) if result.code is MetaCode.OK else ():
                    if name.startswith("urL") and name[3:].isdigit():
                        await self.work_on(int(name[3:]))
            await _first_to_fire((watch, switched), self.worker_interval_s)

    async def work_on(self, ledger_id: int) -> bool:
        """Lock, re-replicate and unmark one ledger; False if locked elsewhere or unfinished."""
        lock = self.layout.replication_lock_path(ledger_id)
        if (await self.store.execute(Create(lock, self.name.encode(), is_ephemeral=True))).code is not MetaCode.OK:
            return False
        started = time.perf_counter()
        is_done = False
        try:
            mark = await self.store.execute(Get(self.layout.underreplicated_ledger_path(ledger_id)))
            if mark.code is not MetaCode.OK:
                return False
            _, alive = await live_bookies(self.bk)
            lost = set(filter(None, mark.data.decode().split("\n"))) - alive   # back meanwhile: fine
            report = RecoveryReport()
            is_done = await replicate_ledger(self.bk, ledger_id, lost, report=report)
            self.counts["fragments_copied"] += report.fragments_copied
            self.counts["entries_copied"] += report.entries_copied
            if is_done:
                await self.store.execute(Delete(self.layout.underreplicated_ledger_path(ledger_id), mark.version))
                self.counts["ledgers_replicated"] += 1
                return True
            self.counts["replication_failures"] += 1
            log.warning("ledger %d not fully re-replicated yet: %s", ledger_id, report.failures)
            return False
        finally:
            self.rereplicate_stats.observe(time.perf_counter() - started, is_success=is_done)
            await self.store.execute(Delete(lock))
