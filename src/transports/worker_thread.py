"""WorkerThread: one long-lived thread that does a trio program's blocking work in order —
calls a task waits for, and items it hands over without waiting, handled in batches.

For work done many times a second from the event loop (a bookie's journal: write, then
fdatasync), trio.to_thread.run_sync costs more than it needs to: a capacity limiter, a copied
context, the thread's name set and reset (two syscalls), and a round of checkpoints, per call.
Here each piece of work is a job on a queue that one thread takes in order.

Two kinds of job share the queue, so they never overlap and keep their order:
- run(fn, *args): a task waits for fn(*args) and gets its result or its exception. Like
  trio.to_thread.run_sync by default, a call cannot be abandoned: a task cancelled while its
  call runs waits for it and gets its result (the cancellation comes at its next checkpoint).
- submit(item): the loop hands over an item and goes on. When the thread gets to an item it
  takes every item queued right behind it too, calls handle_batch(items) once for all of them,
  and then on_batch_done(items, started, error) runs in the trio thread (through the trio
  token, not in a task: it must not raise), with error whatever handle_batch raised. Items
  queued while a batch is being handled make the next batch the moment it ends, without
  waiting for the loop to hear about the last one.

outstanding counts the jobs submitted or run and not yet reported back to the trio thread;
while it is 0 the thread is idle. The thread starts with the first job and ends at close().
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Callable, TypeVar

import outcome
import trio

T = TypeVar("T")


class _Call:
    __slots__ = ("fn", "args", "task")

    def __init__(self, fn: Callable, args: tuple, task: trio.lowlevel.Task) -> None:
        self.fn, self.args, self.task = fn, args, task


_CLOSE = object()


class WorkerThread:
    def __init__(self, name: str, *,
                 handle_batch: Callable[[list], None] | None = None,
                 on_batch_done: Callable[[list, float, BaseException | None], None] | None = None) -> None:
        self.name = name
        self._handle_batch = handle_batch
        self._on_batch_done = on_batch_done
        # Unbounded as a type; its users bound it (a task waits for each call; the bookie core
        # has at most journal_writes_in_flight_max writes out).
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self.outstanding = 0
        self.call_count = 0
        self.batch_count = 0

    def _start(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
        self._thread.start()

    async def run(self, fn: Callable[..., T], *args) -> T:
        """fn(*args) in the worker thread, after the jobs queued before it; its result, or its
        exception raised here."""
        if self._thread is None:
            self._start()
        await trio.lowlevel.checkpoint_if_cancelled()
        self.call_count += 1
        self.outstanding += 1
        self._jobs.put(_Call(fn, args, trio.lowlevel.current_task()))
        # A blocking call cannot be interrupted: cancellation waits for its outcome.
        try:
            return await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)
        finally:
            self.outstanding -= 1

    def submit(self, item: object) -> None:
        """Queue an item for handle_batch (from the trio thread; never blocks)."""
        if self._thread is None:
            self._start()
        self.outstanding += 1
        self._jobs.put(item)

    def _work(self) -> None:
        jobs = self._jobs
        job = jobs.get()
        while job is not _CLOSE:
            if type(job) is _Call:
                result = outcome.capture(job.fn, *job.args)
                self._report(trio.lowlevel.reschedule, job.task, result)
                del job, result          # nothing of a finished call outlives it here
                job = jobs.get()
                continue
            batch = [job]
            try:
                while type(job := jobs.get_nowait()) is not _Call and job is not _CLOSE:
                    batch.append(job)
            except queue.Empty:
                job = None
            started = time.perf_counter()
            try:
                self._handle_batch(batch)
                error = None
            except BaseException as exc:      # reported to the loop, which decides
                error = exc
            self._report(self._batch_done, batch, started, error)
            del batch, error
            if job is None:
                job = jobs.get()

    def _report(self, callback: Callable, *args) -> None:
        try:
            self._token.run_sync_soon(callback, *args)
        except trio.RunFinishedError:
            pass                        # the trio run is over: nobody waits any more

    def _batch_done(self, batch: list, started: float, error: BaseException | None) -> None:
        self.outstanding -= len(batch)
        self.batch_count += 1
        self._on_batch_done(batch, started, error)

    def close(self) -> None:
        """Let the thread end after the jobs queued so far."""
        if self._thread is not None:
            self._jobs.put(_CLOSE)
            self._thread = None
