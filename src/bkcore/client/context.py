"""ClientContext: what every client sub-machine shares.

It owns the effect outbox, request ids and the callbacks waiting on bookie responses, metadata
tokens and their callbacks, and one timer heap. Sub-machines (writer, reads, recovery) never keep
their own clocks or ids; they ask the context, which keeps lookups O(1) and deadlines in a heap.

Sub-machines that group requests (writers: adds into runs) hold them per bookie instead of
sending them: hold() names a bookie to the driver once, in a HeldSends effect, and the driver
pulls it (pull_sends) when that bookie's connection can write, at once or once a busy one is
done; then every holder sends what it has for that bookie. Taking effects only drains the
outbox. A bookie left unpulled for add_entry_timeout_ns is pulled by on_timer, so a connection
that never drains fails its requests as it did when they waited in its queue.

Rules:
- A request is answered at most once: the first response or its timeout wins; duplicates and
  late answers are counted and dropped.
- Timers are (at_ns, sequence_no) ordered with lazy cancellation, so firing order never depends
  on object identity or hashing.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass
from typing import Callable

from bkcore.effects import Completed, HeldSends, MetadataCall, Send
from bkcore.errors import BKException
from bkcore.client.config import ClientConfig
from bkcore.ledger.layout import LedgerLayout
from bkcore.rng import Rng

# Dead deadline entries a FIFO may hold beyond twice the pending requests before it is rebuilt.
DEADLINE_SLACK_COUNT = 1024
# What take_effects returns when there is nothing to do (most inputs): shared, so that asking
# costs no allocation. Drivers only iterate what they take.
_NO_EFFECTS: tuple = ()

ResponseCallback = Callable[[object | None, int], None]  # (response or None on timeout, now_ns)
MetadataCallback = Callable[[object, int], None]          # (MetaResult, now_ns)
TimerCallback = Callable[[int], None]                     # (now_ns)


@dataclass(frozen=True, slots=True)
class ContextStatistics:
    requests_sent_count: int
    responses_count: int
    responses_dropped_count: int
    request_timeouts_count: int
    metadata_calls_count: int
    pending_requests_peak: int


class ClientContext:
    def __init__(self, *, client_id: str, config: ClientConfig, rng: Rng,
                 layout: LedgerLayout) -> None:
        self.client_id = client_id
        self.config = config
        self.rng = rng
        self.layout = layout
        self._effects: list = []
        # Bookies named in a HeldSends and not pulled yet -> when the first request was held for
        # them since they were last pulled (what a held add's deadline runs from).
        self._held_since_ns: dict[str, int] = {}
        # Sub-machines that may hold requests, in the order they first held (a dict used as an
        # ordered set: iterated in insertion order, never by hash). One that holds nothing more
        # after a pull is dropped.
        self._holders: dict[object, None] = {}
        # Time of the input being handled; set by the Client at every input so completions
        # that carry no time of their own (writer -> recovery) can schedule from it.
        self.now_ns = 0
        self._next_request_id = 1
        # Request id -> (destination, on_response): a plain tuple, since one is built for every
        # request sent.
        self._pending_requests: dict[int, tuple[str, ResponseCallback]] = {}
        # Request deadlines without a heap entry each: one FIFO per timeout value of
        # (deadline, request id). Requests are sent at non-decreasing times, so within a FIFO
        # deadlines only grow (a deadline is raised to the one before it if the clock stepped
        # back) and the head is the next to expire. Answered requests are not searched for:
        # an entry whose request is no longer pending is dead and dropped when it reaches the
        # head (ids are never reused). A FIFO holding more than twice the pending requests plus
        # DEADLINE_SLACK_COUNT entries is rebuilt from its live ones, so dead entries stay
        # bounded by the live ones.
        self._request_deadlines: dict[int, deque[tuple[int, int]]] = {}
        self._next_token = 1
        self._pending_metadata: dict[int, MetadataCallback] = {}
        # Open application writers by ledger id, told when a bookie's registration vanishes.
        self.open_writers: dict[int, object] = {}
        # Heap of (at_ns, timer_key); callbacks live in _timer_callbacks, a cancelled timer is
        # simply absent from it (lazy deletion).
        self._timers: list[tuple[int, int]] = []
        self._timer_callbacks: dict[int, TimerCallback] = {}
        self._next_timer_key = 1
        self._responses_count = 0
        self._dropped_count = 0
        self._timeouts_count = 0
        self._metadata_count = 0
        self._pending_peak = 0

    # -- outbox ---------------------------------------------------------------------------

    def take_effects(self) -> list | tuple:
        effects = self._effects
        if not effects:
            return _NO_EFFECTS
        self._effects = []
        return effects

    def hold(self, holder, destinations, now_ns: int) -> None:
        """`holder` keeps requests for `destinations` until they are pulled: the ones not yet
        named to the driver are named now. On a pull, holder.send_held({destination:
        held_since_ns}) sends what it has for those bookies and says whether it holds more."""
        self._holders[holder] = None
        held_since_ns = self._held_since_ns
        named = [d for d in destinations if d not in held_since_ns]
        if named:
            for destination in named:
                held_since_ns[destination] = now_ns
            self._effects.append(HeldSends(named))

    def pull_sends(self, destinations, now_ns: int) -> None:
        """The driver can write to these bookies: what is held for them is sent now (timed
        from when it was first held). Bookies with nothing held are ignored."""
        held_since_ns = self._held_since_ns
        pulled = {d: held_since_ns.pop(d) for d in destinations if d in held_since_ns}
        if pulled:
            holders = self._holders
            for holder in list(holders):
                if not holder.send_held(pulled):
                    del holders[holder]

    def complete(self, op_id: int, result: object = None, error: BKException | None = None) -> None:
        self._effects.append(Completed(op_id, result, error))

    def complete_each(self, op_ids: list[int], first_result: int) -> None:
        """complete(op_id, result) for each op id in order, with results first_result,
        first_result + 1, ...: a writer's run of adds completing (their entry ids) in one call."""
        self._effects.extend(map(Completed, op_ids, range(first_result, first_result + len(op_ids))))

    # -- timers ---------------------------------------------------------------------------

    def call_at(self, at_ns: int, callback: TimerCallback) -> int:
        key = self._next_timer_key
        self._next_timer_key += 1
        self._timer_callbacks[key] = callback
        heapq.heappush(self._timers, (at_ns, key))
        return key

    def cancel_timer(self, key: int) -> None:
        self._timer_callbacks.pop(key, None)

    def next_deadline_ns(self) -> int | None:
        # Asked after every input: each bucket's head is read once, and dropped if its request
        # was answered.
        timers = self._timers
        callbacks = self._timer_callbacks
        while timers and timers[0][1] not in callbacks:
            heapq.heappop(timers)
        deadline = timers[0][0] if timers else None
        if self._held_since_ns:              # held too long: see on_timer
            held_deadline = min(self._held_since_ns.values()) + self.config.add_entry_timeout_ns
            if deadline is None or held_deadline < deadline:
                deadline = held_deadline
        pending = self._pending_requests
        for bucket in self._request_deadlines.values():
            while bucket:
                first, request_id = bucket[0]
                if request_id in pending:
                    if deadline is None or first < deadline:
                        deadline = first
                    break
                bucket.popleft()                      # a dead entry: nothing observable changes
        return deadline

    def on_timer(self, now_ns: int) -> None:
        timers = self._timers
        while timers and timers[0][0] <= now_ns:
            _, key = heapq.heappop(timers)
            callback = self._timer_callbacks.pop(key, None)
            if callback is not None:
                callback(now_ns)
        if self._held_since_ns:
            # Held for a bookie whose connection has not drained for a whole add timeout: sent
            # now, with deadlines from when they were held, so that they time out below (as
            # requests waiting in that connection's queue would) and the writer replaces it.
            timeout_ns = self.config.add_entry_timeout_ns
            overdue = [d for d, since_ns in self._held_since_ns.items() if since_ns + timeout_ns <= now_ns]
            if overdue:
                self.pull_sends(overdue, now_ns)
        for timeout_ns in sorted(self._request_deadlines):
            bucket = self._request_deadlines[timeout_ns]
            while bucket and bucket[0][0] <= now_ns:
                _, request_id = bucket.popleft()
                self._on_request_timeout(request_id, now_ns)      # nothing if it was answered

    # -- bookie requests ------------------------------------------------------------------

    def send_request(self, destination: str, build: Callable[[int], object],
                     on_response: ResponseCallback, *, timeout_ns: int, now_ns: int) -> int:
        """Send `build(request_id)` to a bookie; `on_response` gets the answer or None on timeout."""
        request_id = self._next_request_id
        self._next_request_id = request_id + 1
        deadline = now_ns + timeout_ns
        bucket = self._request_deadlines.get(timeout_ns)
        if bucket is None:
            bucket = self._request_deadlines[timeout_ns] = deque()
        elif bucket:
            last_deadline = bucket[-1][0]
            if last_deadline > deadline:            # keep the FIFO in order
                deadline = last_deadline
        bucket.append((deadline, request_id))
        pending = self._pending_requests
        pending[request_id] = (destination, on_response)
        pending_count = len(pending)
        if pending_count > self._pending_peak:
            self._pending_peak = pending_count
        if len(bucket) > 2 * pending_count + DEADLINE_SLACK_COUNT:
            self._request_deadlines[timeout_ns] = deque(entry for entry in bucket if entry[1] in pending)
        self._effects.append(Send(destination, build(request_id)))
        return request_id

    def forget_request(self, request_id: int) -> None:
        """Stop waiting for a request (its answer, if any, will be dropped)."""
        self._pending_requests.pop(request_id, None)      # its deadline entry is dead now

    def on_response(self, message: object, source: str, now_ns: int) -> None:
        request_id = getattr(message, "request_id", None)
        pending = self._pending_requests.get(request_id) if type(request_id) is int else None
        if pending is None or pending[0] != source:
            self._dropped_count += 1
            return
        del self._pending_requests[request_id]
        self._responses_count += 1
        pending[1](message, now_ns)

    def on_send_failed(self, request_id: int, *, destination: str, now_ns: int) -> None:
        """The connection to `destination` broke before it could answer: fail that request now
        (the same outcome as its timeout, only sooner)."""
        pending = self._pending_requests.get(request_id)
        if pending is not None and pending[0] == destination:
            self._on_request_timeout(request_id, now_ns)

    def on_connection_lost(self, destination: str, now_ns: int) -> None:
        """Every request sent to `destination` and not answered is lost with the connection."""
        lost = [rid for rid, pending in self._pending_requests.items() if pending[0] == destination]
        for request_id in lost:
            self.on_send_failed(request_id, destination=destination, now_ns=now_ns)

    def _on_request_timeout(self, request_id: int, now_ns: int) -> None:
        pending = self._pending_requests.pop(request_id, None)
        if pending is not None:
            self._timeouts_count += 1
            pending[1](None, now_ns)

    # -- metadata -------------------------------------------------------------------------

    def call_metadata(self, op: object, on_result: MetadataCallback) -> None:
        token = self._next_token
        self._next_token += 1
        self._pending_metadata[token] = on_result
        self._metadata_count += 1
        self._effects.append(MetadataCall(token, op))

    def on_metadata_result(self, token: int, result: object, now_ns: int) -> None:
        callback = self._pending_metadata.pop(token, None)
        if callback is not None:
            callback(result, now_ns)

    def retry_later(self, now_ns: int, action: TimerCallback) -> None:
        self.call_at(now_ns + self.config.metadata_retry_delay_ns, action)

    # -- introspection --------------------------------------------------------------------

    @property
    def held_destinations(self):
        """Bookies named in a HeldSends and not pulled since (a read-only view)."""
        return self._held_since_ns.keys()

    @property
    def pending_requests_count(self) -> int:
        return len(self._pending_requests)

    @property
    def pending_metadata_count(self) -> int:
        return len(self._pending_metadata)

    def statistics(self) -> ContextStatistics:
        # Every request sent took the next id: ids count the requests sent.
        return ContextStatistics(self._next_request_id - 1, self._responses_count, self._dropped_count,
                                 self._timeouts_count, self._metadata_count, self._pending_peak)
