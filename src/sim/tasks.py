"""SimRuntime: the async runtime of one simulated process, deterministic.

The stream and table layers are async code written against the small runtime that
bkcore.runtime describes (a subset of trio's API: tasks in nurseries, cancel scopes, events,
locks, bounded channels, sleep, clocks). Real processes get trio itself
(bktransports.trio_runtime); a simulated process gets this, run on the simulator's EventLoop:

- A task is a coroutine stepped by the loop. An await of the runtime yields a `register`
  function to the stepper, which parks the task with it (register(task) files the task where
  it waits and returns its abort function) unless the task is cancelled already.
- Tasks woken in the same instant run as one batch, in an order drawn from the process's seeded
  generator (trio runs a batch in an order of its own too), so seeds explore interleavings.
- Cancellation follows trio: a scope's cancel() throws Cancelled into every task parked inside
  it (no shield in between) and into others at their next await; a scope swallows Cancelled
  on exit when it was cancelled itself and no cancelled scope outside it is visible; a
  nursery waits for its children, cancels them all when one fails, and raises what failed as
  a BaseExceptionGroup (trio's strict exception groups).
- A paused process runs nothing until it resumes (`paused_until_ns`); its timers fire late.
- stop() is a crash: the process's coroutines are closed at once, in the order they were
  made, and any await they still reach raises ProcessStopped, so no code of a dead process
  reaches the world again (and none is left for the garbage collector to finish later, at a
  moment no seed controls).
- Clocks: monotonic_s() is virtual time; wall_time_s() adds the process's clock offset, so
  seeds can give processes skewed wall clocks.

An error that escapes a task started with spawn_system_task (no nursery above it) is a bug of
the simulated program: it is raised out of the event loop and fails the run.
"""

from __future__ import annotations

import collections
import functools
import math
import random
import types
from typing import Any, Callable

from bksim.loop import EventLoop


# Task steps a process may run without virtual time moving before the run fails as a busy loop.
STEPS_WITHOUT_TIME_MAX = 200_000


class Cancelled(BaseException):
    """The task's cancel scope was cancelled (trio.Cancelled)."""


class ProcessStopped(BaseException):
    """The simulated process crashed or stopped: nothing of it runs any more."""


class WouldBlock(Exception):
    pass


class EndOfChannel(Exception):
    pass


class BrokenResourceError(Exception):
    pass


class ClosedResourceError(Exception):
    pass


class TooSlowError(Exception):
    pass


def finish_async_generator_quietly(agen) -> None:
    """The finalizer of async generators the simulator's tasks leave unfinished (a crashed
    process's `async with` context managers: CPython 3.11 does not close the async generator a
    closed coroutine was awaiting). Its cleanup runs at once, in a process whose awaits all
    raise, and whatever it raises is dropped, instead of being printed when the collector
    gets to it."""
    closing = agen.aclose()
    try:
        closing.send(None)
    except BaseException:       # noqa: BLE001 - a dead process's cleanup ends however it ends
        pass
    finally:
        closing.close()


@types.coroutine
def _yield_register(register: Callable) -> Any:
    return (yield register)


class _Task:
    __slots__ = ("runtime", "coro", "name", "scopes", "abort", "is_done", "on_done")

    def __init__(self, runtime: SimRuntime, coro, name: str, scopes: list, on_done: Callable | None) -> None:
        self.runtime = runtime
        self.coro = coro
        self.name = name
        # The cancel scopes this task runs inside, outermost first (shared with its nursery's
        # parent up to the nursery's own scope).
        self.scopes = scopes
        # While parked: the function that takes it out of what it waits for; returns whether
        # the task should then be woken with Cancelled. None while ready or running.
        self.abort: Callable[[], bool] | None = None
        self.is_done = False
        self.on_done = on_done


class _PauseHolder:
    __slots__ = ("paused_until_ns",)

    def __init__(self) -> None:
        self.paused_until_ns = 0


class _TaskStatusIgnored:
    def started(self, value: object = None) -> None:
        pass


TASK_STATUS_IGNORED = _TaskStatusIgnored()


