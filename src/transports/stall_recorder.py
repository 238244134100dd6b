"""StallRecorder: what kept a process from serving promptly, when, and for how long.

A trio program serves everything from one loop: while one task step runs, no other request is
read, answered or timed out. The recorder keeps, for a process:
  loop      a task step that held the loop (detail: the task's name); steps shorter than
            LOOP_STEP_FLOOR_S are not looked at;
  gc        a pass of CPython's cyclic garbage collector (detail: generation, objects freed),
            which stops every thread of the process;
  any kind the process times itself with timed() or record(): a bookie's journal writes and
            syncs, its checkpoints and their phases, journal rolls, index commits.
Each kind keeps its longest duration per wall-clock second (the last BUCKET_SECONDS of them) and
a list of its events (the last `capacity`, all kinds together): those at least threshold_ms
long, and every event recorded with always=True (checkpoints, rolls: rare, and what a
timeline marks). since(t) answers the longest of each kind from t on, exact for anything of
threshold_ms or more, and the events themselves.

Recording is cheap enough for every task step (two clock reads, one comparison) and safe from
any thread (a deque's append is atomic; a bucket's update may lose a race with another thread's,
which costs at most that one maximum). Times are wall-clock seconds (time.time()) so that the
events of several processes on one machine line up on one timeline.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections import deque
from dataclasses import dataclass
from typing import Iterator

import trio

from bktransports.metrics import counter, gauge

LOOP_STEP_FLOOR_S = 0.0002
BUCKET_SECONDS = 3600
STALL_WINDOW_S = 60.0        # what /metrics says is the longest: of the last minute


@dataclass(frozen=True, slots=True)
class Stall:
    at_s: float             # wall clock, when it started
    kind: str
    duration_ms: float
    detail: str = ""

    def as_json(self) -> dict:
        return {"at_s": round(self.at_s, 6), "kind": self.kind, "duration_ms": round(self.duration_ms, 3),
                "detail": self.detail}


class StallRecorder:
    def __init__(self, *, threshold_ms: float = 1.0, capacity: int = 20_000) -> None:
        self.threshold_ms = threshold_ms
        self.events: deque[Stall] = deque(maxlen=capacity)
        self._buckets: dict[str, deque[list]] = {}     # kind -> [second, longest ms, detail]
        self.longest_ms: dict[str, float] = {}         # kind -> longest ever
        self.counts: dict[str, int] = {}               # kind -> events at or past the threshold
        self._gc_started: float | None = None

    # -- recording ------------------------------------------------------------------------

    def record(self, kind: str, duration_s: float, detail: str = "", *, always: bool = False) -> None:
        """An event of `kind` that has just ended, having lasted duration_s."""
        now = time.time()
        duration_ms = duration_s * 1e3
        second = int(now)
        buckets = self._buckets.get(kind)
        if buckets is None:
            buckets = self._buckets[kind] = deque(maxlen=BUCKET_SECONDS)
        if buckets and buckets[-1][0] == second:
            last = buckets[-1]
            if duration_ms > last[1]:
                last[1], last[2] = duration_ms, detail
        else:
            buckets.append([second, duration_ms, detail])
        if duration_ms > self.longest_ms.get(kind, 0.0):
            self.longest_ms[kind] = duration_ms
        if duration_ms >= self.threshold_ms:
            self.counts[kind] = self.counts.get(kind, 0) + 1
        if always or duration_ms >= self.threshold_ms:
            self.events.append(Stall(now - duration_s, kind, duration_ms, detail))

    @contextlib.contextmanager
    def timed(self, kind: str, detail: str = "", *, always: bool = False) -> Iterator[None]:
        """Record the block's duration as an event of `kind` (also when it raises)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.record(kind, time.perf_counter() - started, detail, always=always)

    def timed_always(self, kind: str) -> contextlib.AbstractContextManager[None]:
        """timed(kind, always=True): a phase every occurrence of which is an event."""
        return self.timed(kind, always=True)

    def install(self) -> None:
        """Watch this trio run's task steps, and the process's garbage collections until the run
        ends (call from inside the run, once; for_current_run() does)."""
        trio.lowlevel.add_instrument(_LoopSteps(self))
        gc.callbacks.append(self._on_gc)

    def _uninstall_gc(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        elif self._gc_started is not None:
            took = time.perf_counter() - self._gc_started
            self._gc_started = None
            self.record("gc", took, f"generation {info.get('generation')}, {info.get('collected', 0)} freed")

    # -- reading --------------------------------------------------------------------------

    def longest_since(self, since_s: float) -> dict[str, float]:
        """kind -> its longest duration (ms) from since_s on: exact for events of threshold_ms
        or more; shorter ones are counted from the first whole second after since_s."""
        longest: dict[str, float] = {}
        for kind, buckets in list(self._buckets.items()):
            whole = [entry[1] for entry in list(buckets) if entry[0] >= since_s]
            if whole:
                longest[kind] = max(whole)
        for event in list(self.events):
            if event.at_s >= since_s and event.duration_ms > longest.get(event.kind, 0.0):
                longest[event.kind] = event.duration_ms
        return {kind: round(value, 3) for kind, value in sorted(longest.items())}

    def since(self, since_s: float = 0.0, *, limit: int = 5_000) -> dict:
        """What the HTTP endpoint answers: now, the longest of each kind, and the last `limit`
        events from since_s on (oldest first)."""
        events = [event for event in list(self.events) if event.at_s >= since_s][-limit:]
        return {"now_s": round(time.time(), 6), "threshold_ms": self.threshold_ms,
                "longest_ms": self.longest_since(since_s), "events": [event.as_json() for event in events]}


def stall_families(prefix: str, recorder: StallRecorder, *, window_s: float = STALL_WINDOW_S) -> list:
    """Prometheus families of a recorder (bktransports.metrics): per kind, the longest in the last
    window_s and the count of those at least threshold_ms long since the process started."""
    longest = recorder.longest_since(time.time() - window_s)
    return [
        gauge(f"{prefix}_stall_longest_ms", f"the longest of each kind in the last {window_s:.0f} s (ms): loop is a "
              "task step that held the trio loop, gc a garbage collector pass, the rest phases the process times",
              [({"kind": kind}, value) for kind, value in sorted(longest.items())]),
        counter(f"{prefix}_stalls", f"stalls of each kind at least {recorder.threshold_ms:g} ms long",
                [({"kind": kind}, count) for kind, count in sorted(recorder.counts.items())]),
    ]


_RUN_RECORDER: trio.lowlevel.RunVar = trio.lowlevel.RunVar("stall_recorder")


def for_current_run() -> StallRecorder:
    """The recorder of this trio run, installed on first use: one per loop, whatever number of
    bookies, clients and servers share it (each would otherwise time every step again)."""
    try:
        return _RUN_RECORDER.get()
    except LookupError:
        recorder = StallRecorder()
        recorder.install()
        _RUN_RECORDER.set(recorder)
        return recorder


class _LoopSteps(trio.abc.Instrument):
    """Times each task step: from the end of the step before it (or of the loop's wait for I/O)
    to its own end, which is the step and the scheduler's little work between two steps. One
    hook per step rather than two (before and after) halves what timing every step costs."""

    def __init__(self, recorder: StallRecorder) -> None:
        self._recorder = recorder
        self._clock = time.perf_counter
        self._last = self._clock()

    def after_io_wait(self, timeout: float) -> None:
        self._last = self._clock()

    def after_task_step(self, task) -> None:
        now = self._clock()
        took = now - self._last
        self._last = now
        if took >= LOOP_STEP_FLOOR_S:
            self._recorder.record("loop", took, task.name)

    def after_run(self) -> None:
        self._recorder._uninstall_gc()
