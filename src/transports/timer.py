"""CoreTimer: one trio task that calls a core's on_timer() when its next deadline comes.

A pure core says when it next wants the clock (next_deadline_ns()); the driver passes that to
set() after every pump, and run() sleeps until the deadline or until an earlier one comes. Deadlines are
trio clock nanoseconds (see now_ns()).
"""

from __future__ import annotations

from typing import Callable

import trio


def now_ns() -> int:
    return int(trio.current_time() * 1e9)


class CoreTimer:
    def __init__(self, on_due: Callable[[int], None]) -> None:
        self._on_due = on_due
        self._at_ns: int | None = None
        self._changed = trio.Event()

    def set(self, deadline_ns: int | None) -> None:
        """Be due no later than deadline_ns (None: the core has no deadline). Only an earlier
        deadline re-arms the timer: a later one, or none, leaves the armed time, and the core
        is then called once with nothing due (every core checks its own times) and says its
        next deadline afterwards. Re-arming costs a task switch, and a client's next deadline
        moves with nearly every answer (2.5 times per add, one add at a time, 3 bookies)."""
        at_ns = self._at_ns
        if deadline_ns is not None and (at_ns is None or deadline_ns < at_ns):
            self._at_ns = deadline_ns
            self._changed.set()

    async def run(self) -> None:
        while True:
            at_ns = self._at_ns
            self._changed = trio.Event()
            if at_ns is None:
                await self._changed.wait()
                continue
            with trio.move_on_at(at_ns / 1e9):
                await self._changed.wait()
                continue
            self._at_ns = None
            self._on_due(now_ns())
