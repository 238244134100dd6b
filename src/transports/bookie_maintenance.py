"""BookieMaintenance: a bookie's upkeep beside serving — checkpoints, GC and compaction, disk checks.

BookieServer (bktransports.bookie_server) creates one, starts its three loops when it serves, and
keeps its own API (checkpoint, collect_garbage, request_gc, check_disk) by delegating here. What
runs where:
- checkpoints (entry logs flushed, index committed, LastLogMark, old journals deleted) run every
  flush_interval_s, paced over checkpoint_completion_target of it (bktransports.checkpoint_pacer),
  their writes in worker threads (see BookieStack's checkpoint steps), and at once, not paced,
  when the write cache holds half of write_cache_size_max (dbStorage_writeCacheMaxSizeMb: the
  server's pump notices and calls on_write_cache_half_full); if it fills while the other half is
  still being flushed, every connection stops reading (the receive_gate here) until that
  checkpoint is done, so memory stays bounded and the clients are slowed by TCP (BookKeeper's
  DbLedgerStorage throttles its adding threads the same way). Old journals are deleted in the
  journal's thread, in order with its writes;
- GC walks the metastore in a worker thread and deletes in the loop; compaction follows GC;
  a round runs every gc_wait_time_s, and at once when request_gc asks (the admin endpoint),
  its compaction major or minor unless an operator has suspended that kind (bookie_gc_status);
  a checkpoint and a compaction never run at once (the storage lock);
- the disk monitor turns the bookie readonly or writable again when usage crosses the marks, and
  readonly when a checkpoint or a compaction finds the ledger disk full (BookieServer.set_readonly,
  which registers it again).

It reads its server's stack, stall recorder and metastore at each use, never keeps them: the
stack starts and the loop's recorder is taken when the server serves, and a lost metastore
session is replaced by a new one.
"""

from __future__ import annotations

import functools
import logging
import time

import trio

from bkcore.bookie.compaction import Compactor
from bkcore.bookie.durable_storage import unpaced
from bkcore.bookie.fs import DiskFullError
from bkcore.bookie.gc import find_garbage
from bktransports.bookie_gc_status import GcStatus
from bktransports.checkpoint_pacer import CheckpointPacer
from bktransports.connection import ReceiveGate
from bktransports.metadata_walk import blocking_children_lister
from bktransports.worker_thread import WorkerThread

log = logging.getLogger("bk.bookie")


