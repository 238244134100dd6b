"""TRIO_RUNTIME: bkcore.runtime's interface as trio itself, for real processes.

Each name is trio's own object or function, so the stream and table layers cost nothing extra
here: rt.Event() is trio.Event(), rt.open_nursery() is trio.open_nursery(), and so on.
"""

from __future__ import annotations

import threading
import time

import trio


class TrioRuntime:
    Cancelled = trio.Cancelled
    WouldBlock = trio.WouldBlock
    EndOfChannel = trio.EndOfChannel
    BrokenResourceError = trio.BrokenResourceError
    ClosedResourceError = trio.ClosedResourceError
    TooSlowError = trio.TooSlowError
    TASK_STATUS_IGNORED = trio.TASK_STATUS_IGNORED

    Event = staticmethod(trio.Event)
    Lock = staticmethod(trio.Lock)
    CancelScope = staticmethod(trio.CancelScope)
    open_nursery = staticmethod(trio.open_nursery)
    open_memory_channel = staticmethod(trio.open_memory_channel)
    move_on_after = staticmethod(trio.move_on_after)
    fail_after = staticmethod(trio.fail_after)
    sleep = staticmethod(trio.sleep)
    sleep_forever = staticmethod(trio.sleep_forever)
    checkpoint = staticmethod(trio.lowlevel.checkpoint)
    thread_lock = staticmethod(threading.Lock)
    monotonic_s = staticmethod(time.monotonic)
    wall_time_s = staticmethod(time.time)


TRIO_RUNTIME = TrioRuntime()
