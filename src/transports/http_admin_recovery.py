"""The HTTP admin API's long jobs, run as BookKeeper's RecoveryBookieService and
DecommissionService run them: the request is checked, the job started in the background, and
the answer given once it has started (BookKeeper's sentence, as text).

    PUT /api/v1/autorecovery/bookie         {"bookie_src": [...], "bookie_dest": [...], "delete_cookie": b}
    PUT /api/v1/autorecovery/decommission   {"bookie_src": "host:port", "delete_cookie": b}
    GET on either path (not BookKeeper's): the jobs of that kind, running and finished

The work is bktransports.admin_ops', which `bk shell recover` and `bk shell decommission` run too,
on a client of the cluster on the bookie's metastore session (AdminApi.with_client), in the
bookie's nursery: a job ends with its bookie. Refused before anything starts: an address that
never joined the cluster (404), a bookie_dest that is not a writable bookie (400), a bookie to
decommission that is still registered (400: BookKeeper starts, then fails in the background).
Limits: one job per bookie at a time (409 for another), RUNNING_JOB_COUNT_MAX at once (503 for
more); the last FINISHED_JOB_COUNT_MAX finished jobs are listed, the oldest forgotten first.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import trio

from bkcore.client.handles import BookKeeperClient
from bktransports import admin_ops
from bktransports.client_driver import parse_address
from bktransports.http_admin import HttpError, Request, Response, json_response, text_response

log = logging.getLogger("bk.http")

RUNNING_JOB_COUNT_MAX = 4
FINISHED_JOB_COUNT_MAX = 32


@dataclass
class Job:
    kind: str                                   # "recover" or "decommission"
    bookies: list[str]                          # recovered one after another
    targets: list[str]                          # bookie_dest: copy only onto these ([]: any)
    delete_cookie: bool
    started_at_ms: int
    state: str = "running"                      # running, done (everything copied) or failed
    ended_at_ms: int = 0
    ledgers_checked: int = 0
    fragments_copied: int = 0
    entries_copied: int = 0
    failures: list[str] = field(default_factory=list)
    cookies_deleted: list[str] = field(default_factory=list)

    def view(self) -> dict:
        return {"kind": self.kind, "bookie_src": self.bookies, "bookie_dest": self.targets,
                "delete_cookie": self.delete_cookie, "state": self.state, "started_at_ms": self.started_at_ms,
                "ended_at_ms": self.ended_at_ms, "ledgers_checked": self.ledgers_checked,
                "fragments_copied": self.fragments_copied, "entries_copied": self.entries_copied,
                "failures": self.failures, "cookies_deleted": self.cookies_deleted}


class RecoveryJobs:
    """The recovery and decommission endpoints of one bookie, and the jobs they started."""

    def __init__(self, *, nursery: trio.Nursery, with_client) -> None:
        """with_client(work): `await work(driver)` on a client of the cluster (AdminApi's)."""
        self._nursery = nursery
        self._with_client = with_client
        self._running: list[Job] = []
        self._finished: list[Job] = []          # oldest first, at most FINISHED_JOB_COUNT_MAX

    def routes(self) -> dict:
        return {
            "/api/v1/autorecovery/bookie": {"PUT": self.recover, "GET": self.list_recoveries},
            "/api/v1/autorecovery/decommission": {"PUT": self.decommission, "GET": self.list_decommissions},
        }

    # -- endpoints --------------------------------------------------------------------------

    async def recover(self, request: Request) -> Response:
        sources = _bookie_ids(request, "bookie_src", required=True)
        targets = _bookie_ids(request, "bookie_dest")
        delete_cookie = request.boolean("delete_cookie", default=False)
        if set(sources) & set(targets):
            raise HttpError(400, f"bookie_dest names {sorted(set(sources) & set(targets))}, which bookie_src "
                                 f"recovers from")

        async def check(bk: BookKeeperClient) -> None:
            for bookie in sources:
                await _refusing(admin_ops.check_cluster_bookie, bk, bookie)
            writable = set(await bk.list_bookies())
            for target in targets:
                if target not in writable:
                    raise HttpError(400, f"bookie_dest {target} is not a writable bookie of this cluster; the "
                                         f"writable ones: {', '.join(sorted(writable)) or 'none'}")

        await self._start(Job("recover", sources, targets, delete_cookie, _now_ms()), check)
        return text_response("Success send recovery request command.\n")

    async def decommission(self, request: Request) -> Response:
        bookie = _bookie_ids(request, "bookie_src", required=True, single=True)[0]
        delete_cookie = request.boolean("delete_cookie", default=False)

        async def check(bk: BookKeeperClient) -> None:
            await _refusing(admin_ops.check_decommissionable, bk, bookie)

        await self._start(Job("decommission", [bookie], [], delete_cookie, _now_ms()), check)
        return text_response(f"Success send decommission Bookie command {bookie}\n")

    async def list_recoveries(self, request: Request) -> Response:
        return json_response(self._views("recover"))

    async def list_decommissions(self, request: Request) -> Response:
        return json_response(self._views("decommission"))

    def _views(self, kind: str) -> list[dict]:
        return [job.view() for job in self._finished + self._running if job.kind == kind]

    # -- the jobs ---------------------------------------------------------------------------

    async def _start(self, job: Job, check) -> None:
        """Check the job on a client (check raises HttpError), then start it, unless a job
        runs for one of its bookies or too many run."""
        try:
            await self._with_client(lambda driver: check(BookKeeperClient(driver)))
        except ConnectionError as exc:
            raise HttpError(503, f"the metastore cannot answer: {exc}") from None
        # (no await from here on: what is checked is what is started)
        busy = [bookie for running in self._running for bookie in running.bookies if bookie in job.bookies]
        if busy:
            raise HttpError(409, f"{busy[0]} is being recovered or decommissioned already (GET "
                                 f"/api/v1/autorecovery/bookie or .../decommission lists the jobs)")
        if len(self._running) >= RUNNING_JOB_COUNT_MAX:
            raise HttpError(503, f"{RUNNING_JOB_COUNT_MAX} recovery and decommission jobs are running, the most "
                                 f"this bookie runs at once; ask again when one has finished")
        self._running.append(job)
        self._nursery.start_soon(self._run, job)

    async def _run(self, job: Job) -> None:
        log.info("HTTP admin: %s of %s started", job.kind, ", ".join(job.bookies))
        try:
            await self._with_client(lambda driver: self._copy(job, BookKeeperClient(driver)))
        except Exception as exc:                # (a job's trouble must not stop the bookie)
            log.exception("HTTP admin: %s of %s failed", job.kind, ", ".join(job.bookies))
            job.failures.append(f"{type(exc).__name__}: {exc}")
        finally:
            job.state = "failed" if job.failures else "done"
            job.ended_at_ms = _now_ms()
            self._running.remove(job)
            self._finished.append(job)
            del self._finished[:-FINISHED_JOB_COUNT_MAX]
        log.info("HTTP admin: %s of %s %s: %d fragments (%d entries) copied%s", job.kind, ", ".join(job.bookies),
                 job.state, job.fragments_copied, job.entries_copied,
                 "".join(f"; {failure}" for failure in job.failures))

    async def _copy(self, job: Job, bk: BookKeeperClient) -> None:
        for bookie in job.bookies:
            report = await admin_ops.recover(bk, bookie, delete_cookie_after=job.delete_cookie,
                                             targets=set(job.targets) or None)
            job.ledgers_checked += report.ledgers_checked
            job.fragments_copied += report.fragments_copied
            job.entries_copied += report.entries_copied
            job.failures += report.failures
            if report.cookie_deleted:
                job.cookies_deleted.append(bookie)


def _bookie_ids(request: Request, name: str, *, required: bool = False, single: bool = False) -> list[str]:
    """Bookie ids (host:port) given as `name`: a text or a list of texts (single: one text)."""
    ids = [request.text(name, required=True)] if single else request.texts(name, required=required)
    for bookie_id in ids:
        try:
            parse_address(bookie_id)
        except ValueError:
            raise HttpError(400, f"{name} must name bookies as host:port, not {bookie_id!r}") from None
    return ids


async def _refusing(check, bk: BookKeeperClient, bookie: str) -> None:
    """check(bk, bookie) from bktransports.admin_ops, its refusal as an HTTP error: 404 for an
    address that is no bookie of the cluster, 400 for the others."""
    try:
        await check(bk, bookie)
    except admin_ops.RecoveryRefused as exc:
        raise HttpError(404 if isinstance(exc, admin_ops.NotOfCluster) else 400, str(exc)) from None


def _now_ms() -> int:
    return int(time.time() * 1000)
