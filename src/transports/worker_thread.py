"""WorkerThread: one long-lived thread that runs a trio task's blocking calls, one at a time.

For a call made many times a second from one task (a bookie's journal group: write, then
fdatasync), trio.to_thread.run_sync costs more than it needs to: a capacity limiter, a copied
context, the thread's name set and reset (two syscalls), and a round of checkpoints, per call.
Here a call is a job on a queue that one thread takes in order, and its outcome comes back to
the waiting task through the trio token: one wakeup each way.

Like trio.to_thread.run_sync by default, a call cannot be abandoned: a task cancelled while
its call runs waits for it to finish and gets its result (the cancellation comes at the task's
next checkpoint). Exceptions raised by the call are raised in the task. The thread starts with
the first call and ends at close().
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, TypeVar

import outcome
import trio

T = TypeVar("T")


class WorkerThread:
    def __init__(self, name: str) -> None:
        self.name = name
        # Unbounded as a type, but each task waits for its call: at most one job per task
        # that uses this worker (the bookie: its journal loop) is ever queued.
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.call_count = 0

    async def run(self, fn: Callable[..., T], *args) -> T:
        """fn(*args) in the worker thread; its result, or its exception raised here."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
            self._thread.start()
        await trio.lowlevel.checkpoint_if_cancelled()
        token = trio.lowlevel.current_trio_token()
        task = trio.lowlevel.current_task()
        self.call_count += 1
        self._jobs.put((fn, args, token, task))
        # A blocking call cannot be interrupted: cancellation waits for its outcome.
        return await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, args, token, task = job
            result = outcome.capture(fn, *args)
            try:
                token.run_sync_soon(trio.lowlevel.reschedule, task, result)
            except trio.RunFinishedError:
                pass                        # the trio run is over: nobody waits any more
            del job, fn, args, task, result   # nothing of a finished call outlives it here

    def close(self) -> None:
        """Let the thread end after the calls queued so far (none is waiting after serve())."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread = None
