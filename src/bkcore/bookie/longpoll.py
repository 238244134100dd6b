"""Long-poll reads parked at a bookie until the ledger's LAC passes the reader's, the ledger is
fenced, or the wait times out. Bounded: park() refuses past count_max."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field


@dataclass(slots=True, eq=False)   # identity: duplicated requests are distinct waiters
class Waiter:
    request: object
    source: str
    deadline_ns: int
    is_done: bool = False


@dataclass(slots=True)
class LongPollWaiters:
    count_max: int
    _by_ledger: dict[int, list[Waiter]] = field(default_factory=dict)
    # (deadline_ns, sequence_no, waiter): answered waiters are skipped when popped.
    _deadlines: list = field(default_factory=list)
    _sequence_no: int = 0
    _count: int = 0
    peak_count: int = 0

    def __len__(self) -> int:
        return self._count

    def park(self, request, source: str, *, deadline_ns: int) -> bool:
        if self._count >= self.count_max:
            return False
        waiter = Waiter(request, source, deadline_ns)
        self._by_ledger.setdefault(request.ledger_id, []).append(waiter)
        self._sequence_no += 1
        heapq.heappush(self._deadlines, (deadline_ns, self._sequence_no, waiter))
        self._count += 1
        self.peak_count = max(self.peak_count, self._count)
        return True

    def pop_ready(self, ledger_id: int, *, lac: int, is_fenced: bool) -> list[Waiter]:
        waiters = self._by_ledger.get(ledger_id)
        if not waiters:
            return []
        ready = [w for w in waiters if not w.is_done and (is_fenced or lac > w.request.previous_lac)]
        if ready:
            ready_ids = {id(w) for w in ready}   # identity only, never ordering
            kept = [w for w in waiters if not w.is_done and id(w) not in ready_ids]
            if kept:
                self._by_ledger[ledger_id] = kept
            else:
                del self._by_ledger[ledger_id]
            self._finish(ready)
        return ready

    def pop_expired(self, now_ns: int) -> list[Waiter]:
        expired = []
        while self._deadlines and self._deadlines[0][0] <= now_ns:
            waiter = heapq.heappop(self._deadlines)[2]
            if not waiter.is_done:
                expired.append(waiter)
                waiters = self._by_ledger.get(waiter.request.ledger_id, [])
                if waiter in waiters:
                    waiters.remove(waiter)
                    if not waiters:
                        del self._by_ledger[waiter.request.ledger_id]
        self._finish(expired)
        return expired

    def _finish(self, waiters: list[Waiter]) -> None:
        for waiter in waiters:
            waiter.is_done = True
        self._count -= len(waiters)

    def next_deadline_ns(self) -> int | None:
        while self._deadlines and self._deadlines[0][2].is_done:
            heapq.heappop(self._deadlines)
        return self._deadlines[0][0] if self._deadlines else None
