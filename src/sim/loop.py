"""EventLoop and TraceHasher: the simulator's virtual clock and the fingerprint of a run.

EventLoop owns virtual time and the one queue of pending events: a heap of
(time_ns, sequence_no, handle, callback, args). sequence_no is unique and increasing, so ties
in time run in the order they were scheduled and the heap never compares callbacks, handles or
arguments: nothing depends on object identity or hash order. Time only moves forward.

Cancellation is lazy: a cancelled event stays in the heap and is skipped when popped. The heap
is compacted (cancelled entries dropped) when they make up most of it or when it reaches
pending_count_max; if it is still full, scheduling raises EventLoopFull (a runaway simulation is
a bug to report, not something to drop silently).

TraceHasher folds a canonical, type-tagged encoding (msgpack) of each recorded field into blake2b
(never Python's hash(), which changes between processes). Two runs are the same history exactly when
their digests match.
"""

from __future__ import annotations

import hashlib
import heapq
from heapq import heappop, heappush
from dataclasses import dataclass
from typing import Callable

import msgpack

PENDING_COUNT_MAX_DEFAULT = 10_000_000
# Compact the heap once cancelled entries are the majority of a heap at least this large.
_COMPACT_SIZE_MIN = 4096


class EventLoopFull(Exception):
    """More than pending_count_max events are pending even after dropping cancelled ones."""


class TimerHandle:
    """Returned by call_at/call_later; pass it to EventLoop.cancel()."""

    __slots__ = ("at_ns", "is_cancelled", "is_done")

    def __init__(self, at_ns: int) -> None:
        self.at_ns = at_ns
        self.is_cancelled = False
        self.is_done = False        # ran, or was cancelled and then dropped from the heap


@dataclass(frozen=True, slots=True)
class LoopStatistics:
    now_ns: int
    events_run_count: int
    cancelled_count: int
    pending_count: int
    pending_count_peak: int
    compaction_count: int