class SimRuntime:
    """Inputs from the world: spawn_system_task(), pause (paused_until_ns), stop()."""

    Cancelled = Cancelled
    WouldBlock = WouldBlock
    EndOfChannel = EndOfChannel
    BrokenResourceError = BrokenResourceError
    ClosedResourceError = ClosedResourceError
    TooSlowError = TooSlowError
    TASK_STATUS_IGNORED = TASK_STATUS_IGNORED

    def __init__(self, *, loop: EventLoop, rng: random.Random, name: str, clock_offset_ns: int = 0,
                 pause_source: object | None = None) -> None:
        self.name = name
        self._loop = loop
        self._rng = rng
        self.clock_offset_ns = clock_offset_ns
        # Whatever holds the process's pause (its node in the world, whose paused_until_ns the
        # world's faults set), so that pausing the node pauses these tasks too.
        self._pause_source = pause_source if pause_source is not None else _PauseHolder()
        self.is_stopped = False
        self.current_task: _Task | None = None
        # Every live task, in the order made (cancellation and stop() walk it in that order).
        self._tasks: dict[_Task, None] = {}
        self._ready: list[tuple[_Task, object, BaseException | None]] = []
        self._is_batch_posted = False
        self._task_count = 0
        # Task steps run at the virtual instant _steps_at_ns (a busy loop never lets time pass).
        self._steps_at_ns = -1
        self._steps_count = 0

    @property
    def paused_until_ns(self) -> int:
        return self._pause_source.paused_until_ns

    @paused_until_ns.setter
    def paused_until_ns(self, value: int) -> None:
        self._pause_source.paused_until_ns = value

    # -- clocks -------------------------------------------------------------------------------

    def monotonic_s(self) -> float:
        return self._loop.now_ns / 1e9

    def wall_time_s(self) -> float:
        return (self._loop.now_ns + self.clock_offset_ns) / 1e9

    def thread_lock(self):
        """A lock for reads from other threads; a simulated process has none."""
        return _NoThreadLock()

    # -- tasks --------------------------------------------------------------------------------

    def spawn_system_task(self, fn: Callable, *args, name: str = "") -> None:
        """Start a task outside any nursery; an error escaping it fails the run."""
        self._spawn(fn(*args), name or getattr(fn, "__name__", "task"), [], on_done=self._system_task_done)

    def _system_task_done(self, task: _Task, result: object, error: BaseException | None) -> None:
        if error is not None and not isinstance(error, (Cancelled, ProcessStopped)):
            raise error

    def _spawn(self, coro, name: str, scopes: list, on_done: Callable | None) -> _Task:
        if self.is_stopped:
            coro.close()
            raise ProcessStopped(f"{self.name} is stopped")
        self._task_count += 1
        task = _Task(self, coro, f"{name}#{self._task_count}", scopes, on_done)
        self._tasks[task] = None
        self._reschedule(task)
        return task

    def _reschedule(self, task: _Task, value: object = None, error: BaseException | None = None) -> None:
        if self.is_stopped or task.is_done:
            return
        task.abort = None
        self._ready.append((task, value, error))
        if not self._is_batch_posted:
            self._is_batch_posted = True
            loop = self._loop
            loop.post_at(max(loop.now_ns, self.paused_until_ns), self._run_batch)

    def _run_batch(self) -> None:
        self._is_batch_posted = False
        if self.is_stopped or not self._ready:
            return
        now_ns = self._loop.now_ns
        if self.paused_until_ns > now_ns:
            self._is_batch_posted = True
            self._loop.post_at(self.paused_until_ns, self._run_batch)
            return
        batch, self._ready = self._ready, []
        if now_ns == self._steps_at_ns:
            self._steps_count += len(batch)
            if self._steps_count > STEPS_WITHOUT_TIME_MAX:
                raise AssertionError(f"{self.name}: its tasks ran {self._steps_count} steps at "
                                     f"{now_ns / 1e9:.6f}s without time passing (a busy loop)")
        else:
            self._steps_at_ns, self._steps_count = now_ns, len(batch)
        if len(batch) > 1:
            self._rng.shuffle(batch)
        for task, value, error in batch:
            if not self.is_stopped:
                self._step(task, value, error)

    def _step(self, task: _Task, value: object, error: BaseException | None) -> None:
        if task.is_done:
            return
        self.current_task = task
        try:
            if error is None:
                register = task.coro.send(value)
            else:
                register = task.coro.throw(error)
        except StopIteration as stop:
            self._finish(task, stop.value, None)
        except BaseException as exc:        # noqa: BLE001 - the task's outcome, handed to its owner
            self._finish(task, None, exc)
        else:
            abort = register(task)
            if abort is not None and self.is_effectively_cancelled(task):
                if abort():
                    self._reschedule(task, error=Cancelled())
            else:
                task.abort = abort
        finally:
            self.current_task = None

    def _finish(self, task: _Task, result: object, error: BaseException | None) -> None:
        task.is_done = True
        task.abort = None
        self._tasks.pop(task, None)
        if task.on_done is not None:
            task.on_done(task, result, error)

    def stop(self) -> None:
        """The process crashed: close every coroutine now, in the order they were made."""
        if self.is_stopped:
            return
        self.is_stopped = True
        self._ready.clear()
        for task in list(self._tasks):
            task.is_done = True
            abort, task.abort = task.abort, None
            if abort is not None:
                abort()
            self.current_task = task
            try:
                task.coro.close()
            except BaseException:       # noqa: BLE001 - a dead process's code ends however it ends
                pass
            finally:
                self.current_task = None
        self._tasks.clear()

    @property
    def task_count(self) -> int:
        return len(self._tasks)

    # -- parking ------------------------------------------------------------------------------

    async def _park(self, register: Callable) -> Any:
        if self.is_stopped:
            raise ProcessStopped(f"{self.name} is stopped")
        return await _yield_register(register)

    def _raise_if_cancelled(self) -> None:
        if self.is_stopped:
            raise ProcessStopped(f"{self.name} is stopped")
        task = self.current_task
        if task is not None and self.is_effectively_cancelled(task):
            raise Cancelled()

    async def checkpoint(self) -> None:
        """Take a pending cancellation, and let every other ready task run first."""
        self._raise_if_cancelled()
        await self._park(self._register_ready)

    def _register_ready(self, task: _Task) -> None:
        self._reschedule(task)
        return None

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await self.checkpoint()
            return
        delay_ns = int(seconds * 1e9) if seconds != math.inf else None
        await self._park(functools.partial(self._register_sleep, delay_ns))

    async def sleep_forever(self) -> None:
        await self._park(functools.partial(self._register_sleep, None))

    def _register_sleep(self, delay_ns: int | None, task: _Task) -> Callable[[], bool]:
        if delay_ns is None:
            return lambda: True
        handle = self._loop.call_later(delay_ns, self._reschedule, task)
        loop = self._loop

        def abort() -> bool:
            loop.cancel(handle)
            return True
        return abort

    # -- cancellation -------------------------------------------------------------------------

    def is_effectively_cancelled(self, task: _Task) -> bool:
        for scope in reversed(task.scopes):
            if scope.cancel_called:
                return True
            if scope.shield:
                return False
        return False

    def _deliver_cancel(self, scope: SimCancelScope) -> None:
        for task in list(self._tasks):
            abort = task.abort
            if abort is not None and scope in task.scopes and self.is_effectively_cancelled(task):
                task.abort = None
                if abort():
                    self._reschedule(task, error=Cancelled())

    def CancelScope(self, *, shield: bool = False, deadline: float = math.inf) -> SimCancelScope:  # noqa: N802 - trio's name
        return SimCancelScope(self, shield=shield, deadline=deadline)

    def move_on_after(self, seconds: float) -> SimCancelScope:
        return SimCancelScope(self, deadline=self.monotonic_s() + seconds)

    def fail_after(self, seconds: float) -> _FailAfter:
        return _FailAfter(SimCancelScope(self, deadline=self.monotonic_s() + seconds))

    def current_time(self) -> float:
        return self.monotonic_s()

    # -- synchronisation ----------------------------------------------------------------------

    def open_nursery(self) -> SimNursery:
        return SimNursery(self)

    def Event(self) -> SimEvent:  # noqa: N802 - trio's name
        return SimEvent(self)

    def Lock(self) -> SimLock:  # noqa: N802 - trio's name
        return SimLock(self)

    def open_memory_channel(self, max_buffer_size: int | float) -> tuple[SimSendChannel, SimReceiveChannel]:
        assert max_buffer_size >= 0
        state = _ChannelState(self, max_buffer_size)
        return SimSendChannel(state), SimReceiveChannel(state)


