"""WriteCache: a bookie's entries that are not in an entry log yet, kept as the runs they came in.

A writer's adds reach a bookie as runs of consecutive entries of one ledger (an AddBatchRequest,
or single adds one after another), so the cache keeps, per ledger, sorted runs:
`starts[i]` is the first entry id of run i and `bodies[i]` the list of its bodies. A run that
continues the ledger's last run is appended to it in one C call, so a ledger's entries are
usually one run however many adds brought them. Per entry there is no key object, no hash
insert and nothing for the cyclic garbage collector to walk (a dict keyed per entry cost a
bookie about 1.5 us of CPU per add, growing and probing a table of tens of thousands of keys,
then sorting them again at each checkpoint). A checkpoint gets the entries already in
(ledger, entry) order (runs()).

Entries written again (a recovery rewriting what it read, a replay) replace the body in place;
entries that arrive out of order, or leave a gap, make runs of their own, merged with a
neighbour they touch.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import accumulate
from typing import Iterator


class _LedgerRuns:
    __slots__ = ("starts", "bodies")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.bodies: list[list[bytes]] = []

    def end(self) -> int:
        """One past the last entry id held (0 when empty)."""
        return self.starts[-1] + len(self.bodies[-1]) if self.starts else 0


class WriteCache:
    def __init__(self) -> None:
        self._ledgers: dict[int, _LedgerRuns] = {}
        self.size = 0            # bytes of the bodies held
        self.count = 0           # entries held

    def __len__(self) -> int:
        return self.count

    def add(self, ledger_id: int, first_entry_id: int, bodies: list[bytes]) -> None:
        """Hold bodies[i] as entry first_entry_id + i of the ledger; a body already held for
        one of those ids is replaced."""
        runs = self._ledgers.get(ledger_id)
        if runs is None:
            runs = self._ledgers[ledger_id] = _LedgerRuns()
        starts = runs.starts
        if not starts or first_entry_id > starts[-1] + len(runs.bodies[-1]):
            starts.append(first_entry_id)            # after everything held, with a gap
            runs.bodies.append(list(bodies))
        elif first_entry_id == starts[-1] + len(runs.bodies[-1]):
            runs.bodies[-1].extend(bodies)           # continues the last run: nearly always
        else:
            self._put_each(runs, first_entry_id, bodies)
            return
        self.size += sum(map(len, bodies))
        self.count += len(bodies)

    def add_one(self, ledger_id: int, entry_id: int, body: bytes) -> None:
        """add() of one entry, spelled out for the usual case: it continues the last run."""
        runs = self._ledgers.get(ledger_id)
        if runs is not None and runs.starts and entry_id == runs.starts[-1] + len(runs.bodies[-1]):
            runs.bodies[-1].append(body)
            self.size += len(body)
            self.count += 1
        else:
            self.add(ledger_id, entry_id, [body])

    def _put_each(self, runs: _LedgerRuns, first_entry_id: int, bodies: list[bytes]) -> None:
        """add() of entries that overlap or precede what is held: one at a time (rare)."""
        for entry_id, body in enumerate(bodies, first_entry_id):
            self._put(runs, entry_id, body, replace=True)

    def _put(self, runs: _LedgerRuns, entry_id: int, body: bytes, *, replace: bool) -> None:
        starts, run_bodies = runs.starts, runs.bodies
        index = bisect_right(starts, entry_id) - 1
        if index >= 0:
            offset = entry_id - starts[index]
            run = run_bodies[index]
            if offset < len(run):
                if replace:
                    self.size += len(body) - len(run[offset])
                    run[offset] = body
                return
            if offset == len(run):                    # continues run `index`
                run.append(body)
                self._count_one(body)
                if index + 1 < len(starts) and starts[index + 1] == entry_id + 1:
                    run.extend(run_bodies.pop(index + 1))     # and now touches the next one
                    del starts[index + 1]
                return
        if index + 1 < len(starts) and starts[index + 1] == entry_id + 1:
            starts[index + 1] = entry_id                # just before run index + 1
            run_bodies[index + 1].insert(0, body)
        else:
            starts.insert(index + 1, entry_id)
            run_bodies.insert(index + 1, [body])
        self._count_one(body)

    def _count_one(self, body: bytes) -> None:
        self.size += len(body)
        self.count += 1

    def add_missing(self, other: WriteCache, *, skip_ledgers: set[int]) -> None:
        """Take other's entries that this cache does not hold (its own are newer), except those
        of skip_ledgers: a failed checkpoint's entries going back to memory."""
        for ledger_id, runs in other._ledgers.items():
            if ledger_id in skip_ledgers:
                continue
            mine = self._ledgers.get(ledger_id)
            if mine is None:
                mine = self._ledgers[ledger_id] = _LedgerRuns()
            for start, bodies in zip(runs.starts, runs.bodies):
                for entry_id, body in enumerate(bodies, start):
                    self._put(mine, entry_id, body, replace=False)

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        runs = self._ledgers.get(ledger_id)
        if runs is None:
            return None
        starts = runs.starts
        if starts and entry_id >= starts[-1]:          # the last run: what readers tail
            index = len(starts) - 1
        else:
            index = bisect_right(starts, entry_id) - 1
            if index < 0:
                return None
        offset = entry_id - starts[index]
        run = runs.bodies[index]
        return run[offset] if offset < len(run) else None

    def holds(self, ledger_id: int, entry_id: int) -> bool:
        return self.get(ledger_id, entry_id) is not None

    def holds_any(self, ledger_id: int, first_entry_id: int, end_entry_id: int) -> bool:
        """Whether any entry first_entry_id <= id < end_entry_id of the ledger is held."""
        runs = self._ledgers.get(ledger_id)
        if runs is None or end_entry_id <= first_entry_id:
            return False
        # Runs are sorted and apart: only the last one starting before end_entry_id may reach in.
        index = bisect_right(runs.starts, end_entry_id - 1) - 1
        return index >= 0 and runs.starts[index] + len(runs.bodies[index]) > first_entry_id

    def last_entry_id(self, ledger_id: int) -> int | None:
        runs = self._ledgers.get(ledger_id)
        return runs.end() - 1 if runs is not None and runs.starts else None

    def drop_ledger(self, ledger_id: int) -> None:
        runs = self._ledgers.pop(ledger_id, None)
        if runs is not None:
            for bodies in runs.bodies:
                self.size -= sum(map(len, bodies))
                self.count -= len(bodies)

    def ledger_ids(self) -> list[int]:
        return sorted(self._ledgers)

    def runs(self) -> Iterator[tuple[int, int, list[bytes]]]:
        """(ledger id, first entry id, bodies) of every run, in (ledger, entry) order."""
        for ledger_id in sorted(self._ledgers):
            runs = self._ledgers[ledger_id]
            for start, bodies in zip(runs.starts, runs.bodies):
                yield ledger_id, start, bodies

    def runs_in_parts(self, part_size: int) -> Iterator[list[tuple[int, int, list[bytes]]]]:
        """runs(), in lists of about part_size bytes of bodies: a run that crosses the line is
        cut there, so every list but the last holds at least part_size (0: all in one list)."""
        if part_size <= 0:
            if self._ledgers:
                yield list(self.runs())
            return
        part: list[tuple[int, int, list[bytes]]] = []
        filled = 0                                   # bytes of bodies in part
        for ledger_id, first_entry_id, bodies in self.runs():
            ends = list(accumulate(map(len, bodies)))     # ends[i]: bytes of bodies[:i + 1]
            start = 0
            while start < len(bodies):
                base = ends[start - 1] if start else 0
                cut = bisect_left(ends, base + part_size - filled, start)    # the part's last body
                if cut >= len(bodies):                                      # the rest fits
                    part.append((ledger_id, first_entry_id + start, bodies[start:] if start else bodies))
                    filled += ends[-1] - base
                    break
                part.append((ledger_id, first_entry_id + start, bodies[start:cut + 1]))
                yield part
                part, filled = [], 0
                start = cut + 1
        if part:
            yield part

    def newest(self, count_max: int) -> list[tuple[int, int, bytes]]:
        """About count_max of the highest entries, shared among the ledgers, as (ledger, entry,
        body): what tailing readers ask for next."""
        if not self._ledgers or count_max <= 0:
            return []
        share = max(1, count_max // len(self._ledgers))
        found = []
        for ledger_id in sorted(self._ledgers):
            runs = self._ledgers[ledger_id]
            start, bodies = runs.starts[-1], runs.bodies[-1]
            tail = bodies[-share:]
            found.extend((ledger_id, entry_id, body)
                         for entry_id, body in enumerate(tail, start + len(bodies) - len(tail)))
        return found[-count_max:]

    def release_gradually(self, step_count: int = 1024) -> None:
        """Drop every entry, step_count at a time, so that a thread doing it yields the GIL
        between steps (freeing tens of thousands of bodies in one call would hold it for ms)."""
        for runs in self._ledgers.values():
            for bodies in runs.bodies:
                while bodies:
                    del bodies[-step_count:]
        self._ledgers.clear()
        self.size = self.count = 0
