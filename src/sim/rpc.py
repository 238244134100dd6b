"""RPC between simulated application processes, over the world's network and its faults.

An RpcEndpoint is a node of the world (SimWorld.add_endpoint) belonging to one process
incarnation, named <role>.<incarnation>.rpc; it stops when its process crashes, so requests to
a dead process are refused (as TCP refuses them) and its late answers go nowhere. Messages are
frozen dataclasses with a TAG and a request_id, like the ledger protocol's, and meet every
fault of SimNetwork: latency, loss, duplication, reordering, partitions, pauses.

Client side: `await endpoint.call(destination, body, timeout_s=...)` returns the answer, or
raises RpcTimeout (nothing came back in time: the request may or may not have been carried
out) or RpcRefused (the destination is down: it was not). `endpoint.request(...)` opens a
stream of replies instead (a watch): `await stream.next(timeout_s)` gives them in order, once
each, as TCP would (duplicates dropped, a bounded window of early replies held back), until the
last reply, a timeout, or a gap that stays open (RpcBroken); `stream.close()` cancels the
server's side.

Server side: each request runs `handler(source, body, reply)` in a task of the process's
runtime; `reply(body)` sends an intermediate reply, and what the handler returns is the last
one. A duplicated request runs once (ids seen recently are remembered per source). The
handler's tasks pause and crash with the process; an error escaping one fails the run.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Awaitable, Callable, ClassVar

from bkcore.effects import Send

# Replies of one stream held for the consumer, and replies that arrived ahead of a missing one.
REPLIES_BUFFERED_MAX = 1_000
EARLY_REPLIES_MAX = 64
# Request ids remembered per source to drop duplicates; older ids are taken as duplicates.
SEEN_REQUESTS_WINDOW = 4_096

Handler = Callable[[str, object, Callable[[object], None]], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class RpcRequest:
    TAG: ClassVar[str] = "rpc-request"
    request_id: int
    body: object


@dataclass(frozen=True, slots=True)
class RpcReply:
    TAG: ClassVar[str] = "rpc-reply"
    request_id: int
    seq: int                 # 1, 2, ... among the replies to one request
    body: object
    is_last: bool


@dataclass(frozen=True, slots=True)
class RpcCancel:
    TAG: ClassVar[str] = "rpc-cancel"
    request_id: int


class RpcTimeout(ConnectionError):
    """No reply in time: the request may or may not have been carried out."""


class RpcRefused(ConnectionError):
    """The destination is down: the request was not delivered."""


class RpcBroken(ConnectionError):
    """A stream of replies lost one (or its consumer fell too far behind)."""


class RpcEnded(ConnectionError):
    """The stream's last reply was taken already."""


class ReplyStream:
    """The replies to one request, in order (see the module's docstring)."""

    def __init__(self, endpoint: RpcEndpoint, destination: str, request_id: int) -> None:
        self._endpoint = endpoint
        self._rt = endpoint.runtime
        self.destination = destination
        self.request_id = request_id
        self._send, self._receive = self._rt.open_memory_channel(REPLIES_BUFFERED_MAX)
        self._next_seq = 1
        self._early: dict[int, RpcReply] = {}
        self.failure: ConnectionError | None = None
        self.is_finished = False          # the last reply arrived, or the stream failed

    async def next(self, timeout_s: float) -> object:
        with self._rt.move_on_after(timeout_s):
            try:
                return await self._receive.receive()
            except self._rt.EndOfChannel:
                raise self.failure or RpcEnded(f"request {self.request_id} to {self.destination} was answered") \
                    from None
        raise RpcTimeout(f"{self.destination} did not answer request {self.request_id} "
                         f"within {timeout_s:g}s")

    def close(self) -> None:
        self._endpoint.forget(self)

    def on_reply(self, reply: RpcReply) -> None:
        if reply.seq < self._next_seq or reply.seq in self._early or self.is_finished:
            return                        # a duplicate
        self._early[reply.seq] = reply
        if len(self._early) > EARLY_REPLIES_MAX:
            self.fail(RpcBroken(f"reply {self._next_seq} to request {self.request_id} never came"))
            return
        while self._next_seq in self._early:
            ready = self._early.pop(self._next_seq)
            self._next_seq += 1
            try:
                self._send.send_nowait(ready.body)
            except self._rt.WouldBlock:
                self.fail(RpcBroken(f"the replies to request {self.request_id} were not taken in time"))
                return
            if ready.is_last:
                self.is_finished = True
                self._send.close()
                return

    def fail(self, error: ConnectionError) -> None:
        if not self.is_finished:
            self.is_finished = True
            self.failure = error
            self._send.close()