class _NoThreadLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info) -> None:
        return None


class SimCancelScope:
    def __init__(self, runtime: SimRuntime, *, shield: bool = False, deadline: float = math.inf) -> None:
        self._runtime = runtime
        self.shield = shield
        self.deadline = deadline
        self.cancel_called = False
        self.cancelled_caught = False
        self._task: _Task | None = None
        self._timer = None

    def __enter__(self) -> SimCancelScope:
        runtime = self._runtime
        task = runtime.current_task
        assert task is not None, "a cancel scope is entered inside a task"
        assert self._task is None, "a cancel scope is entered once"
        self._task = task
        task.scopes.append(self)
        if self.deadline != math.inf and not self.cancel_called:
            loop = runtime._loop
            at_ns = max(loop.now_ns, int(self.deadline * 1e9))
            self._timer = loop.call_at(at_ns, self.cancel)
        return self

    def __exit__(self, exc_type, exc, traceback) -> bool:
        scopes = self._task.scopes
        assert scopes and scopes[-1] is self, "cancel scopes are exited in the order entered"
        scopes.pop()
        if self._timer is not None:
            self._runtime._loop.cancel(self._timer)
            self._timer = None
        if exc is None or not self.cancel_called or self._outer_cancel_is_visible(scopes):
            return False
        if isinstance(exc, Cancelled):
            self.cancelled_caught = True
            return True
        if isinstance(exc, BaseExceptionGroup):
            matched, rest = exc.split(Cancelled)
            if matched is None:
                return False
            self.cancelled_caught = True
            if rest is None:
                return True
            raise rest
        return False

    def _outer_cancel_is_visible(self, outer_scopes: list) -> bool:
        if self.shield:
            return False
        for scope in reversed(outer_scopes):
            if scope.cancel_called:
                return True
            if scope.shield:
                return False
        return False

    def cancel(self) -> None:
        if self.cancel_called:
            return
        self.cancel_called = True
        if self._timer is not None:
            self._runtime._loop.cancel(self._timer)
            self._timer = None
        self._runtime._deliver_cancel(self)


