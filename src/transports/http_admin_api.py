"""The endpoints of the bookie's HTTP admin API: BookKeeper's paths and JSON field names, over
what one bookie process has (docs/operations.md, "HTTP admin", lists them and what is left out).

A bookie holds a metastore session (ledgers, registrations, cookies, the auditor and the
under-replication marks are read there), its own storage and journal, its GC loop, and maybe
the autorecovery daemon of its process (BookieServer.autorecovery). What needs the other bookies
(their disk space) or a client operation (deleting or reading a ledger, a sanity check) goes
through a ClientDriver on the bookie's own metastore session, opened for that request and closed
after it, showing the bookies what the bookie's other clients show them (its secret; TLS with
tlsTrustStore when the bookies speak TLS). Recovery and decommission run in the background:
bktransports.http_admin_recovery.
"""

from __future__ import annotations

import ipaddress
import logging
import os

import outcome
import trio

from bkcore.client.handles import BookKeeperClient
from bkcore.errors import BKException, NoSuchLedger, Unauthorized
from bkcore.ledger.metadata import LedgerMetadata
from bkcore.metaops import Get, MetaCode
from bktransports.autorecovery import (
    cluster_recovery_delay, is_replication_enabled, request_audit, set_cluster_recovery_delay,
    set_replication_enabled,
)
from bktransports import cluster_state
from bktransports.admin_ops import bookie_sanity
from bktransports.bookie_options import option_values
from bktransports.client_driver import ClientDriver, parse_address
from bktransports.credentials import bookie_client_credentials
from bktransports.filesystem import FILE_KINDS, bookie_files
from bktransports.http_admin import HttpError, Request, Response, Routes, json_response, text_response
from bktransports.http_admin_recovery import RecoveryJobs
from bktransports.metadata_walk import ledger_ids_in_metadata
from bktransports.metrics import metrics_handler

log = logging.getLogger("bk.http")

LEDGER_ID_MAX = 10**10 - 1              # ledger paths hold 10 digits (bkcore.ledger.layout)
ENTRY_ID_MAX = 2**63 - 1
BOOKIE_INFO_TIMEOUT_S = 5.0             # a bookie that has not answered by then is left out
HOSTNAME_LOOKUP_TIMEOUT_S = 2.0
LIST_PAGE_LEDGER_COUNT = 100            # BookKeeper's LIST_LEDGER_BATCH_SIZE: a page of /ledger/list
READ_PAGE_ENTRY_COUNT = 1000            # BookKeeper's ENTRIES_PER_PAE: a page of /ledger/read
READ_ENTRY_COUNT_MAX = 1000             # entries one /ledger/read answers, at most
READ_SIZE_MAX = 32 * 1024 * 1024        # payload bytes one /ledger/read answers, at most
READ_BATCH_COUNT = 100                  # entries asked of the bookies at once
SANITY_ENTRY_COUNT = 10                 # BookKeeper's SanityTestCommand default
SANITY_TIMEOUT_S = 10.0                 # a check not done by then has failed
SANITY_WAIT_S = 5.0                     # BookKeeper's: how long a request waits for the running check


def admin_routes(bookie, nursery: trio.Nursery) -> Routes:
    """Path -> {method: handler} for a BookieServer; background jobs run in `nursery`."""
    return AdminApi(bookie, nursery).routes()