class EventLoop:
    """Inputs: call_at / post_at / call_later / cancel schedule; run_until / run_until_idle run."""

    def __init__(self, *, pending_count_max: int = PENDING_COUNT_MAX_DEFAULT) -> None:
        assert pending_count_max >= 1
        self.now_ns = 0
        self.events_run_count = 0
        self.pending_count_max = pending_count_max
        # Invariant: (at_ns, sequence_no) keys are unique; every entry has at_ns >= now_ns
        # while the loop is not inside a run.
        self._heap: list[tuple] = []
        self._sequence_no = 0
        # Entries in the heap whose handle is cancelled but that have not been popped yet.
        self._cancelled_pending_count = 0
        self._cancelled_count = 0
        self._pending_count_peak = 0
        self._compaction_count = 0

    # -- scheduling -------------------------------------------------------------------------

    # call_at, post_at and call_later push onto the heap themselves (no shared helper): they run
    # for nearly every event, and a call layer costs about as much as the push. One comparison
    # per push covers both limits: the heap can only be full at a new peak.

    def call_at(self, at_ns: int, callback: Callable, *args) -> TimerHandle:
        """Run callback(*args) at virtual time at_ns (>= now_ns); cancellable."""
        assert at_ns >= self.now_ns, f"cannot schedule in the past ({at_ns} < {self.now_ns})"
        handle = TimerHandle(at_ns)
        heap = self._heap
        if len(heap) >= self._pending_count_peak:
            self._grow(len(heap))
        self._sequence_no += 1
        heappush(heap, (at_ns, self._sequence_no, handle, callback, args))
        return handle

    def post_at(self, at_ns: int, callback: Callable, *args) -> None:
        """call_at for events nobody will cancel (most of them): no handle to allocate."""
        assert at_ns >= self.now_ns, f"cannot schedule in the past ({at_ns} < {self.now_ns})"
        heap = self._heap
        if len(heap) >= self._pending_count_peak:
            self._grow(len(heap))
        self._sequence_no += 1
        heappush(heap, (at_ns, self._sequence_no, None, callback, args))

    def call_later(self, delay_ns: int, callback: Callable, *args) -> TimerHandle:
        assert delay_ns >= 0, f"negative delay {delay_ns}"
        at_ns = self.now_ns + delay_ns
        handle = TimerHandle(at_ns)
        heap = self._heap
        if len(heap) >= self._pending_count_peak:
            self._grow(len(heap))
        self._sequence_no += 1
        heappush(heap, (at_ns, self._sequence_no, handle, callback, args))
        return handle

    def cancel(self, handle: TimerHandle) -> None:
        """The event will not run. Cancelling twice, or after it ran, does nothing."""
        if handle.is_cancelled or handle.is_done:
            return
        handle.is_cancelled = True
        self._cancelled_count += 1
        self._cancelled_pending_count += 1
        heap_size = len(self._heap)
        if heap_size >= _COMPACT_SIZE_MIN and self._cancelled_pending_count * 2 > heap_size:
            self._compact()

    def _grow(self, size: int) -> None:
        """One entry is about to be pushed onto a heap of `size` entries, as many as ever (the
        only time it can be full, since pending_count_peak <= pending_count_max): record the new
        peak, or at pending_count_max drop cancelled entries, or refuse."""
        if size >= self.pending_count_max:
            self._compact()
            if len(self._heap) >= self.pending_count_max:
                raise EventLoopFull(f"{len(self._heap)} events pending (pending_count_max={self.pending_count_max})")
        else:
            self._pending_count_peak = size + 1

    def _compact(self) -> None:
        if not self._cancelled_pending_count:
            return
        kept = []
        for entry in self._heap:
            handle = entry[2]
            if handle is not None and handle.is_cancelled:
                handle.is_done = True
            else:
                kept.append(entry)
        # Keys are unique, so the pop order after heapify is the same as before.
        heapq.heapify(kept)
        self._heap[:] = kept
        self._cancelled_pending_count = 0
        self._compaction_count += 1

    # -- running ----------------------------------------------------------------------------

    def run_until(self, end_ns: int) -> int:
        """Run every event due at or before end_ns, in order; then the clock reads end_ns.
        Events scheduled by callbacks run too if they are due by end_ns. Returns events run."""
        assert end_ns >= self.now_ns, f"cannot run back to {end_ns} from {self.now_ns}"
        count = self._run(end_ns=end_ns, event_count_max=None)
        self.now_ns = end_ns
        return count

    def run_until_idle(self, event_count_max: int) -> int:
        """Run events until none is pending or event_count_max have run (then some may remain:
        check pending_count). The clock stays at the last event run. Returns events run."""
        assert event_count_max >= 0
        return self._run(end_ns=None, event_count_max=event_count_max)

    def _run(self, *, end_ns: int | None, event_count_max: int | None) -> int:
        # The hottest loop of the simulator: one pass per event, nothing called but the event.
        # The two limits get separate loops so that each pass tests only the one in force.
        heap = self._heap
        count = 0
        try:
            if event_count_max is None:
                # Pop, then look at the time: the first event not yet due goes back (the only
                # push this costs per run), rather than peeking at the top before every pop.
                while heap:
                    at_ns, _, handle, callback, args = entry = heappop(heap)
                    if at_ns > end_ns:
                        heappush(heap, entry)       # keys are unique: the heap orders as before
                        break
                    if handle is not None:
                        handle.is_done = True
                        if handle.is_cancelled:
                            self._cancelled_pending_count -= 1
                            continue
                    self.now_ns = at_ns
                    count += 1
                    callback(*args)
            else:
                while heap and count < event_count_max and (end_ns is None or heap[0][0] <= end_ns):
                    at_ns, _, handle, callback, args = heappop(heap)
                    if handle is not None:
                        handle.is_done = True
                        if handle.is_cancelled:
                            self._cancelled_pending_count -= 1
                            continue
                    self.now_ns = at_ns
                    count += 1
                    callback(*args)
        finally:
            self.events_run_count += count
        return count

    # -- queries ----------------------------------------------------------------------------

    @property
    def pending_count(self) -> int:
        """Events still to run (cancelled ones not counted)."""
        return len(self._heap) - self._cancelled_pending_count

    def next_event_at_ns(self) -> int | None:
        """When the next live event is due, or None if nothing is pending. Drops cancelled
        entries from the top of the heap (no other effect)."""
        heap = self._heap
        while heap:
            handle = heap[0][2]
            if handle is None or not handle.is_cancelled:
                return heap[0][0]
            heapq.heappop(heap)
            handle.is_done = True
            self._cancelled_pending_count -= 1
        return None

    def statistics(self) -> LoopStatistics:
        return LoopStatistics(now_ns=self.now_ns, events_run_count=self.events_run_count,
                              cancelled_count=self._cancelled_count, pending_count=self.pending_count,
                              pending_count_peak=self._pending_count_peak,
                              compaction_count=self._compaction_count)

    def invariants(self) -> None:
        heap = self._heap
        assert 0 <= self._cancelled_pending_count <= len(heap)
        assert self._cancelled_pending_count == sum(
            1 for entry in heap if entry[2] is not None and entry[2].is_cancelled)
        assert all(entry[0] >= self.now_ns for entry in heap)
        assert len(heap) <= self.pending_count_max