class _FailAfter:
    """fail_after(): a deadline whose expiry raises TooSlowError."""

    def __init__(self, scope: SimCancelScope) -> None:
        self._scope = scope

    def __enter__(self) -> SimCancelScope:
        return self._scope.__enter__()

    def __exit__(self, exc_type, exc, traceback) -> bool:
        if self._scope.__exit__(exc_type, exc, traceback) and self._scope.cancelled_caught:
            raise TooSlowError()
        return False


class _TaskStatus:
    def __init__(self, runtime: SimRuntime) -> None:
        self._runtime = runtime
        self.is_started = False
        self.value: object = None
        self.error: BaseException | None = None
        self.is_over = False
        self.waiter: _Task | None = None

    def started(self, value: object = None) -> None:
        assert not self.is_started, "task_status.started() is called once"
        self.is_started = True
        self.value = value
        self._wake()

    def child_ended(self, error: BaseException | None) -> None:
        self.is_over = True
        self.error = error if error is not None else RuntimeError("the task ended without calling started()")
        self._wake()

    def _wake(self) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None:
            self._runtime._reschedule(waiter)


class SimNursery:
    def __init__(self, runtime: SimRuntime) -> None:
        self._runtime = runtime
        self.cancel_scope = SimCancelScope(runtime)
        self._parent: _Task | None = None
        self._scopes: list = []
        self._children: dict[_Task, _TaskStatus | None] = {}
        self._errors: list[BaseException] = []
        self._is_closed = False
        self._is_parent_waiting = False

    async def __aenter__(self) -> SimNursery:
        self._parent = self._runtime.current_task
        self.cancel_scope.__enter__()
        self._scopes = list(self._parent.scopes)
        return self

    def start_soon(self, fn: Callable, *args, name: str = "") -> None:
        self._start(fn(*args), name or getattr(fn, "__name__", "task"), None)

    def _start(self, coro, name: str, status: _TaskStatus | None) -> None:
        if self._is_closed:
            coro.close()
            raise RuntimeError("the nursery is closed to new tasks")
        task = self._runtime._spawn(coro, name, list(self._scopes), on_done=self._child_done)
        self._children[task] = status

    async def start(self, fn: Callable, *args, name: str = "") -> object:
        """Start fn(*args, task_status=...) and wait until it calls task_status.started()."""
        runtime = self._runtime
        status = _TaskStatus(runtime)
        self._start(fn(*args, task_status=status), name or getattr(fn, "__name__", "task"), status)
        while not (status.is_started or status.is_over):
            def register(task: _Task) -> Callable[[], bool]:
                status.waiter = task

                def abort() -> bool:
                    status.waiter = None
                    return True
                return abort
            await runtime._park(register)
        if not status.is_started:
            raise status.error
        return status.value

    def _child_done(self, task: _Task, result: object, error: BaseException | None) -> None:
        status = self._children.pop(task)
        if status is not None and not status.is_started:
            status.child_ended(error)      # an error before started() goes to start()'s caller
        elif error is not None:
            self._errors.append(error)
            self.cancel_scope.cancel()
        if not self._children and self._is_parent_waiting:
            self._is_parent_waiting = False
            self._runtime._reschedule(self._parent)

    async def __aexit__(self, exc_type, exc, traceback) -> bool:
        runtime = self._runtime
        if exc is not None:
            self._errors.append(exc)
            self.cancel_scope.cancel()
        while self._children:
            await runtime._park(self._register_parent_wait)
        self._is_closed = True
        errors, self._errors = self._errors, []
        if not errors:
            self.cancel_scope.__exit__(None, None, None)
            return False
        group = BaseExceptionGroup("errors in a nursery", errors)
        if self.cancel_scope.__exit__(type(group), group, None):
            return True
        raise group

    def _register_parent_wait(self, task: _Task) -> Callable[[], bool]:
        self._is_parent_waiting = True

        def abort() -> bool:
            # The parent was cancelled from outside while waiting for its children: they are
            # cancelled too (they share the scope); note it and keep waiting for them.
            self._errors.append(Cancelled())
            self.cancel_scope.cancel()
            return False
        return abort


