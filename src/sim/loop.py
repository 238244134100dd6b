"""EventLoop and TraceHasher: virtual time and the fingerprint of a run.

The loop is a heap of (time_ns, sequence_no, callback, args). Ties in time run in the order
they were scheduled, so nothing depends on object identity. Cancellation is lazy: a cancelled
entry stays in the heap and is skipped when popped.

The trace hash folds a canonical encoding of recorded fields into blake2b (Python's hash() of
strings changes between processes, so it is never used).
"""

from __future__ import annotations

import hashlib
import heapq
from typing import Callable


class _Handle:
    __slots__ = ("is_cancelled",)

    def __init__(self) -> None:
        self.is_cancelled = False


class EventLoop:
    def __init__(self) -> None:
        self.now_ns = 0
        self._heap: list = []
        self._sequence_no = 0
        self.events_run_count = 0

    def call_at(self, at_ns: int, callback: Callable, *args) -> _Handle:
        assert at_ns >= self.now_ns, f"cannot schedule in the past ({at_ns} < {self.now_ns})"
        handle = _Handle()
        self._sequence_no += 1
        heapq.heappush(self._heap, (at_ns, self._sequence_no, handle, callback, args))
        return handle

    def post_at(self, at_ns: int, callback: Callable, *args) -> None:
        """call_at for events nobody will cancel (most of them): no handle to allocate."""
        self._sequence_no += 1
        heapq.heappush(self._heap, (at_ns, self._sequence_no, None, callback, args))

    def call_later(self, delay_ns: int, callback: Callable, *args) -> _Handle:
        return self.call_at(self.now_ns + max(0, delay_ns), callback, *args)

    @staticmethod
    def cancel(handle: _Handle) -> None:
        handle.is_cancelled = True

    def run_until(self, end_ns: int) -> int:
        """Run every event due at or before end_ns; then the clock reads end_ns."""
        heap = self._heap
        count = 0
        while heap and heap[0][0] <= end_ns:
            at_ns, _, handle, callback, args = heapq.heappop(heap)
            if handle is not None and handle.is_cancelled:
                continue
            self.now_ns = at_ns
            callback(*args)
            count += 1
        self.now_ns = max(self.now_ns, end_ns)
        self.events_run_count += count
        return count

    def run_until_idle(self, *, event_count_max: int) -> int:
        heap = self._heap
        count = 0
        while heap and count < event_count_max:
            at_ns, _, handle, callback, args = heapq.heappop(heap)
            if handle is not None and handle.is_cancelled:
                continue
            self.now_ns = at_ns
            callback(*args)
            count += 1
        self.events_run_count += count
        return count

    @property
    def pending_count(self) -> int:
        return len(self._heap)


class TraceHasher:
    """Accumulates fields in a buffer and folds it into blake2b in large chunks (cheap per event)."""

    _FLUSH_SIZE = 1 << 16

    def __init__(self) -> None:
        self._hash = hashlib.blake2b(digest_size=16)
        self._parts: list[str] = []
        self._size = 0
        self.record_count = 0

    def record(self, *fields) -> None:
        # repr of ints and strs is canonical and process-independent.
        text = repr(fields)
        self._parts.append(text)
        self._size += len(text)
        self.record_count += 1
        if self._size >= self._FLUSH_SIZE:
            self._flush()

    def _flush(self) -> None:
        self._hash.update("\n".join(self._parts).encode())
        self._hash.update(b"\n")
        self._parts.clear()
        self._size = 0

    def hexdigest(self) -> str:
        self._flush()
        return self._hash.hexdigest()
