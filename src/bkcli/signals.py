"""Stopping a long-running `bk` process: the first SIGINT or SIGTERM cancels its nursery."""

from __future__ import annotations

import signal

import trio


async def cancel_on_stop_signal(nursery: trio.Nursery, on_signal=None) -> None:
    """Wait for SIGINT or SIGTERM; then `await on_signal(signum)` (if given) and cancel."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            if on_signal is not None:
                await on_signal(signum)
            nursery.cancel_scope.cancel()
            return