def _waiting_in(waiters: dict, value: object = None) -> Callable[[_Task], Callable[[], bool]]:
    """A register function that files the parked task in `waiters` (with `value`) and whose
    abort takes it out again."""
    def register(task: _Task) -> Callable[[], bool]:
        waiters[task] = value

        def abort() -> bool:
            waiters.pop(task, None)
            return True
        return abort
    return register


class SimEvent:
    __slots__ = ("_runtime", "_is_set", "_waiters")

    def __init__(self, runtime: SimRuntime) -> None:
        self._runtime = runtime
        self._is_set = False
        self._waiters: dict[_Task, None] = {}

    def is_set(self) -> bool:
        return self._is_set

    def set(self) -> None:
        if self._is_set:
            return
        self._is_set = True
        waiters, self._waiters = self._waiters, {}
        for task in waiters:
            task.runtime._reschedule(task)

    async def wait(self) -> None:
        if self._is_set:
            await self._runtime.checkpoint()        # as trio's: a set event still yields
            return
        await self._runtime._park(_waiting_in(self._waiters))


class SimLock:
    def __init__(self, runtime: SimRuntime) -> None:
        self._runtime = runtime
        self._owner: _Task | None = None
        self._waiters: dict[_Task, None] = {}

    def locked(self) -> bool:
        return self._owner is not None

    async def acquire(self) -> None:
        runtime = self._runtime
        if self._owner is None:
            runtime._raise_if_cancelled()
            self._owner = runtime.current_task
            return
        await runtime._park(_waiting_in(self._waiters))
        assert self._owner is runtime.current_task

    def release(self) -> None:
        assert self._owner is not None, "release of a lock that is not held"
        if self._waiters:
            task = next(iter(self._waiters))
            del self._waiters[task]
            self._owner = task
            self._runtime._reschedule(task)
        else:
            self._owner = None

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc_info) -> None:
        self.release()


