"""Calls from another thread into a trio loop, many calls per wakeup of the loop: the handoffs
`bk bench table --ceiling` measures (bkbench.table_ceiling's sync_bridge and aio_bridge kinds).

The stream-storage server handed every gRPC call over to trio like this, from grpc.server's
handler threads and then from grpc.aio's asyncio thread, until it served gRPC from trio itself
(bktransports.grpc_trio): the handoff cost as much CPU as gRPC's own work. These kinds keep that
cost measured beside the server that does without it.

TrioBridge: trio.from_thread.run costs, for every call, a wakeup of the loop (a write to its
wakeup socket and a round of epoll), a system task, a context copy and a queue. Here the calls
of all threads gather in one deque, and the loop is woken once for all the calls that arrived
since it last looked. Each call runs as a system task of its own; the calling thread waits on
a lock that the task releases.

AsyncioBridge is the same crossing for coroutines of an asyncio loop in another thread (the
grpc.aio server's): no thread waits at all; the answers of the calls that finished since the
asyncio loop last looked go back with one wakeup of that loop.
"""

from __future__ import annotations

import collections
import threading

import outcome
import trio


class _Call:
    """One call from another thread: the function, and what to tell of its outcome (called in
    the loop)."""

    __slots__ = ("fn", "args", "is_async", "notify")

    def __init__(self, fn, args: tuple, *, is_async: bool, notify) -> None:
        self.fn, self.args, self.is_async, self.notify = fn, args, is_async, notify

    async def run_async(self) -> None:
        self.notify(await outcome.acapture(self.fn, *self.args))

    def run_sync(self) -> None:
        self.notify(outcome.capture(self.fn, *self.args))


class _Waiter:
    """A thread blocked until the outcome of its call is known."""

    __slots__ = ("result", "_done")

    def __init__(self) -> None:
        self.result: outcome.Outcome | None = None
        self._done = threading.Lock()
        self._done.acquire()           # held until the outcome is set

    def __call__(self, result: outcome.Outcome) -> None:
        self.result = result
        self._done.release()

    def wait(self):
        self._done.acquire()
        return self.result.unwrap()


class TrioBridge:
    """run(afn, *args) / run_sync(fn, *args) from any thread but the loop's: the result, or
    the exception, of running it in the trio loop of `token`. Raises trio.RunFinishedError
    once that loop has ended."""

    def __init__(self, token: trio.lowlevel.TrioToken) -> None:
        self.token = token
        # Calls not yet taken by the loop. Its length is bounded by the calling threads: each
        # thread has at most one call here and waits for it (gRPC's handler pool is bounded).
        self._calls: collections.deque[_Call] = collections.deque()
        # True from the moment a thread asks the loop to drain until that drain starts: while it
        # is, a call appended to _calls will be taken without asking again.
        self._is_drain_scheduled = False

    def run(self, afn, *args):
        waiter = _Waiter()
        self._submit(_Call(afn, args, is_async=True, notify=waiter))
        return waiter.wait()

    def run_sync(self, fn, *args):
        waiter = _Waiter()
        self._submit(_Call(fn, args, is_async=False, notify=waiter))
        return waiter.wait()

    def start(self, afn, *args, on_done) -> None:
        """Run afn(*args) in the loop without waiting: on_done(outcome) is called in the loop
        once it has finished (or at once in this thread, with RunFinishedError, if the loop has
        ended)."""
        self._submit(_Call(afn, args, is_async=True, notify=on_done))

    def _submit(self, call: _Call) -> None:
        # Append first, look at the flag second; the drain clears the flag before it takes calls.
        # So either the drain that is scheduled takes this call, or this thread schedules one.
        self._calls.append(call)
        if not self._is_drain_scheduled:
            self._is_drain_scheduled = True
            try:
                self.token.run_sync_soon(self._drain)
            except trio.RunFinishedError as exc:
                self._is_drain_scheduled = False
                self._fail_waiting(exc)

    def _drain(self) -> None:
        """In the loop: start every call that has arrived."""
        self._is_drain_scheduled = False
        calls = self._calls
        while calls:
            call = calls.popleft()
            if not call.is_async:
                call.run_sync()
                continue
            try:
                trio.lowlevel.spawn_system_task(call.run_async, name=call.fn)
            except RuntimeError:       # the run is ending: its system nursery is closed
                call.notify(outcome.Error(trio.RunFinishedError("the trio loop is ending")))

    def _fail_waiting(self, error: BaseException) -> None:
        while self._calls:
            self._calls.popleft().notify(outcome.Error(error))



class AsyncioBridge:
    """`await call(afn, *args)` in a coroutine of the asyncio loop `loop`: the result, or the
    exception, of running afn(*args) in the trio loop of `trio_bridge`."""

    def __init__(self, trio_bridge: TrioBridge, loop) -> None:
        self._trio_bridge = trio_bridge
        self._loop = loop
        # (asyncio future, outcome) of calls that finished, not yet handed to their futures.
        # Bounded by the calls in flight, which the gRPC server bounds (one per open call).
        self._answers: collections.deque = collections.deque()
        # True from the moment the trio side asks the asyncio loop to drain until that drain
        # starts (the same protocol as TrioBridge._is_drain_scheduled).
        self._is_drain_scheduled = False

    async def call(self, afn, *args):
        future = self._loop.create_future()
        self._trio_bridge.start(afn, *args, on_done=lambda result: self._answer(future, result))
        return (await future).unwrap()

    def _answer(self, future, result: outcome.Outcome) -> None:
        """In the trio loop (or, once it has ended, in the caller's thread). The asyncio loop is
        woken once the trio loop has done what it had to do now (run_sync_soon: its next
        round), so the answers that round produces, from every call it settles, go over in
        one wakeup of the asyncio loop rather than in several."""
        self._answers.append((future, result))
        if not self._is_drain_scheduled:
            self._is_drain_scheduled = True
            try:
                self._trio_bridge.token.run_sync_soon(self._wake_asyncio_loop)
            except trio.RunFinishedError:
                self._wake_asyncio_loop()

    def _wake_asyncio_loop(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:         # the asyncio loop is closed: nobody waits any more
            self._is_drain_scheduled = False

    def _drain(self) -> None:
        """In the asyncio loop: settle every call that has finished."""
        self._is_drain_scheduled = False
        answers = self._answers
        while answers:
            future, result = answers.popleft()
            if not future.cancelled():     # (the gRPC call was cancelled meanwhile)
                future.set_result(result)