class AdminApi:
    def __init__(self, bookie, nursery: trio.Nursery) -> None:
        self.bookie = bookie
        self.jobs = RecoveryJobs(nursery=nursery, with_client=self.with_client)
        self._sanity_lock = trio.Lock()         # one sanity check at a time, as BookKeeper's

    def routes(self) -> Routes:
        return {
            "/heartbeat": {"GET": self.heartbeat},
            "/metrics": {"GET": metrics_handler(self.bookie.registry)},
            "/api/v1/config/server_config": {"GET": self.server_config},
            "/api/v1/bookie/info": {"GET": self.bookie_info},
            "/api/v1/bookie/is_ready": {"GET": self.is_ready},
            "/api/v1/bookie/state": {"GET": self.state},
            "/api/v1/bookie/state/readonly": {"GET": self.readonly, "PUT": self.set_readonly},
            "/api/v1/bookie/list_bookies": {"GET": self.list_bookies},
            "/api/v1/bookie/list_bookie_info": {"GET": self.list_bookie_info},
            "/api/v1/bookie/cluster_info": {"GET": self.cluster_info},
            "/api/v1/bookie/last_log_mark": {"GET": self.last_log_mark},
            "/api/v1/bookie/gc": {"GET": self.gc, "PUT": self.trigger_gc},
            "/api/v1/bookie/gc_details": {"GET": self.gc_details},
            "/api/v1/bookie/gc/suspend_compaction": {"GET": self.compaction_suspension,
                                                     "PUT": self.suspend_compaction},
            "/api/v1/bookie/gc/resume_compaction": {"PUT": self.resume_compaction},
            "/api/v1/bookie/list_disk_file": {"GET": self.list_disk_file},
            "/api/v1/bookie/sanity": {"GET": self.sanity},
            "/api/v1/bookie/stalls": {"GET": self.stalls},
            "/api/v1/ledger/list": {"GET": self.list_ledgers},
            "/api/v1/ledger/metadata": {"GET": self.ledger_metadata},
            "/api/v1/ledger/delete": {"DELETE": self.delete_ledger},
            "/api/v1/ledger/read": {"GET": self.read_ledger},
            "/api/v1/autorecovery/who_is_auditor": {"GET": self.who_is_auditor},
            "/api/v1/autorecovery/list_under_replicated_ledger": {"GET": self.list_under_replicated},
            "/api/v1/autorecovery/lost_bookie_recovery_delay": {"GET": self.lost_bookie_recovery_delay,
                                                                 "PUT": self.set_lost_bookie_recovery_delay},
            "/api/v1/autorecovery/status": {"GET": self.autorecovery_status, "PUT": self.set_autorecovery_status},
            "/api/v1/autorecovery/trigger_audit": {"PUT": self.trigger_audit},
            **self.jobs.routes(),
        }

    # -- this bookie ------------------------------------------------------------------------

    async def heartbeat(self, request: Request) -> Response:
        return text_response("OK\n")

    async def server_config(self, request: Request) -> Response:
        return json_response(option_values(self.bookie.config))

    async def bookie_info(self, request: Request) -> Response:
        free, total = self.bookie.fs.disk_space()
        return json_response({"freeSpace": free, "totalSpace": total})

    async def is_ready(self, request: Request) -> Response:
        """200 while the bookie runs and its registration is in the metastore, else 503."""
        bookie = self.bookie
        bookie_id = bookie.config.bookie_id
        if not bookie.state()["running"]:
            raise HttpError(503, f"bookie {bookie_id} is not ready: it is shutting down")
        if bookie.is_registered_readonly is None:
            raise HttpError(503, f"bookie {bookie_id} is not ready: it has not registered yet")
        path = bookie.layout.bookie_path(bookie_id, is_readonly=bookie.is_registered_readonly)
        result = await bookie.store.execute(Get(path))
        if result.code is not MetaCode.OK:
            raise HttpError(503, f"bookie {bookie_id} is not ready: not registered at {path} ({result.code.name})")
        return text_response("OK\n")

    async def state(self, request: Request) -> Response:
        return json_response(self.bookie.state())

    async def readonly(self, request: Request) -> Response:
        return json_response({"readOnly": self.bookie.is_readonly})

    async def set_readonly(self, request: Request) -> Response:
        is_readonly = request.boolean("readOnly")
        if is_readonly != self.bookie.is_readonly:
            await self.bookie.set_readonly(is_readonly)
        return json_response({"readOnly": self.bookie.is_readonly})

    async def last_log_mark(self, request: Request) -> Response:
        """The LastLogMark as persisted in each ledger directory: the journal position before
        which every record has reached the ledger storage."""
        journal = self.bookie.stack.journal
        marks = await trio.to_thread.run_sync(journal.read_last_marks)
        return json_response({
            os.path.join(self.bookie.fs.root, ledger_dir):
                f"LogMark: logFileId - {mark.journal_id} , logFileOffset - {mark.position}"
            for ledger_dir, mark in zip(journal.config.ledger_dirs, marks)})

    async def gc(self, request: Request) -> Response:
        return json_response({"is_in_force_gc": _text(self.bookie.gc_status.is_force_wanted)})

    async def trigger_gc(self, request: Request) -> Response:
        """A GC round now (after the running one): major with forceMajor, else minor; a kind
        asked for explicitly (forceMajor, forceMinor) runs even while suspended."""
        is_major = request.boolean("forceMajor", default=False)
        is_minor = request.boolean("forceMinor", default=False)
        self.bookie.request_gc(is_major=is_major, is_minor=is_minor)
        return json_response({"is_in_force_gc": _text(self.bookie.gc_status.is_force_wanted)})

    async def stalls(self, request: Request) -> Response:
        """Not BookKeeper's: what held this bookie up from `since` on (wall-clock seconds; all it
        kept when absent): the longest loop pause, garbage collection, journal write and sync,
        checkpoint phase..., and the events themselves (bktransports.stall_recorder)."""
        since = request.text("since")
        try:
            since_s = float(since) if since is not None else 0.0
        except ValueError:
            raise HttpError(400, f"since must be wall-clock seconds (e.g. 1764200000.5), not {since!r}") from None
        return json_response(self.bookie.stalls.since(since_s))

    async def gc_details(self, request: Request) -> Response:
        status = self.bookie.gc_status
        return json_response([{
            "forceCompacting": status.is_running_forced, "majorCompacting": status.running == "major",
            "minorCompacting": status.running == "minor", "lastMajorCompactionTime": status.last_major_ms,
            "lastMinorCompactionTime": status.last_minor_ms, "majorCompactionCounter": status.major_count,
            "minorCompactionCounter": status.minor_count}])

    async def compaction_suspension(self, request: Request) -> Response:
        status = self.bookie.gc_status
        return json_response({"isMajorGcSuspended": _text(status.is_major_suspended),
                              "isMinorGcSuspended": _text(status.is_minor_suspended)})

    async def suspend_compaction(self, request: Request) -> Response:
        """suspendMajor, suspendMinor: true suspends that compaction (GC rounds still collect
        deleted ledgers); false leaves it as it is, as BookKeeper does."""
        return await self._set_suspension(request, "suspend", is_suspended=True)

    async def resume_compaction(self, request: Request) -> Response:
        return await self._set_suspension(request, "resume", is_suspended=False)

    async def _set_suspension(self, request: Request, verb: str, *, is_suspended: bool) -> Response:
        major_name, minor_name = f"{verb}Major", f"{verb}Minor"
        if request.argument(major_name) is None and request.argument(minor_name) is None:
            raise HttpError(400, f"{major_name} or {minor_name} is required: true or false")
        status = self.bookie.gc_status
        for name, kind in ((major_name, "major"), (minor_name, "minor")):
            if request.boolean(name, default=False):
                setattr(status, f"is_{kind}_suspended", is_suspended)
                log.info("bookie %s: %s compaction %s", self.bookie.config.bookie_id, kind,
                         "suspended" if is_suspended else "resumed")
        return await self.compaction_suspension(request)

    async def list_disk_file(self, request: Request) -> Response:
        """The journal, entry log and index files (their names, each followed by a tab, as
        BookKeeper writes them), of one file_type or all."""
        file_type = request.text("file_type", choices=FILE_KINDS)
        kinds = (file_type,) if file_type else FILE_KINDS
        config = self.bookie.config
        rows = await trio.to_thread.run_sync(bookie_files, config.data_dir, config.journal, kinds)
        return json_response({f"{kind} files": "".join(f"{os.path.basename(row['file'])}\t"
                                                       for row in rows if row["kind"] == kind) for kind in kinds})

    async def sanity(self, request: Request) -> Response:
        """BookKeeper's bookie sanity check: SANITY_ENTRY_COUNT entries written to a ledger on
        this bookie alone, read back and the ledger deleted (`bk shell bookiesanity`'s check),
        one check at a time. A readonly bookie is not checked: {"passed": false, "readOnly": true}."""
        if self.bookie.is_readonly:
            return json_response({"passed": False, "readOnly": True})
        with trio.move_on_after(SANITY_WAIT_S) as waiting:
            await self._sanity_lock.acquire()
        if waiting.cancelled_caught:
            raise HttpError(503, f"a sanity check of this bookie is running and has not finished in "
                                 f"{SANITY_WAIT_S:g} s; ask again later")
        try:
            return json_response({"passed": await self._is_sane(), "readOnly": False})
        finally:
            self._sanity_lock.release()

    async def _is_sane(self) -> bool:
        bookie_id = self.bookie.config.bookie_id
        with trio.move_on_after(SANITY_TIMEOUT_S):
            try:
                return await self.with_client(lambda driver: bookie_sanity(
                    BookKeeperClient(driver), bookie_id, entry_count=SANITY_ENTRY_COUNT))
            except (BKException, ConnectionError) as exc:
                log.warning("HTTP admin: the sanity check of bookie %s failed: %s: %s", bookie_id,
                            type(exc).__name__, exc)
                return False
        log.warning("HTTP admin: the sanity check of bookie %s took over %g s", bookie_id, SANITY_TIMEOUT_S)
        return False

    # -- the cluster, from the metastore ----------------------------------------------------

    async def list_bookies(self, request: Request) -> Response:
        is_readonly = request.text("type", choices=("rw", "ro"), required=True) == "ro"
        print_hostnames = request.boolean("print_hostnames", default=False)
        writable, readonly = await self._registered_bookies()
        bookie_ids = readonly if is_readonly else writable
        return json_response({bookie_id: await _hostname(bookie_id) if print_hostnames else None
                              for bookie_id in bookie_ids})

    async def list_bookie_info(self, request: Request) -> Response:
        """Each registered bookie's disk space, asked over its own connection (BookieInfoRequest)."""
        writable, readonly = await self._registered_bookies()
        answers = await self.with_client(lambda driver: _ask_bookies(driver, writable + readonly))
        body: dict = {bookie_id: {"free": info.free_disk_space, "total": info.total_disk_space}
                      for bookie_id, info in sorted(answers.items())}
        body["clusterInfo"] = {"total_free": sum(each["free"] for each in body.values()),
                               "total": sum(each["total"] for each in body.values())}
        return json_response(body)

    async def cluster_info(self, request: Request) -> Response:
        return json_response(await self._controlled(cluster_state.cluster_info))

    async def list_ledgers(self, request: Request) -> Response:
        """Every ledger id; with print_metadata its metadata too, decoded (decode_meta is taken:
        BookKeeper's undecoded form is its own serialization), of page N only when asked (the
        Nth LIST_PAGE_LEDGER_COUNT ledgers)."""
        print_metadata = request.boolean("print_metadata", default=False)
        request.boolean("decode_meta", default=True)
        page = request.integer("page", minimum=1, maximum=LEDGER_ID_MAX, default=0) if print_metadata else 0
        ledger_ids = await ledger_ids_in_metadata(self.bookie.store, self.bookie.layout)
        if not print_metadata:
            return json_response({str(ledger_id): None for ledger_id in ledger_ids})
        if page:
            ledger_ids = ledger_ids[(page - 1) * LIST_PAGE_LEDGER_COUNT:page * LIST_PAGE_LEDGER_COUNT]
        listed = {}
        for ledger_id in ledger_ids:
            metadata = await self._metadata(ledger_id)
            if metadata is not None:                # (unless deleted meanwhile)
                listed[str(ledger_id)] = metadata.summary()
        return json_response(listed)

    async def ledger_metadata(self, request: Request) -> Response:
        ledger_id = request.integer("ledger_id", minimum=0, maximum=LEDGER_ID_MAX)
        metadata = await self._metadata(ledger_id)
        if metadata is None:
            raise HttpError(404, f"ledger {ledger_id} does not exist")
        return json_response({str(ledger_id): metadata.summary()})

    async def delete_ledger(self, request: Request) -> Response:
        """The client's delete (its metadata goes; every bookie's GC reclaims the entries)."""
        ledger_id = request.integer("ledger_id", minimum=0, maximum=LEDGER_ID_MAX)
        try:
            await self.with_client(lambda driver: driver.call(
                lambda op_id, now_ns: driver.client.delete_ledger(op_id, ledger_id, now_ns=now_ns)))
        except NoSuchLedger:
            raise HttpError(404, f"ledger {ledger_id} does not exist") from None
        return text_response(f"ledger {ledger_id} deleted\n")

    async def read_ledger(self, request: Request) -> Response:
        """BookKeeper's read of entries start_entry_id..end_entry_id (-1: to the end), within
        page N's (entries (N-1)*1000..N*1000-1) when asked, as its administrator reads them: no
        recovery (a writer is left alone), confirmed entries only (up to the LAC), without the
        password where the digests need none (`password`, ours, reads an HMAC ledger). Each
        payload as US-ASCII text, as BookKeeper decodes it (other bytes become U+FFFD)."""
        ledger_id = request.integer("ledger_id", minimum=0, maximum=LEDGER_ID_MAX)
        first = request.integer("start_entry_id", minimum=0, maximum=ENTRY_ID_MAX, default=0)
        last = request.integer("end_entry_id", minimum=-1, maximum=ENTRY_ID_MAX, default=-1)
        page = request.integer("page", minimum=1, maximum=ENTRY_ID_MAX // READ_PAGE_ENTRY_COUNT, default=0)
        password = request.text("password")
        answer = {}
        if page:
            page_first = (page - 1) * READ_PAGE_ENTRY_COUNT
            page_last = page_first + READ_PAGE_ENTRY_COUNT - 1
            first = max(first, page_first)
            last = page_last if last == -1 else min(last, page_last)
            answer["Entries for page: "] = str(page)
        if last != -1 and first > last:
            raise HttpError(400, f"start_entry_id {first} is after end_entry_id {last}"
                                 + (f" (within page {page})" if page else ""))
        try:
            entries = await self.with_client(lambda driver: _read_entries(
                BookKeeperClient(driver), ledger_id, first, last, None if password is None else password.encode()))
        except NoSuchLedger:
            raise HttpError(404, f"ledger {ledger_id} does not exist") from None
        except Unauthorized as exc:
            hint = "; give the ledger's password as password" if password is None else ""
            raise HttpError(403, f"{exc}{hint}") from None
        except BKException as exc:
            raise HttpError(503, f"ledger {ledger_id} cannot be read now: {type(exc).__name__}: {exc}") from None
        except ConnectionError as exc:
            raise HttpError(503, f"the metastore cannot answer: {exc}") from None
        return json_response({**answer, **entries})

    # -- autorecovery -----------------------------------------------------------------------

    async def who_is_auditor(self, request: Request) -> Response:
        auditor = await self._auditor()
        if auditor is None:
            raise HttpError(404, "no auditor is elected: no bookie or process of this cluster runs autorecovery")
        return json_response({"Auditor": auditor})

    async def list_under_replicated(self, request: Request) -> Response:
        """Marked ledgers, those whose lost bookies include missingreplica and not
        excludingmissingreplica; printmissingreplica=true maps each to its lost bookies."""
        missing = request.text("missingreplica")
        excluding = request.text("excludingmissingreplica")
        print_missing = request.boolean("printmissingreplica", default=False)
        chosen = await self._controlled(cluster_state.chosen_underreplicated, missing=missing, excluding=excluding)
        if print_missing:
            return json_response({str(ledger_id): lost for ledger_id, lost in chosen.items()})
        return json_response(list(chosen))

    async def lost_bookie_recovery_delay(self, request: Request) -> Response:
        """The cluster's delay if one is set (bk shell lostbookierecoverydelay -set), else this
        bookie's configured one."""
        delay = await self._controlled(cluster_recovery_delay)
        seconds = self.bookie.config.lost_bookie_recovery_delay_s if delay is None else delay
        return json_response({"lostBookieRecoveryDelay": round(seconds)})

    async def set_lost_bookie_recovery_delay(self, request: Request) -> Response:
        seconds = request.integer("delay_seconds", minimum=0, maximum=10**9)
        await self._controlled(set_cluster_recovery_delay, seconds)
        return json_response({"lostBookieRecoveryDelay": seconds})

    async def autorecovery_status(self, request: Request) -> Response:
        return json_response({"enabled": await self._controlled(is_replication_enabled)})

    async def set_autorecovery_status(self, request: Request) -> Response:
        enabled = request.boolean("enabled")
        await self._controlled(set_replication_enabled, enabled)
        return json_response({"enabled": enabled})

    async def trigger_audit(self, request: Request) -> Response:
        """Ask the auditor, whichever bookie or daemon it is, for an audit now: it marks the
        ledgers of bookies missing now at once, without waiting out lostBookieRecoveryDelay."""
        await self._controlled(request_audit)
        return json_response({"auditTriggered": True, "auditor": await self._auditor()})

    async def _controlled(self, control, *args, **options):
        """A reading or control of the whole cluster (bktransports.cluster_state, the autorecovery
        controls), on this bookie's session; 503 when the metastore cannot answer."""
        try:
            return await control(self.bookie.store, self.bookie.layout, *args, **options)
        except ConnectionError as exc:
            raise HttpError(503, f"the metastore cannot answer: {exc}") from None

    # -- reading the metastore --------------------------------------------------------------

    async def _registered_bookies(self) -> tuple[list[str], list[str]]:
        """(writable, readonly) bookie ids, as registered in the metastore."""
        return await self._controlled(cluster_state.registered_bookies)

    async def _auditor(self) -> str | None:
        return await self._controlled(cluster_state.auditor)

    async def _metadata(self, ledger_id: int) -> LedgerMetadata | None:
        result = await self.bookie.store.execute(Get(self.bookie.layout.ledger_path(ledger_id)))
        if result.code is MetaCode.NO_NODE:
            return None
        if result.code is not MetaCode.OK:
            raise HttpError(503, f"the metastore cannot read ledger {ledger_id}: {result.code.name}")
        return LedgerMetadata.from_bytes(result.data, version=result.version)

    async def with_client(self, work):
        """`await work(driver)` with a client of the cluster on this bookie's metastore session,
        opened for the call and closed after it; work's exception comes out as itself."""
        config = self.bookie.config
        driver = ClientDriver(store=self.bookie.store, layout=self.bookie.layout,
                              client_id=f"http-admin-{config.bookie_id}", **bookie_client_credentials(config))
        async with trio.open_nursery() as nursery:
            await nursery.start(driver.run)
            try:
                result = await outcome.acapture(work, driver)
            finally:
                driver.close()
        return result.unwrap()


async def _read_entries(bk: BookKeeperClient, ledger_id: int, first: int, last: int, password: bytes | None) -> dict:
    """Entry id (text) -> payload (US-ASCII text) of the confirmed entries first..last (-1: to
    the LAC), at most READ_ENTRY_COUNT_MAX of them and READ_SIZE_MAX bytes (400 beyond)."""
    reader = await bk.open_ledger(ledger_id, password=password, recovery=False)
    lac = reader.last_add_confirmed
    end = lac if last == -1 else min(last, lac)
    if end - first + 1 > READ_ENTRY_COUNT_MAX:
        raise HttpError(400, f"ledger {ledger_id}: entries {first}..{end} are {end - first + 1}, over the "
                             f"{READ_ENTRY_COUNT_MAX} one read answers; ask fewer (end_entry_id, or page)")
    entries, size = {}, 0
    for batch_first in range(first, end + 1, READ_BATCH_COUNT):
        payloads = await reader.read(batch_first, min(end, batch_first + READ_BATCH_COUNT - 1))
        for entry_id, payload in enumerate(payloads, start=batch_first):
            size += len(payload)
            if size > READ_SIZE_MAX:
                raise HttpError(400, f"ledger {ledger_id}: entries {first}..{entry_id} hold over {READ_SIZE_MAX} "
                                     f"bytes, the most one read answers; ask fewer (end_entry_id, or page)")
            entries[str(entry_id)] = payload.decode("ascii", "replace")
    return entries


async def _ask_bookies(driver: ClientDriver, bookie_ids: list[str]) -> dict:
    """Bookie id -> its BookieInfoResponse, for those that answer within BOOKIE_INFO_TIMEOUT_S."""
    answers = {}

    async def ask(bookie_id: str) -> None:
        try:
            answers[bookie_id] = await driver.bookie_info(bookie_id, timeout_s=BOOKIE_INFO_TIMEOUT_S)
        except trio.TooSlowError:
            log.info("HTTP admin: bookie %s did not answer a bookie info request", bookie_id)

    async with trio.open_nursery() as nursery:
        for bookie_id in bookie_ids:
            nursery.start_soon(ask, bookie_id)
    return answers


async def _hostname(bookie_id: str) -> str:
    """The host name of a bookie id's address (a reverse lookup of an IP address; the host
    itself when it is a name or the lookup fails)."""
    try:
        host, port = parse_address(bookie_id)
        ipaddress.ip_address(host)
    except ValueError:
        return bookie_id.rpartition(":")[0] or bookie_id
    with trio.move_on_after(HOSTNAME_LOOKUP_TIMEOUT_S):
        try:
            name, _ = await trio.socket.getnameinfo((host, port), 0)
            return name
        except OSError:
            pass
    return host


def _text(flag: bool) -> str:
    return "true" if flag else "false"
