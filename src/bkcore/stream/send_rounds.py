"""Send rounds shared by stream writers: the writers that join one SendRounds send their next
entries together, a round at a time, so that writers sharing bookies reach them in the same
frames and share each bookie's journal sync.

The table ranges of one server are such writers: each range journals to a ledger of its own
with one entry in flight (bkcore.table.range), and sends its next entry the moment the last is
acknowledged. Left alone, the ranges of a busy server fall out of step: a bookie syncs each
range's entry on its own, and each entry holds only the commands of its own range's clients.
In step, one round of syncs carries the commands of every range (`bk bench table`, four ranges,
sixteen clients, on two cores: see docs/architecture.md for the figures).

A round is the entries in flight. A writer with an entry ready while a round is in flight
waits for the round to end (its last entry acknowledged, or failed); then every writer that
waits sends at once, from that acknowledgement's callback, so a ledger client sends them all
in one pump (one frame per bookie). A writer that finds no round in flight starts one. An
entry that holds a round up for ROUND_WAIT_MAX_S (a slow or failing bookie) is not waited for
any longer: the writers waiting then send anyway, in a round of their own, and that entry no
longer counts (a watchdog task checks while any writer waits).

Pure: the writers call in from their loop (StreamWriter, its `rounds` option); `spawn` starts
the watchdog as a task.
"""

from __future__ import annotations

import logging
from typing import Callable

logger = logging.getLogger(__name__)

ROUND_WAIT_MAX_S = 0.02


class SendRounds:
    def __init__(self, runtime, spawn: Callable[..., None], *, round_wait_max_s: float = ROUND_WAIT_MAX_S) -> None:
        self._rt = runtime
        self._spawn = spawn
        self._round_wait_max_s = round_wait_max_s
        # Entries in flight in the current round, by writer; entries of earlier rounds that
        # were given up on (stragglers) count for nothing but their own writer's order.
        self._in_flight: dict[object, int] = {}
        self._stragglers: dict[object, int] = {}
        # The writers waiting for the round to end, each with what sends its entry (in the
        # order they began waiting: a dict, so a simulated run does not depend on addresses).
        self._waiting: dict[object, Callable[[], None]] = {}
        self._round_started_s = 0.0
        self._is_opening = False
        self._is_watching = False
        self.rounds_count = 0                 # rounds started (tests read these two)
        self.rounds_given_up_count = 0        # rounds the watchdog stopped waiting for

    def admit(self, writer, send: Callable[[], None]) -> bool:
        """May `writer` send its next entry now? Yes when no round is in flight, or when the
        round is the writer's own and nobody waits for it to end (a writer alone pipelines its
        entries). If not, it waits: send() is called once the round in flight ends (and sends,
        or finds what stops it: a roll, a failure)."""
        in_flight = self._in_flight
        if (not in_flight or self._is_opening
                or (len(in_flight) == 1 and writer in in_flight and not self._waiting)):
            return True
        self._wait(writer, send)
        return False

    def is_waiting(self, writer) -> bool:
        return writer in self._waiting

    def started(self, writer) -> None:
        """`writer` sent an entry (admitted)."""
        in_flight = self._in_flight
        if not in_flight:
            self._round_started_s = self._rt.monotonic_s()
            self.rounds_count += 1
        in_flight[writer] = in_flight.get(writer, 0) + 1
        self._waiting.pop(writer, None)

    def finished(self, writer, send_next: Callable[[], None] | None) -> None:
        """An entry of `writer` was acknowledged; send_next, when it has more to send, sends
        its next entry: now, if that ended the round (with every writer waiting), or once the
        round does."""
        if self._stragglers.get(writer):
            _decrement(self._stragglers, writer)
        else:
            _decrement(self._in_flight, writer)
        if send_next is not None:
            self._wait(writer, send_next)
        if not self._in_flight:
            self._open()

    def leave(self, writer) -> None:
        """`writer` stopped (failed, fenced, closed): its entries in flight count no more, and
        it no longer waits."""
        self._stragglers.pop(writer, None)
        self._waiting.pop(writer, None)
        if self._in_flight.pop(writer, None) and not self._in_flight:
            self._open()

    def _wait(self, writer, send: Callable[[], None]) -> None:
        self._waiting.setdefault(writer, send)
        if not self._is_watching:
            self._is_watching = True
            self._spawn(self._watch)

    def _open(self) -> None:
        """End the round: every writer waiting sends now. (If one raises, those after it wait
        on, and the watchdog lets them go: it releases writers that wait with no round in
        flight.)"""
        if not self._waiting:
            return
        waiting, self._waiting = list(self._waiting.items()), {}
        self._is_opening = True
        try:
            for index, (_, send) in enumerate(waiting):
                try:
                    send()
                except BaseException:
                    for writer, later in waiting[index + 1:]:
                        self._wait(writer, later)
                    raise
        finally:
            self._is_opening = False

    async def _watch(self) -> None:
        """While writers wait: a round that has taken round_wait_max_s is given up on, and
        writers left waiting with no round in flight are let go."""
        try:
            while self._waiting:
                await self._rt.sleep(self._round_wait_max_s)
                if not self._waiting:
                    break
                if self._in_flight and self._rt.monotonic_s() - self._round_started_s < self._round_wait_max_s:
                    continue
                if self._in_flight:
                    self.rounds_given_up_count += 1
                    for writer, count in self._in_flight.items():
                        self._stragglers[writer] = self._stragglers.get(writer, 0) + count
                    self._in_flight = {}
                try:
                    self._open()
                except Exception as exc:      # noqa: BLE001 - one writer's fault; the others go on
                    logger.warning("a stream writer failed to send its entry when its round began: %r", exc)
        finally:
            self._is_watching = False


def _decrement(counts: dict[object, int], key) -> None:
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
