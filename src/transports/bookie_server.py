"""BookieServer: one bookie process over trio — TCP, real files, lmdb, a metastore session.

The thin driver around bkcore's BookieStack. What runs where:
- the event loop thread owns the core and its storage: every receive buffer goes to
  core.receive_batch(), effects are performed at once (Send -> the connection's queue);
- the journal: the core keeps up to journal_writes_in_flight_max JournalWrites out (2) and
  collects the next group meanwhile. They go to the journal's own thread
  (bktransports.worker_thread), which writes every write queued by the time it is free and syncs
  them with one fdatasync; the loop tells the core of them (core.begin_persisted and
  apply_persisted, oldest first, from the thread's report) while the thread already writes the
  next, at most JOURNALED_APPLY_RECORD_COUNT_MAX records a loop step, the loop serving other
  connections between (a write under overload holds thousands); each slice answers the
  requests whose records it applied. A small group (at most journal_sync_inline_size_max bytes:
  light load) while that thread is idle and its writes applied is written and synced at once,
  in the pump that produced it, because a thread handoff costs as much as the fdatasync itself
  on a virtual machine (0.25-0.4 ms there and back); its adds are answered on the spot, before
  their entries are applied to the write cache. A failed journal write stops the bookie (its
  acknowledgements rest on the journal);
- checkpoints, GC with compaction, and the disk monitor run in tasks of their own beside serving
  (bktransports.bookie_maintenance, which says what runs where); the pump asks for a checkpoint
  at once when the write cache holds half of write_cache_size_max, and every connection stops
  reading while it is full (the maintenance's receive gate); the server's checkpoint,
  collect_garbage, request_gc and check_disk delegate there;
- readonly: set_readonly (the admin endpoint, or the disk monitor when usage crosses the marks
  or the ledger disk is full) tells the core and registers the bookie again as readonly or writable;
- registration is an ephemeral node under <root>/available (or available/readonly) tied to the
  metastore session; a lost session opens a new one (reopen_store) and registers again.

Connections are named "conn-<n>"; that name is the `source` the core answers to. With TLS
configured every connection is wrapped in TLS; with an auth secret a connection's first message
must be an AuthRequest carrying it, or the connection is answered UNAUTHORIZED and closed.
"""

from __future__ import annotations

import itertools
import ssl
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Awaitable, Callable

import trio

from bkcore.bookie.bookie import BookieConfig
from bkcore.bookie.compaction import CompactionConfig
from bkcore.bookie.cookie import Cookie
from bkcore.bookie.diskmonitor import DiskUsageConfig, DiskUsageMonitor
from bkcore.bookie.durable_storage import StorageConfig
from bkcore.bookie.fs import DiskFullError
from bkcore.bookie.journal_files import JournalConfig
from bkcore.bookie.stack import BookieStack
from bkcore.effects import JournalWrite, Send
from bkcore.ledger.layout import LedgerLayout
from bkcore.errors import Code
from bkcore.metaops import Create, Delete, Get, MetaCode
from bkcore.wire import (
    FRAME_SIZE_MAX, AddBatchRequest, AddBatchResponse, AddRequest, AddResponse, AuthRequest, AuthResponse,
    BookieInfoRequest, BookieInfoResponse, ErrorResponse, ReadBatchRequest, ReadBatchResponse, ReadRequest,
    ReadResponse,
)
from bkmetastore.api import MetadataStore
from bktransports.auth import is_secret
from bktransports.bookie_gc_status import GcStatus
from bktransports.bookie_maintenance import BookieMaintenance
from bktransports.connection import FramedConnection
from bktransports.timer import CoreTimer, now_ns
from bktransports import stall_recorder
from bktransports.worker_thread import WorkerThread
from bktransports.filesystem import INDEX_DIR, OsFileSystem
from bktransports.tls import handshake as tls_handshake, server_context as tls_server_context
from bktransports.http_admin import AdminHttpServer
from bktransports.http_admin_api import admin_routes
from bktransports.lmdb_index import LmdbIndexStore
from bktransports.bookie_metrics import BookieMetrics, bookie_families
from bktransports.metrics import new_registry, publish

