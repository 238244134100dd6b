"""Long-poll reads parked at a bookie until the ledger's LAC passes the reader's previous LAC,
the ledger is fenced, or the wait times out (BookKeeper's ReadEntryProcessorV3 long poll).

Bounded: park() refuses past count_max (the bookie answers TOO_MANY_REQUESTS). Waiters are
kept twice: by ledger (to wake them when the LAC moves) and in a deadline heap (to time them
out). A waiter answered by a LAC move stays in the heap until it reaches the top or the heap is
compacted; the heap never holds more than twice the live waiters plus a constant.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from bkcore.wire import store_fields_directly

_HEAP_SLACK_COUNT = 64


@store_fields_directly
@dataclass(frozen=True, slots=True)
class Waiter:
    request: object          # a ReadRequest with long_poll_timeout_ns > 0
    source: str
    deadline_ns: int
    sequence_no: int         # unique per LongPollWaiters: identity, and the heap's tie-break


class LongPollWaiters:
    def __init__(self, *, count_max: int) -> None:
        assert count_max >= 0
        self.count_max = count_max
        # ledger_id -> {sequence_no: waiter}, in parking order; only live waiters, no empty dicts.
        self._by_ledger: dict[int, dict[int, Waiter]] = {}
        # (deadline_ns, sequence_no, waiter). Invariant: the top, if any, is a live waiter, so
        # next_deadline_ns() is a pure query.
        self._deadlines: list[tuple[int, int, Waiter]] = []
        self._next_sequence_no = 0
        self._count = 0
        self.peak_count = 0

    def __len__(self) -> int:
        return self._count

    def has_waiters(self, ledger_id: int) -> bool:
        return ledger_id in self._by_ledger

    def park(self, request, source: str, *, deadline_ns: int) -> bool:
        """Park a long poll; False (nothing changed) when count_max waiters are parked."""
        if self._count >= self.count_max:
            return False
        waiter = Waiter(request, source, deadline_ns, self._next_sequence_no)
        self._next_sequence_no += 1
        self._by_ledger.setdefault(request.ledger_id, {})[waiter.sequence_no] = waiter
        heapq.heappush(self._deadlines, (deadline_ns, waiter.sequence_no, waiter))
        self._count += 1
        self.peak_count = max(self.peak_count, self._count)
        return True

    def pop_ready(self, ledger_id: int, *, lac: int, is_fenced: bool) -> list[Waiter]:
        """Waiters of the ledger whose previous LAC is below `lac` (all of them if fenced)."""
        waiters = self._by_ledger.get(ledger_id)
        if not waiters:
            return []
        ready = [w for w in waiters.values() if is_fenced or lac > w.request.previous_lac]
        for waiter in ready:
            del waiters[waiter.sequence_no]
        if not waiters:
            del self._by_ledger[ledger_id]
        self._count -= len(ready)
        self._tidy_deadlines()
        return ready

    def pop_expired(self, now_ns: int) -> list[Waiter]:
        """Waiters whose deadline is at or before now_ns, earliest first."""
        expired = []
        while self._deadlines and self._deadlines[0][0] <= now_ns:
            waiter = heapq.heappop(self._deadlines)[2]
            waiters = self._by_ledger.get(waiter.request.ledger_id)
            if waiters is not None and waiters.pop(waiter.sequence_no, None) is not None:
                expired.append(waiter)
                if not waiters:
                    del self._by_ledger[waiter.request.ledger_id]
        self._count -= len(expired)
        self._tidy_deadlines()
        return expired

    def next_deadline_ns(self) -> int | None:
        return self._deadlines[0][0] if self._deadlines else None

    def _is_live(self, waiter: Waiter) -> bool:
        waiters = self._by_ledger.get(waiter.request.ledger_id)
        return waiters is not None and waiter.sequence_no in waiters

    def _tidy_deadlines(self) -> None:
        """Restore the heap-top invariant; rebuild the heap when answered waiters dominate it."""
        if len(self._deadlines) > 2 * self._count + _HEAP_SLACK_COUNT:
            self._deadlines = [item for item in self._deadlines if self._is_live(item[2])]
            heapq.heapify(self._deadlines)
        while self._deadlines and not self._is_live(self._deadlines[0][2]):
            heapq.heappop(self._deadlines)

    def invariants(self) -> None:
        assert 0 <= self._count <= self.count_max
        assert self._count == sum(len(w) for w in self._by_ledger.values())
        assert all(self._by_ledger.values()), "no empty per-ledger dicts"
        assert len(self._deadlines) <= 2 * self._count + _HEAP_SLACK_COUNT
        assert not self._deadlines or self._is_live(self._deadlines[0][2])