class RpcEndpoint:
    """One process incarnation's RPC node. Inputs from the world: receive(), on_send_failed();
    the world takes its sends with take_effects()."""

    def __init__(self, *, world, process, handler: Handler | None = None) -> None:
        self.name = f"{process.name}.rpc"
        self.runtime = process.runtime
        self._world = world
        self._handler = handler
        self._outbox: list[Send] = []
        self._request_ids = itertools.count(1)
        self._streams: dict[int, ReplyStream] = {}
        # Requests being served: (source, request_id) -> the cancel scope of its task.
        self._serving: dict[tuple[str, int], object] = {}
        # Per source: request ids seen within the window below its highest one.
        self._seen: dict[str, set[int]] = {}
        self._highest_seen: dict[str, int] = {}
        world.add_endpoint(self.name, self)
        process.on_crash.append(self.stop)

    def stop(self) -> None:
        """The process is gone: nothing reaches this endpoint or leaves it any more."""
        self._world.stop_client(self.name)
        self._outbox.clear()
        for stream in list(self._streams.values()):
            stream.fail(RpcRefused(f"{self.name} stopped"))
        self._streams.clear()

    # -- the client side ----------------------------------------------------------------------

    async def call(self, destination: str, body: object, *, timeout_s: float) -> object:
        stream = self.request(destination, body)
        try:
            return await stream.next(timeout_s)
        finally:
            stream.close()

    def request(self, destination: str, body: object) -> ReplyStream:
        request_id = next(self._request_ids)
        stream = self._streams[request_id] = ReplyStream(self, destination, request_id)
        self._send(destination, RpcRequest(request_id, body))
        return stream

    def forget(self, stream: ReplyStream) -> None:
        """The caller is done with the stream: cancel what the server still does for it."""
        if self._streams.pop(stream.request_id, None) is not None and not stream.is_finished:
            stream.fail(RpcEnded(f"request {stream.request_id} was given up"))
            self._send(stream.destination, RpcCancel(stream.request_id))

    def _send(self, destination: str, message: object) -> None:
        self._outbox.append(Send(destination, message))
        self._world.client_did_something(self.name)

    # -- the server side ----------------------------------------------------------------------

    def _is_duplicate(self, source: str, request_id: int) -> bool:
        seen = self._seen.setdefault(source, set())
        highest = self._highest_seen.get(source, 0)
        if request_id in seen or request_id <= highest - SEEN_REQUESTS_WINDOW:
            return True
        seen.add(request_id)
        if request_id > highest:
            self._highest_seen[source] = request_id
            if len(seen) > SEEN_REQUESTS_WINDOW:
                seen.difference_update([i for i in seen if i <= request_id - SEEN_REQUESTS_WINDOW])
        return False

    async def _serve(self, source: str, request: RpcRequest) -> None:
        key = (source, request.request_id)
        seqs = itertools.count(1)

        def reply(body: object) -> None:
            self._send(source, RpcReply(request.request_id, next(seqs), body, False))

        with self.runtime.CancelScope() as scope:
            self._serving[key] = scope
            try:
                answer = await self._handler(source, request.body, reply)
                self._send(source, RpcReply(request.request_id, next(seqs), answer, True))
            finally:
                del self._serving[key]

    # -- inputs and effects (the world's node interface) ----------------------------------------

    def receive(self, message: object, *, source: str, now_ns: int) -> None:
        if type(message) is RpcReply:
            stream = self._streams.get(message.request_id)
            if stream is not None:
                stream.on_reply(message)
        elif type(message) is RpcRequest:
            if self._handler is not None and not self._is_duplicate(source, message.request_id):
                self.runtime.spawn_system_task(self._serve, source, message, name="rpc")
        elif type(message) is RpcCancel:
            scope = self._serving.get((source, message.request_id))
            if scope is not None:
                scope.cancel()

    def on_send_failed(self, message: object, *, destination: str, now_ns: int) -> None:
        if type(message) is RpcRequest:
            stream = self._streams.get(message.request_id)
            if stream is not None:
                stream.fail(RpcRefused(f"{destination} is down"))

    def on_timer(self, now_ns: int) -> None:
        pass

    def take_effects(self) -> list[Send]:
        effects, self._outbox = self._outbox, []
        return effects

    def next_deadline_ns(self) -> None:
        return None