# How long a stopping bookie waits for its journal thread before leaving its files open.
JOURNAL_DRAIN_TIMEOUT_S = 30.0
# Of the writes the journal thread reports durable, one loop step applies at most this many
# records and answers what waited on them, then goes on in a later step, the loop serving
# connections between: under overload one write holds thousands. A record costs about the same
# (applied, answered, the answer sent) whether it is one add's entry or a batch's ENTRIES
# record: 128 of either took 1-1.5 ms of the loop's CPU (single adds, and AddBatchRequests of
# 58 1 KiB entries, on a 2-vCPU VM).
JOURNALED_APPLY_RECORD_COUNT_MAX = 128
_OK = int(Code.OK)
log = logging.getLogger("bk.bookie")


@dataclass(frozen=True)
class BookieServerConfig:
    data_dir: str                                   # journal, ledgers and index live under it
    metadata_service_uri: str = ""                  # metadataServiceUri, as configured (shown, not dialled)
    host: str = "127.0.0.1"
    port: int = 3181                                # bookiePort
    advertised_address: str = ""                    # bookie id; default host:port
    http_port: int = 0                              # httpServerPort: HTTP admin, 0 = off
    http_tls: bool = False                          # httpServerTlsEnable: HTTPS with the bookie's certificate
    auth_secret: bytes = b""                        # clients must present it first (b"": no check)
    tls_cert_file: str = ""                         # TLS when set: certificate chain (PEM)
    tls_key_file: str = ""                          # and its private key (PEM)
    tls_trust_file: str = ""                        # CA(s) its own clients (autorecovery, stream storage) trust
    autorecovery: bool = False                      # autoRecoveryDaemonEnabled
    lost_bookie_recovery_delay_s: float = 0.0       # lostBookieRecoveryDelay
    audit_interval_s: float = 60.0                  # auditorPeriodicCheckInterval
    stream_storage: bool = False                    # streamStorageEnabled: tables/gRPC in this process
    stream_storage_port: int = 4181                 # streamStoragePort
    bookie: BookieConfig = field(default_factory=lambda: BookieConfig(journal_flush_when_queue_empty=True))
    journal: JournalConfig = field(default_factory=JournalConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    disk_usage: DiskUsageConfig = field(default_factory=DiskUsageConfig)
    compaction: CompactionConfig = field(default_factory=CompactionConfig)
    flush_interval_s: float = 1.0                   # flushInterval: checkpoint period
    # checkpointCompletionTarget: a periodic checkpoint's entry-log writes are spread over this
    # fraction of flush_interval_s (bktransports.checkpoint_pacer); 0: as fast as they go.
    checkpoint_completion_target: float = 0.5
    # dbStorage_writeCacheMaxSizeMb: a checkpoint starts when the write cache holds half of it;
    # the other half is the cache being flushed meanwhile.
    write_cache_size_max: int = 256 * 1024 * 1024
    gc_wait_time_s: float = 60.0                    # gcWaitTime
    major_compaction_interval_s: float = 3600.0     # majorCompactionInterval
    disk_check_interval_s: float = 10.0             # diskCheckInterval
    frame_size_max: int = FRAME_SIZE_MAX
    connection_send_queue_size_max: int = 64 * 1024 * 1024
    journal_sync_inline_size_max: int = 16 * 1024   # groups this small sync on the loop, not a thread

    @property
    def bookie_id(self) -> str:
        return self.advertised_address or f"{self.host}:{self.port}"


class BookieServer:
    def __init__(self, config: BookieServerConfig, store: MetadataStore, layout: LedgerLayout, *,
                 reopen_store: Callable[[], Awaitable[MetadataStore]] | None = None) -> None:
        self.config = config
        self.store = store
        # Opens a new metastore session after this one is lost (None: the bookie exits then).
        self._reopen_store = reopen_store
        self.layout = layout
        self.fs = OsFileSystem(config.data_dir)
        self.stack: BookieStack | None = None
        self.monitor = DiskUsageMonitor(config=config.disk_usage)
        self.connections: dict[str, FramedConnection] = {}
        self._names = (f"conn-{n}" for n in itertools.count(1))
        # Journal writes and fdatasyncs, and the deletion of old journals, in one ordered thread.
        self._journal = WorkerThread("bookie-journal", handle_batch=self._write_and_sync,
                                     on_batch_done=self._on_journal_batch_done)
        self._journal_error: BaseException | None = None
        self._journal_broken = trio.Event()
        # Writes the journal thread reported durable that the core has not applied entirely,
        # oldest first (the first may be part-applied: core.is_applying); at most
        # journal_writes_in_flight_max, the core keeps no more out. While it is not empty,
        # _apply_durable_writes is queued (run_sync_soon) to go on with them, and no write is
        # synced on the loop (its answers would overtake theirs).
        self._durable_writes: deque[JournalWrite] = deque()
        self._sync_inline_size_max = config.journal_sync_inline_size_max
        self._write_cache_half_size = config.write_cache_size_max // 2    # then checkpoint at once
        self._timer = CoreTimer(self._on_timer_due)
        self.is_readonly = False          # refusing normal adds, registered under readonly/
        self.is_registered_readonly: bool | None = None
        self.listen_port: int | None = None
        self.counts = {"checkpoints": 0, "gc_rounds": 0, "ledgers_collected": 0, "bytes_compacted": 0,
                       "connections": 0, "malformed_frames": 0, "readonly_transitions": 0, "auth_failures": 0,
                       "add_requests": 0}
        self._unauthenticated: set[str] = set()     # connections that still owe the secret
        self._tls = self._tls_context()
        # Its /metrics: the process's registry, BookKeeper's families read from this bookie at
        # each scrape (bktransports.bookie_metrics); the stream storage and autorecovery daemon
        # of this process publish theirs in it too.
        self.metrics = BookieMetrics()
        self.registry = new_registry()
        publish(self.registry, lambda: bookie_families(self))
        self._request_started: dict[str, dict] = {}  # connection -> (kind, request id) -> time
        # Loop pauses, garbage collections, journal and checkpoint phases (/api/v1/bookie/stalls):
        # the loop's own recorder once serving.
        self.stalls = stall_recorder.StallRecorder()
        self.http_port: int | None = None
        self.is_shutting_down = False
        # Checkpoints, GC and compaction, disk checks: it reads this server's stack, stalls and
        # store at each use, and deletes old journals in this server's journal thread.
        self.maintenance = BookieMaintenance(self, journal=self._journal)
        # The autorecovery daemon of this process, if it runs one (`bk bookie` with
        # autoRecoveryDaemonEnabled sets it): the admin endpoint asks it about audits.
        self.autorecovery = None

    @property
    def core(self):
        return self.stack.core

    # -- start ------------------------------------------------------------------------------

    async def _start_stack(self) -> None:
        config = self.config
        bookie_id = config.bookie_id
        cookie_path = self.layout.cookie_path(bookie_id)
        result = await self.store.execute(Get(cookie_path))
        registered = (Cookie.from_text(result.data.decode("utf-8", "replace"), path=cookie_path)
                      if result.code is MetaCode.OK else None)
        self.fs.makedirs(INDEX_DIR)
        stack = BookieStack(bookie_id=bookie_id, fs=self.fs, index=LmdbIndexStore(f"{config.data_dir}/{INDEX_DIR}"),
                            bookie_config=config.bookie, journal_config=config.journal, storage_config=config.storage)
        started = time.monotonic()
        replay = await trio.to_thread.run_sync(
            lambda: stack.start(now_ms=int(time.time() * 1000), registered_cookie=registered))
        log.info("bookie %s: replayed %d journal records from %d files in %.2fs%s", bookie_id, len(replay.records),
                 len(replay.files_scanned), time.monotonic() - started,
                 f"; tail problems: {replay.tail_problems}" if replay.tail_problems else "")
        if registered is None:
            await self.store.execute(Create(cookie_path, stack.cookie.to_text().encode()))
        self.stack = stack

    async def _register(self) -> None:
        """Register (again) as writable or readonly, removing the other registration."""
        is_readonly = self.is_readonly
        bookie_id = self.config.bookie_id
        stale = self.layout.bookie_path(bookie_id, is_readonly=not is_readonly)
        await self.store.execute(Delete(stale))
        path = self.layout.bookie_path(bookie_id, is_readonly=is_readonly)
        result = await self.store.execute(Create(path, b"", is_ephemeral=True))
        if result.code is MetaCode.NODE_EXISTS:
            # A registration from this bookie's previous session that has not expired yet:
            # take it over (the old session is gone; its node would vanish at expiry).
            await self.store.execute(Delete(path))
            result = await self.store.execute(Create(path, b"", is_ephemeral=True))
        if result.code is not MetaCode.OK:
            raise RuntimeError(f"bookie {bookie_id}: cannot register at {path}: {result.code.name}")
        self.is_registered_readonly = is_readonly

    # -- serving ----------------------------------------------------------------------------

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Start the bookie and serve until cancelled. task_status.started() gets the port."""
        self.stalls = stall_recorder.for_current_run()
        await self._start_stack()
        listeners = await trio.open_tcp_listeners(self.config.port, host=self.config.host)
        self.listen_port = listeners[0].socket.getsockname()[1]
        self.core.set_readonly(self.is_readonly)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch_journal)
                nursery.start_soon(self._timer.run)
                nursery.start_soon(self.maintenance.checkpoint_loop)
                nursery.start_soon(self.maintenance.gc_loop)
                nursery.start_soon(self.maintenance.disk_loop)
                await self._register()
                nursery.start_soon(self._registration_loop)
                if self.config.http_port:
                    admin = AdminHttpServer(admin_routes(self, nursery), tls=self._http_tls_context(),
                                            auth_secret=self.config.auth_secret)
                    self.http_port = await nursery.start(admin.serve, self.config.http_port, self.config.host)
                self._listen_scope = trio.CancelScope()

                async def listen(task_status=trio.TASK_STATUS_IGNORED) -> None:
                    with self._listen_scope:
                        await trio.serve_listeners(self._handle_connection, listeners, task_status=task_status)

                await nursery.start(listen)
                log.info("bookie %s serving on %s:%d", self.config.bookie_id, self.config.host, self.listen_port)
                task_status.started(self.listen_port)
        finally:
            await self._close_files()

    async def _close_files(self) -> None:
        """Once serving is over: the journal thread finishes what it was given, then the index
        and the files are closed, so that this process can serve the same directories again
        (lmdb opens an environment once per process). A journal stuck in a sync keeps them."""
        with trio.move_on_after(JOURNAL_DRAIN_TIMEOUT_S, shield=True):
            # (A job cannot be abandoned: poll. Writes reported durable are applied in steps.)
            while self._journal.outstanding or self._durable_writes:
                await trio.sleep(0.005)
        self._journal.close()
        if self._journal.outstanding or self._durable_writes:
            log.warning("bookie %s: the journal thread did not finish in %.0fs; files left open",
                        self.config.bookie_id, JOURNAL_DRAIN_TIMEOUT_S)
            return
        self.stack.storage.index.close()
        self.fs.close()

    async def shutdown(self, *, timeout_s: float = 10.0) -> None:
        """Stop accepting connections, finish what is in flight (journal groups, answers still
        queued), then checkpoint so the next start replays little."""
        self.is_shutting_down = True
        self._listen_scope.cancel()
        with trio.move_on_after(timeout_s):
            while self.core.journal_waiter_count or any(c.send_queue_size for c in self.connections.values()):
                await trio.sleep(0.005)
        for connection in list(self.connections.values()):
            connection.close("bookie shutting down")
        await self.checkpoint()         # (not paced: it hurries one that is)
        log.info("bookie %s shut down: %d requests unanswered", self.config.bookie_id, self.core.journal_waiter_count)

    def _http_tls_context(self) -> ssl.SSLContext | None:
        """HTTPS for the admin port (httpServerTlsEnable), with the bookie's own certificate."""
        if not self.config.http_tls:
            return None
        if not self.config.tls_cert_file:
            raise ValueError(f"bookie {self.config.bookie_id}: httpServerTlsEnable needs tlsCertificatePath and "
                             f"tlsKeyPath")
        return tls_server_context(self.config.tls_cert_file, self.config.tls_key_file)

    def _tls_context(self) -> ssl.SSLContext | None:
        if not self.config.tls_cert_file:
            return None
        return tls_server_context(self.config.tls_cert_file, self.config.tls_key_file)

    async def _handle_connection(self, stream: trio.abc.Stream) -> None:
        name = next(self._names)
        if self._tls is not None:
            stream = trio.SSLStream(stream, self._tls, server_side=True)
            if not await tls_handshake(stream, what=f"bookie {self.config.bookie_id}"):
                return
        if self.config.auth_secret:
            self._unauthenticated.add(name)
        connection = FramedConnection(stream, name=name, on_messages=self._on_messages,
                                      frame_size_max=self.config.frame_size_max,
                                      send_queue_size_max=self.config.connection_send_queue_size_max,
                                      receive_gate=self.maintenance.receive_gate)
        self.connections[name] = connection
        self._request_started[name] = {}
        self.counts["connections"] += 1
        try:
            await connection.run()
        finally:
            del self.connections[name]
            del self._request_started[name]
            self._unauthenticated.discard(name)
            self.counts["malformed_frames"] += connection.malformed_frame_count
            if connection.malformed_frame_count:
                log.warning("bookie %s: closed %s: %s", self.config.bookie_id, name, connection.close_reason)

    def _on_messages(self, messages: list, connection: FramedConnection) -> None:
        if connection.name in self._unauthenticated:
            messages = self._authenticate(messages, connection)
            if not messages:
                return
        if any(type(m) is BookieInfoRequest for m in messages):
            for message in messages:
                if type(message) is BookieInfoRequest:
                    connection.send(self._bookie_info(message.request_id))
            messages = [m for m in messages if type(m) is not BookieInfoRequest]
        started = self._request_started.get(connection.name)
        if started is not None:
            at = time.perf_counter()
            for message in messages:
                kind = type(message)
                if kind is AddRequest or kind is AddBatchRequest:
                    started["add", message.request_id] = at
                elif (kind is ReadRequest and not message.long_poll_timeout_ns) or kind is ReadBatchRequest:
                    started["read", message.request_id] = at
        self.core.receive_batch(messages, source=connection.name, now_ns=now_ns())
        self._pump()

    def _bookie_info(self, request_id: int) -> BookieInfoResponse:
        free, total = self.fs.disk_space()
        return BookieInfoResponse(request_id, int(Code.OK), free_disk_space=free,
                                  total_disk_space=total, is_readonly=self.is_readonly,
                                  ledger_count=len(self.stack.storage.ledger_ids()))

    def _authenticate(self, messages: list, connection: FramedConnection) -> list:
        """The first message must be an AuthRequest with the secret; anything else closes."""
        first = messages[0]
        if type(first) is AuthRequest and is_secret(first.secret, self.config.auth_secret):
            self._unauthenticated.discard(connection.name)
            connection.send(AuthResponse(first.request_id, int(Code.OK)))
            return messages[1:]
        self.counts["auth_failures"] += 1
        log.warning("bookie %s: %s did not authenticate; closing it", self.config.bookie_id, connection.name)
        if type(first) is AuthRequest:
            connection.send(AuthResponse(first.request_id, int(Code.UNAUTHORIZED)))
        else:
            connection.send(ErrorResponse(int(Code.UNAUTHORIZED), "this bookie requires authentication first"))
        connection.close("authentication failed")
        return []

    def _pump(self) -> None:
        core = self.core
        answered = set()
        while effects := core.take_effects():
            # One write per round is synced here (the first, when small): its early answers are
            # then all the core has to give (nothing else reached the core since `effects`).
            has_synced_inline = False
            for effect in effects:
                kind = type(effect)
                if kind is Send:
                    connection = self.connections.get(effect.destination)
                    if connection is not None:
                        # (Flushed below, before the loop moves on: no writer task woken.) A client
                        # that left just misses its answer.
                        connection.send(effect.message, wake_writer=False)
                        answered.add(connection)
                        self._observe_latency(effect.destination, effect.message)
                elif kind is JournalWrite:
                    if self._journal_error is not None:
                        continue            # the bookie is stopping: nothing more is written
                    # A small one, with the journal thread idle and every write it synced
                    # applied (so nothing is written or answered before it), is written and
                    # synced here and now: a thread handoff would cost as much as its
                    # fdatasync. (Also while a checkpoint writes the entry logs, when the sync
                    # may wait behind them with the loop held: handing those syncs to the
                    # thread instead doubled the p50 of adds paced at a quarter and half of the
                    # peak, bench/compare_revisions.py, 3 rounds.)
                    if (effect.size <= self._sync_inline_size_max and not self._journal.outstanding
                            and not self._durable_writes and not has_synced_inline):
                        has_synced_inline = True
                        started = time.perf_counter()
                        try:
                            self._write_and_sync([effect])
                        except Exception as exc:
                            self._on_journal_failed(exc)
                            continue
                        # Its adds' answers go out now, before their records reach the
                        # write cache; any others in the next round of this loop.
                        self._journaled_inline(effect)
                    else:
                        self._journal.submit(effect)
                else:
                    raise AssertionError(f"bookie effect {effect!r}")
        for connection in answered:
            connection.flush()
        deadline_ns = core.next_deadline_ns()
        self._timer.set(deadline_ns)
        # What the write cache holds, and what the journal is about to add to it.
        if self.stack.storage.write_cache_size + core.journal_queued_size >= self._write_cache_half_size:
            self.maintenance.on_write_cache_half_full()

    def _observe_latency(self, connection_name: str, message: object) -> None:
        """A request's time, from its arrival to its answer queued, per entry (BookKeeper's
        ADD_ENTRY_REQUEST, READ_ENTRY_REQUEST: bktransports.bookie_metrics)."""
        kind = type(message)
        if kind is AddResponse:
            key, stats, entry_count = ("add", message.request_id), self.metrics.add_requests, 1
            self.counts["add_requests"] += 1
        elif kind is AddBatchResponse:
            key, stats, entry_count = ("add", message.request_id), self.metrics.add_requests, message.count
            self.counts["add_requests"] += 1
        elif kind is ReadResponse:
            key, stats, entry_count = ("read", message.request_id), self.metrics.read_requests, 1
        elif kind is ReadBatchResponse:
            key, stats, entry_count = ("read", message.request_id), self.metrics.read_requests, len(message.bodies) or 1
        else:
            return
        started = self._request_started.get(connection_name, {}).pop(key, None)
        if started is not None:
            stats.observe(time.perf_counter() - started, is_success=message.code == _OK, count=entry_count)

    def _write_and_sync(self, writes: list[JournalWrite]) -> None:
        """Writes in order, then one fdatasync for all of them: in the journal thread, or on
        the loop for a small one. Each phase is timed; a write that rolled the journal to a new
        file or preallocated more of it is always recorded."""
        stack, metrics, clock = self.stack, self.metrics, time.perf_counter
        journal = stack.journal
        journal_id, allocated_size = journal.current_id, journal.allocated_size
        now_ms = int(time.time() * 1000)
        started = time.perf_counter()
        for write in writes:
            stack.write_journal(write, now_ms=now_ms)
        written = clock()
        stack.sync_journal(writes[-1].token)
        synced = clock()
        metrics.journal_flushes.observe(written - started)
        metrics.journal_syncs.observe(synced - written)
        stalls = self.stalls
        if journal.current_id != journal_id:
            stalls.record("journal_roll", written - started, f"to journal {journal.current_id:x}", always=True)
        elif journal.allocated_size != allocated_size:
            stalls.record("journal_prealloc", written - started, f"to {journal.allocated_size} bytes", always=True)
        else:
            stalls.record("journal_write", written - started, f"{len(writes)} groups")
        stalls.record("journal_sync", synced - written)

    def _on_journal_batch_done(self, writes: list[JournalWrite], started: float, error: BaseException | None) -> None:
        """In the loop (not a task: nothing here may raise), once the journal thread is done."""
        if error is not None:
            self._on_journal_failed(error)
        if self._journal_error is not None:
            return                  # the bookie is stopping: later writes are never answered
        is_queued = bool(self._durable_writes)       # (then its next step is queued already)
        self._durable_writes.extend(writes)
        if not is_queued:
            self._apply_durable_writes()

    def _apply_durable_writes(self) -> None:
        """Tell the core of the writes reported durable, oldest first, in slices: at most
        JOURNALED_APPLY_RECORD_COUNT_MAX records in this loop step, then the rest in a later one
        (queued behind what the loop has to do meanwhile). Each slice answers the requests whose
        records it applied. In the loop, not a task: nothing here may raise."""
        if self._journal_error is not None:
            return                  # the bookie is stopping: later writes are never answered
        core, writes = self.core, self._durable_writes
        room = JOURNALED_APPLY_RECORD_COUNT_MAX
        while writes and room > 0:
            if not core.is_applying:
                self._observe_journaled(writes[0])
                core.begin_persisted(writes[0].token)
            room -= core.apply_persisted(now_ns(), record_count_max=room)
            if not core.is_applying:
                writes.popleft()
        if writes:
            try:
                trio.lowlevel.current_trio_token().run_sync_soon(self._apply_durable_writes)
            except trio.RunFinishedError:
                writes.clear()      # the run is over: nobody waits for their answers any more
        self._pump()

    def _on_journal_failed(self, error: BaseException) -> None:
        if self._journal_error is None:
            self._journal_error = error
            self._durable_writes.clear()     # (never answered: the bookie stops)
            self._journal_broken.set()

    async def _watch_journal(self) -> None:
        """The journal is the bookie's promise: it cannot go on once a write failed."""
        try:
            await self._journal_broken.wait()
        finally:
            self._journal.close()
        error = self._journal_error
        where = f"{self.config.data_dir}/{self.config.journal.journal_dir}"
        if isinstance(error, DiskFullError):
            raise SystemExit(f"bookie {self.config.bookie_id}: journal disk full ({error}); free space "
                             f"in {where} and restart")
        raise SystemExit(f"bookie {self.config.bookie_id}: journal write failed ({error!r}); check {where} "
                         f"and restart (the journal replays what was synced)")

    def _journaled_inline(self, effect: JournalWrite) -> None:
        """Tell the core a write synced on the loop is durable, in two inputs: the adds' answers
        the first one gives are written to their connections before the second applies the
        records, so the client hears of its add while the bookie still fills its write cache.
        (A small write: it is applied in one go.)"""
        self._observe_journaled(effect)
        core = self.core
        core.answer_persisted(effect.token, now_ns())
        self._send_answers_now(core.take_effects())
        core.apply_persisted(now_ns())

    def _observe_journaled(self, effect: JournalWrite) -> None:
        """A write's adds are durable now: their time since the group began (journal_add_entries)."""
        if effect.entry_count:
            self.metrics.journal_add_entries.observe((now_ns() - effect.group_started_at_ns) / 1e9,
                                                     count=effect.entry_count)

    def _send_answers_now(self, answers: list[Send]) -> None:
        """Write answers to their connections at once (what core.answer_persisted gives)."""
        connections = set()
        for answer in answers:
            connection = self.connections.get(answer.destination)
            if connection is not None:
                connection.send(answer.message, wake_writer=False)
                connections.add(connection)
        for connection in connections:
            connection.flush()
        for answer in answers:          # (after the writes: off the answers' path)
            self._observe_latency(answer.destination, answer.message)

    def _on_timer_due(self, at_ns: int) -> None:
        self.core.on_timer(at_ns)
        self._pump()

    # -- maintenance: bktransports.bookie_maintenance runs it; the server's API stays ----------

    async def checkpoint(self, *, spread_s: float = 0.0) -> None:
        await self.maintenance.checkpoint(spread_s=spread_s)

    async def collect_garbage(self, *, is_major: bool = False, is_major_forced: bool = False,
                              is_minor_forced: bool = False) -> None:
        await self.maintenance.collect_garbage(is_major=is_major, is_major_forced=is_major_forced,
                                               is_minor_forced=is_minor_forced)

    def request_gc(self, *, is_major: bool = False, is_minor: bool = False) -> None:
        self.maintenance.request_gc(is_major=is_major, is_minor=is_minor)

    async def check_disk(self) -> None:
        await self.maintenance.check_disk()

    @property
    def gc_status(self) -> GcStatus:
        return self.maintenance.gc_status

    # -- numbers for the admin endpoint -----------------------------------------------------

    def state(self) -> dict:
        """BookKeeper's bookie state. Recovery adds are taken in readonly mode too (the core refuses
        only normal adds), so high-priority writes are available as long as the bookie runs."""
        is_running = self.stack is not None and not self.is_shutting_down
        return {"running": is_running, "readOnly": self.is_readonly, "shuttingDown": self.is_shutting_down,
                "availableForHighPriorityWrites": is_running}

    @property
    def write_cache_full_count(self) -> int:
        """Times the write cache filled and every connection stopped reading (the receive gate)."""
        return self.maintenance.receive_gate.shut_count

    async def set_readonly(self, is_readonly: bool) -> None:
        """Turn readonly (refuse normal adds, register under readonly/) or writable again."""
        self.is_readonly = is_readonly
        self.core.set_readonly(is_readonly)
        self.counts["readonly_transitions"] += 1
        log.warning("bookie %s is now %s", self.config.bookie_id, "readonly" if is_readonly else "writable")
        await self._register()

    async def _registration_loop(self) -> None:
        """Watch our own registration; if it vanishes (session expired), register again."""
        while True:
            path = self.layout.bookie_path(self.config.bookie_id, is_readonly=bool(self.is_registered_readonly))
            if self.store.session_lost:
                if self._reopen_store is None:
                    raise SystemExit(f"bookie {self.config.bookie_id}: metastore session lost; restart the bookie")
                log.warning("bookie %s: metastore session lost; registering again on a new one",
                            self.config.bookie_id)
                lost, self.store = self.store, await self._reopen_store()
                with trio.CancelScope(shield=True):
                    await lost.aclose()
                await self._register()
                continue
            result, watch = await self.store.execute_watch(Get(path))
            if result.code is MetaCode.NO_NODE:
                await self._register()
                continue
            await watch.wait()