_PLAIN_TYPES = frozenset({int, str, bytes, bool, type(None)})


def _plain_field(field: object) -> object:
    """A field as a plain int, str, bytes, bool or None; anything else is refused."""
    kind = type(field)
    if kind in (int, bool, str, bytes) or field is None:
        return field
    if kind is bytearray or kind is memoryview:
        return bytes(field)
    if isinstance(field, int):      # IntEnum and other int subclasses: their value
        return int(field)
    raise TypeError(f"trace fields are int, str, bytes or None; not {kind.__name__}")


def _pack_big_int(value: object) -> msgpack.ExtType:
    """msgpack's fallback for what it cannot pack itself: here only ints beyond 64 bits (the
    fields were checked), encoded as their decimal digits under their own type code."""
    if type(value) is not int:
        raise TypeError(f"trace fields are int, str, bytes or None; not {type(value).__name__}")
    return msgpack.ExtType(_BIG_INT_EXT_CODE, str(value).encode("ascii"))


_BIG_INT_EXT_CODE = 1
# Trace records buffered before folding into the hash (a module constant: the hot path reads it
# faster than a class attribute through an instance).
_TRACE_FLUSH_COUNT = 1024


class TraceHasher:
    """Fingerprint of a run. record(*fields) takes ints, strs, bytes (and None); the digest is
    blake2b over their canonical encoding, identical across processes and PYTHONHASHSEEDs.

    The encoding of a record is the msgpack array of its fields (type-tagged and self-delimiting;
    strs as UTF-8 with lone surrogates passed through, bytes as bin, ints beyond 64 bits as an
    ext type), and the hashed stream is those arrays one after another. Records are kept as
    tuples and encoded a batch at a time: msgpack packs the batch as one array, whose header is
    dropped, leaving exactly the concatenation of the records' own encodings."""

    def __init__(self) -> None:
        self._hash = hashlib.blake2b(digest_size=16)
        # Strict UTF-8 packs strs in place; with an error handler msgpack copies every str first.
        # The two give the same bytes for any str strict UTF-8 accepts, so the second packer is
        # only asked about a batch holding a lone surrogate.
        self._pack = msgpack.Packer(use_bin_type=True, default=_pack_big_int).pack
        self._pack_surrogates = msgpack.Packer(use_bin_type=True, unicode_errors="surrogatepass",
                                               default=_pack_big_int).pack
        self._records: list[tuple] = []
        self._flushed_count = 0

    @property
    def record_count(self) -> int:
        return self._flushed_count + len(self._records)

    def record(self, *fields: int | str | bytes | None) -> None:
        # Anything but a plain int, str, bytes, bool or None is reduced to one (an IntEnum to its
        # value) or refused now, so that what is buffered is exactly what gets encoded.
        if not _PLAIN_TYPES.issuperset(map(type, fields)):
            fields = tuple(_plain_field(f) for f in fields)
        records = self._records
        records.append(fields)
        if len(records) >= _TRACE_FLUSH_COUNT:
            self._flush()

    def record_plain(self, fields: tuple) -> None:
        """record(*fields) for hot paths whose fields are ints and strs by construction: no type
        check here (msgpack still refuses anything it cannot encode, when flushing)."""
        records = self._records
        records.append(fields)
        if len(records) >= _TRACE_FLUSH_COUNT:
            self._flush()

    def _flush(self) -> None:
        records = self._records
        if records:
            count = len(records)
            try:
                packed = self._pack(records)
            except UnicodeEncodeError:
                packed = self._pack_surrogates(records)
            # The batch's array header: 1 byte up to 15 items, 3 up to 65535, else 5.
            header_size = 1 if count < 16 else 3 if count < 0x10000 else 5
            self._hash.update(memoryview(packed)[header_size:])
            self._flushed_count += count
            records.clear()

    def hexdigest(self) -> str:
        """Digest of everything recorded so far; recording may go on afterwards."""
        self._flush()
        return self._hash.hexdigest()
