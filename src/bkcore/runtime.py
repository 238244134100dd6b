"""Runtime: what the async layers above the ledger protocol may ask of the process they run in.

Log streams, tables and range ownership string many ledger and metastore calls together. That
orchestration is async code written once, against this small interface, and it runs unchanged
in two worlds:

    bktransports.trio_runtime.TRIO_RUNTIME   trio itself, wall clocks, real threads
    bksim.tasks.SimRuntime                   one per simulated process: virtual time, tasks run in
                                           an order drawn from the seed, crashes and pauses

The interface is a subset of trio's API with trio's meanings (strict exception groups
included), so the code reads like trio code with `rt.` in front. Nothing else of trio may be
used by code that runs in both worlds, and such code reads no clock but these.
"""

from __future__ import annotations

from typing import Any, Protocol


class Runtime(Protocol):
    # Exception types, raised as trio raises them.
    Cancelled: type[BaseException]
    WouldBlock: type[Exception]
    EndOfChannel: type[Exception]
    BrokenResourceError: type[Exception]
    ClosedResourceError: type[Exception]
    TooSlowError: type[Exception]
    TASK_STATUS_IGNORED: Any

    # Clocks. monotonic_s() orders local events and measures leases; wall_time_s() stamps
    # what other processes read (segment ctimes, TTLs) and may be skewed between processes.
    def monotonic_s(self) -> float: ...

    def wall_time_s(self) -> float: ...

    # Tasks and cancellation.
    def open_nursery(self) -> Any: ...

    def CancelScope(self, *, shield: bool = False) -> Any: ...  # noqa: N802 - trio's name

    def move_on_after(self, seconds: float) -> Any: ...

    def fail_after(self, seconds: float) -> Any: ...

    async def sleep(self, seconds: float) -> None: ...

    async def sleep_forever(self) -> None: ...

    async def checkpoint(self) -> None: ...

    # Synchronisation.
    def Event(self) -> Any: ...  # noqa: N802 - trio's name

    def Lock(self) -> Any: ...  # noqa: N802 - trio's name

    def open_memory_channel(self, max_buffer_size: int | float) -> tuple[Any, Any]: ...

    # A lock for data also read from other threads of a real process (a no-op where there
    # are none).
    def thread_lock(self) -> Any: ...


async def race(rt: Runtime, *functions) -> None:
    """Run the async functions side by side until the first returns or fails, then cancel the
    others. A failure is raised as itself, not inside an exception group (a nursery would
    wrap it, and callers catch the typed errors of the layers below)."""
    errors: list[Exception] = []
    async with rt.open_nursery() as nursery:
        async def run(function) -> None:
            try:
                await function()
            except Exception as exc:      # noqa: BLE001 - re-raised below, unwrapped
                errors.append(exc)
            nursery.cancel_scope.cancel()

        for function in functions:
            nursery.start_soon(run, function)
    if errors:
        raise errors[0]
