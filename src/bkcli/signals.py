"""Running a long-lived `bk` process: the first SIGINT or SIGTERM cancels its nursery
(cancel_on_stop_signal), and a start that fails for want of its port is one line (run_service)."""

from __future__ import annotations

import signal
import sys

import trio


async def cancel_on_stop_signal(nursery: trio.Nursery, on_signal=None) -> None:
    """Wait for SIGINT or SIGTERM; then `await on_signal(signum)` (if given) and cancel."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            if on_signal is not None:
                await on_signal(signum)
            nursery.cancel_scope.cancel()
            return


def first_exception(error: BaseException, kinds) -> BaseException | None:
    """The first exception of `kinds` in `error`, or in the exception groups the nurseries
    wrapped it in (None if there is none)."""
    if isinstance(error, kinds):
        return error
    for inner in getattr(error, "exceptions", ()):
        found = first_exception(inner, kinds)
        if found is not None:
            return found
    return None


def run_service(name: str, main, *args) -> int:
    """trio.run(main, *args); an OSError that stops it (a port in use, an address that is not
    this machine's) is reported as `bk <name>: <error>`, exit status 1, without a traceback."""
    try:
        return trio.run(main, *args)
    except Exception as error:          # (Ctrl-C and SystemExit go their own way)
        found = first_exception(error, OSError)
        if found is None:
            raise
        print(f"bk {name}: {found}", file=sys.stderr)
        return 1
