"""open_service_nursery: a nursery for the tasks of a service that the code using it still
needs while it shuts down.

    async with open_service_nursery() as services:
        driver_or_tables = start_serving(services)       # its tasks run in `services`
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await close_in_order(driver_or_tables)   # needs those tasks still running

A cancellation from outside reaches the block but not the tasks in `services`: they stop only
when the block has ended (its shielded cleanup included). In a plain nursery the same
cancellation would stop them at once, and a cleanup waiting on them (a range's journal sealing
what is queued, a ledger close waiting for its bookies' answers) would wait forever, or find
the nursery closed. A task of `services` that fails still cancels the block, as in any nursery.
"""

from __future__ import annotations

import contextlib
from typing import AsyncIterator

import trio


@contextlib.asynccontextmanager
async def open_service_nursery() -> AsyncIterator[trio.Nursery]:
    async with trio.open_nursery() as nursery:
        services = await nursery.start(_hold_shielded_nursery)
        try:
            yield services
        finally:
            services.cancel_scope.cancel()


async def _hold_shielded_nursery(*, task_status=trio.TASK_STATUS_IGNORED) -> None:
    async with trio.open_nursery() as services:
        services.cancel_scope.shield = True
        task_status.started(services)
        await trio.sleep_forever()      # until the block using it has ended and cancels it