class BookieMaintenance:
    """Checkpoints, GC rounds and disk checks of one BookieServer. Its loops (checkpoint_loop,
    gc_loop, disk_loop) run in the server's nursery; checkpoint(), collect_garbage(),
    request_gc() and check_disk() may also be called on their own (the admin endpoint, tests,
    shutdown)."""

    # `server` is the BookieServer it maintains, unannotated as in bookie_metrics and
    # http_admin_api: that module imports this one, and a cycle is not allowed (test_purity).
    def __init__(self, server, *, journal: WorkerThread) -> None:
        self._server = server                   # read at each use (its stack, stalls, store change)
        self._config = server.config
        self._journal = journal                 # the server's journal thread: old journals go there
        self._storage_lock = trio.Lock()        # checkpoints vs. compaction (entry logs, index)
        self.is_flushing_cache = False          # a checkpoint holds the other half of the cache
        self._checkpoint_wanted = trio.Event()  # the write cache is half full: do not wait
        self.checkpoint_pacer: CheckpointPacer | None = None     # of the paced checkpoint running
        self.receive_gate = ReceiveGate()       # shut: no connection reads (the cache is full)
        self._receive_gate_shut_at = 0.0
        self.gc_status = GcStatus()
        self._gc_wanted = trio.Event()          # a GC round is asked for now (request_gc)

    # -- checkpoints ------------------------------------------------------------------------

    async def checkpoint(self, *, spread_s: float = 0.0) -> None:
        """Storage first, then the LastLogMark: the slow writes run in worker threads while the
        loop keeps serving; one checkpoint or compaction at a time (the storage lock). With
        spread_s, the entry-log writes are paced to end about that long after they start
        (CheckpointPacer), unless the checkpoint is hurried meanwhile. One asked for without
        (the write cache half full, GC, the admin endpoint, shutdown) hurries a paced one that
        holds the storage lock, rather than wait for its spread to end."""
        server = self._server
        if not spread_s:
            self.hurry_checkpoint()
        async with self._storage_lock:
            stack, stalls = server.stack, server.stalls
            started = time.perf_counter()
            pacer = self.checkpoint_pacer = (CheckpointPacer(spread_s)
                                             if spread_s > 0 and not server.is_shutting_down else None)
            with stalls.timed("checkpoint_begin"):
                mark, plan = stack.begin_checkpoint()
            entry_count = len(plan.cache)           # (the cache is emptied as it is released)
            self.is_flushing_cache = True       # the cache taken is still in memory until freed
            if self.receive_gate.is_shut:
                stalls.record("write_cache_full", time.perf_counter() - self._receive_gate_shut_at,
                              "reading paused until a checkpoint took the full cache", always=True)
            self.receive_gate.open()            # the cache new adds go to is empty
            try:
                try:
                    await trio.to_thread.run_sync(functools.partial(
                        stack.write_checkpoint, plan, timed=stalls.timed_always, pace=pacer or unpaced))
                except DiskFullError:
                    stack.abort_checkpoint(plan)    # back to memory; the mark stays where it was
                    await self._on_ledger_disk_full()
                    return
                with stalls.timed("checkpoint_finish"):
                    # In steps, the loop serving between them: filling the read cache with the
                    # newest entries held it for 2-10 ms in one go.
                    for _ in stack.finish_checkpoint_steps(plan):
                        await trio.sleep(0)
                # The flushed entries are freed in the worker, a slice at a time (it yields the
                # GIL every switch interval), not all at once on the loop: ms per 20,000 entries.
                await trio.to_thread.run_sync(plan.cache.release_gradually)
            finally:
                self.is_flushing_cache = False
                self.checkpoint_pacer = None
            # The mark's fsyncs (temp file, directory) may run beside journal writes; deleting
            # old journals may not (a roll lists the directory), so it runs in the journal's
            # thread, in order with the writes.
            await trio.to_thread.run_sync(stack.write_last_mark, mark)
            await self._journal.run(stack.delete_old_journals, mark)
            took = time.perf_counter() - started
            server.metrics.checkpoints.observe(took)
            paced = f", paced {pacer.waited_s * 1e3:.0f} ms of it" if pacer is not None else ""
            stalls.record("checkpoint", took, f"{entry_count} entries{paced}", always=True)
        server.counts["checkpoints"] += 1

    def hurry_checkpoint(self) -> None:
        """End the pacing of the checkpoint running, if it is paced (from the loop)."""
        if self.checkpoint_pacer is not None:
            self.checkpoint_pacer.hurry()

    def on_write_cache_half_full(self) -> None:
        """Checkpoint now; and if the other half is still being flushed, the cache is full:
        stop reading from every connection until that checkpoint has taken this half. (The
        adds already received still reach the cache once journaled: the journal's own limits
        bound them, journal_queue_size_max and pending_adds_count_max.)"""
        self._checkpoint_wanted.set()
        self.hurry_checkpoint()
        if self.is_flushing_cache and not self.receive_gate.is_shut:
            self.receive_gate.shut()
            self._receive_gate_shut_at = time.perf_counter()
            log.info("bookie %s: write cache full (%d bytes); reading paused until the checkpoint is done",
                     self._config.bookie_id, self._server.stack.storage.write_cache_size)

    async def checkpoint_loop(self) -> None:
        """A checkpoint every flush_interval_s from the start of the last, paced over
        checkpoint_completion_target of it; one at once, not paced, when the write cache is
        half full (_checkpoint_wanted)."""
        interval_s = self._config.flush_interval_s
        due_at = trio.current_time() + interval_s
        while True:
            with trio.move_on_at(due_at) as waiting:
                await self._checkpoint_wanted.wait()
            self._checkpoint_wanted = trio.Event()     # a wish made during this one: the next
            is_periodic = waiting.cancelled_caught
            due_at = trio.current_time() + interval_s
            spread_s = self._config.checkpoint_completion_target * interval_s if is_periodic else 0.0
            await self.checkpoint(spread_s=spread_s)

    # -- GC and compaction ------------------------------------------------------------------

    async def collect_garbage(self, *, is_major: bool = False, is_major_forced: bool = False,
                              is_minor_forced: bool = False) -> None:
        """One GC round (deleted ledgers), then compaction of sparse entry logs: major when
        is_major and not suspended, else minor unless suspended (GcStatus.compaction_kind)."""
        kind = self.gc_status.compaction_kind(is_major_due=is_major, is_major_forced=is_major_forced,
                                              is_minor_forced=is_minor_forced)
        self.gc_status.running = kind or "gc"
        started = time.perf_counter()
        is_done = False
        try:
            await self._collect_garbage(kind)
            is_done = True
        finally:
            self.gc_status.running = ""
            self._server.metrics.gc_rounds.observe(time.perf_counter() - started, is_success=is_done)

    async def _collect_garbage(self, kind: str | None) -> None:
        server = self._server
        storage = server.stack.storage
        list_children = blocking_children_lister(server.store)
        held = storage.ledger_ids()
        report = await trio.to_thread.run_sync(find_garbage, held, server.layout, list_children)
        for ledger_id in report.deleted_ledger_ids:
            storage.delete_ledger(ledger_id)
        server.counts["gc_rounds"] += 1
        server.counts["ledgers_collected"] += len(report.deleted_ledger_ids)
        if report.deleted_ledger_ids:
            log.info("bookie %s: GC deleted ledgers %s", self._config.bookie_id, list(report.deleted_ledger_ids))
            await self.checkpoint()
        if kind is None:
            return                              # (both kinds suspended)
        config = self._config.compaction
        threshold = config.major_compaction_threshold if kind == "major" else config.minor_compaction_threshold
        self.hurry_checkpoint()                 # (compaction waits for the storage lock it holds)
        async with self._storage_lock:
            try:
                with server.stalls.timed("compaction", kind, always=True):
                    compaction = Compactor(storage=storage, config=config).run(threshold=threshold)
            except DiskFullError:
                await self._on_ledger_disk_full()
                return
        server.counts["bytes_compacted"] += compaction.bytes_reclaimed
        status, now_ms = self.gc_status, int(time.time() * 1000)
        if kind == "major":
            status.major_count, status.last_major_ms = status.major_count + 1, now_ms
        else:
            status.minor_count, status.last_minor_ms = status.minor_count + 1, now_ms

    def request_gc(self, *, is_major: bool = False, is_minor: bool = False) -> None:
        """Run a GC round now, or right after the one running: a major one if asked (is_major),
        that kind even while suspended when asked for explicitly (is_major, is_minor)."""
        self.gc_status.is_force_wanted = True
        self.gc_status.is_force_major |= is_major
        self.gc_status.is_force_minor |= is_minor
        self._gc_wanted.set()

    async def gc_loop(self) -> None:
        """A round every gc_wait_time_s (major once major_compaction_interval_s has passed), and
        one whenever request_gc asks."""
        last_major = trio.current_time()
        status = self.gc_status
        while True:
            with trio.move_on_after(self._config.gc_wait_time_s):
                await self._gc_wanted.wait()
            is_forced, self._gc_wanted = self._gc_wanted.is_set(), trio.Event()
            is_major_forced = is_minor_forced = False
            if is_forced:
                is_major_forced, is_minor_forced = status.is_force_major, status.is_force_minor
                status.is_force_major = status.is_force_minor = False
                is_major = is_major_forced
            else:
                is_major = trio.current_time() - last_major >= self._config.major_compaction_interval_s
            if is_major:
                last_major = trio.current_time()
            status.is_running_forced = is_forced
            try:
                await self.collect_garbage(is_major=is_major, is_major_forced=is_major_forced,
                                           is_minor_forced=is_minor_forced)
            except ConnectionError as exc:
                log.warning("bookie %s: %s; GC tries again next round", self._config.bookie_id, exc)
            finally:
                status.is_running_forced = False
                if is_forced:
                    status.is_force_wanted = self._gc_wanted.is_set()     # (asked again meanwhile)

    # -- disk usage -------------------------------------------------------------------------

    async def _on_ledger_disk_full(self) -> None:
        if self._server.monitor.on_disk_full():
            await self._server.set_readonly(True)

    async def check_disk(self) -> None:
        used, total = self._server.fs.usage()
        change = self._server.monitor.observe(used_size=used, total_size=total)
        if change is not None:
            await self._server.set_readonly(change)

    async def disk_loop(self) -> None:
        while True:
            await self.check_disk()
            await trio.sleep(self._config.disk_check_interval_s)