class _ChannelState:
    def __init__(self, runtime: SimRuntime, max_buffer_size: int | float) -> None:
        self.runtime = runtime
        self.max_buffer_size = max_buffer_size
        self.buffer: collections.deque = collections.deque()
        self.is_send_closed = False
        self.is_receive_closed = False
        self.senders: dict[_Task, object] = {}       # parked senders and their values, in order
        self.receivers: dict[_Task, None] = {}


class _ClosesOnExit:
    """`async with` / `with` a channel end closes it on the way out, as trio's do."""

    def close(self) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        self.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc_info) -> None:
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class SimSendChannel(_ClosesOnExit):
    def __init__(self, state: _ChannelState) -> None:
        self._state = state

    def send_nowait(self, value: object) -> None:
        state = self._state
        if state.is_send_closed:
            raise ClosedResourceError("the channel's send side is closed")
        if state.is_receive_closed:
            raise BrokenResourceError("the channel's receive side is closed")
        if state.receivers:
            task = next(iter(state.receivers))
            del state.receivers[task]
            state.runtime._reschedule(task, value)
        elif len(state.buffer) < state.max_buffer_size:
            state.buffer.append(value)
        else:
            raise WouldBlock()

    async def send(self, value: object) -> None:
        state = self._state
        state.runtime._raise_if_cancelled()
        try:
            self.send_nowait(value)
            return
        except WouldBlock:
            pass
        await state.runtime._park(_waiting_in(state.senders, value))

    def close(self) -> None:
        state = self._state
        if state.is_send_closed:
            return
        state.is_send_closed = True
        receivers, state.receivers = state.receivers, {}
        for task in receivers:
            state.runtime._reschedule(task, error=EndOfChannel())


class SimReceiveChannel(_ClosesOnExit):
    def __init__(self, state: _ChannelState) -> None:
        self._state = state

    def receive_nowait(self) -> object:
        state = self._state
        if state.is_receive_closed:
            raise ClosedResourceError("the channel's receive side is closed")
        if state.buffer:
            value = state.buffer.popleft()
            self._take_parked_sender()
            return value
        if state.senders:
            task, value = next(iter(state.senders.items()))
            del state.senders[task]
            state.runtime._reschedule(task)
            return value
        if state.is_send_closed:
            raise EndOfChannel()
        raise WouldBlock()

    def _take_parked_sender(self) -> None:
        state = self._state
        if state.senders:
            task, value = next(iter(state.senders.items()))
            del state.senders[task]
            state.buffer.append(value)
            state.runtime._reschedule(task)

    async def receive(self) -> object:
        state = self._state
        state.runtime._raise_if_cancelled()
        try:
            return self.receive_nowait()
        except WouldBlock:
            pass
        return await state.runtime._park(_waiting_in(state.receivers))

    def close(self) -> None:
        state = self._state
        if state.is_receive_closed:
            return
        state.is_receive_closed = True
        state.buffer.clear()
        senders, state.senders = state.senders, {}
        for task in senders:
            state.runtime._reschedule(task, error=BrokenResourceError("the channel's receive side is closed"))

    def __aiter__(self) -> SimReceiveChannel:
        return self

    async def __anext__(self) -> object:
        try:
            return await self.receive()
        except EndOfChannel:
            raise StopAsyncIteration from None
