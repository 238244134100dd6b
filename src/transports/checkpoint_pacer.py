"""CheckpointPacer: spreads a periodic checkpoint's entry-log writes over part of flushInterval.

A checkpoint written as fast as it can go takes the bookie's CPU and the disk in one burst: on
a machine with few cores its thread, the event loop and the journal thread then share them,
every add waits a little longer, and the adds queue up until the burst ends (at a quarter of the
pipelined peak on 2 vCPUs, p99 rose from 2.7 ms without checkpoints to 11-44 ms with them, each
spike lined up with a checkpoint). Paced, the same writes run in slices with waits between them,
finishing `spread_s` after the start, as PostgreSQL spreads its checkpoints over
checkpoint_completion_target of checkpoint_timeout.

A checkpoint that must end soon is not paced, and hurry() ends the waits of one that is (from any
thread): the write cache filling up (the next checkpoint is due at once), and whatever else
waits for the storage the paced one holds (a checkpoint asked for now, as GC, the admin
endpoint and shutdown ask; a compaction).
"""

from __future__ import annotations

import threading
import time
from typing import Callable


class CheckpointPacer:
    """A bkcore Pacer: called in the checkpoint's worker thread after each entry-log write with
    the fraction of its records written; waits there while the writes are ahead of a straight
    line from the start to `spread_s` later. A checkpoint of one write does not wait at all."""

    def __init__(self, spread_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.spread_s = spread_s
        self._clock = clock
        self._started = clock()
        self._hurried = threading.Event()
        self.waited_s = 0.0                  # time spent waiting, for the stall recorder

    def __call__(self, fraction_written: float) -> None:
        if self._hurried.is_set() or fraction_written >= 1.0:
            return                  # (after the last write, waiting would only delay the rest)
        now = self._clock()
        ahead_s = self._started + self.spread_s * fraction_written - now
        if ahead_s > 0:
            self._hurried.wait(ahead_s)
            self.waited_s += self._clock() - now

    def hurry(self) -> None:
        """No more waiting: the rest is written as fast as it goes."""
        self._hurried.set()

    @property
    def is_hurried(self) -> bool:
        return self._hurried.is_set()
