"""Table calls between stream storage servers: a request that reaches a server that does not own
its range goes to the owner over one TCP connection per owner, which carries many calls per
frame (bkcore.table.peer_wire says what a call and an answer are; the framing is bkcore.wire's,
through bktransports.connection.FramedConnection).

PeerServer (on the owner) listens on a port of its own, announced in the server's registration node
(bkcore.table.ownership), and runs each call against its Tables exactly as a request that came to
it directly: while the call's range is open and serving, without a task (a command queued into the
range, answered by its callback once durable; a read answered from the range's state while the read
lease holds); otherwise in a task of its own, through Tables.execute for commands and txns and
Tables.read for reads (which open the range, or check the lease). Answers are queued as they are
ready and the connection's writer sends whatever is queued at each wakeup as one frame.

PeerClient (on every server) is what a server calls on NotOwner(owner):

    result = await peers.execute(owner, namespace, stream, pkey, command)
    result = await peers.read(owner, namespace, stream, pkey, range_read)
    async for event in peers.watch(owner, namespace, stream, pkey, lkey, lkey_end, start_revision=r,
                                   started=on_started):
        ...

A watch is a call with many answers on the same connection: the owner runs Tables.watch and
sends each change as it comes; leaving the iteration sends a cancel, which ends the owner's
watch. A watcher whose owner finds the connection backed up (this server reads too slowly), or
whose changes pile up here past WATCH_BUFFER_EVENTS, is ended with WatchTooSlow, as a local
watcher that falls behind is: it watches again from where it was.

It returns what the owner's Tables returned, or raises what it raised there: the same class
with the same message (NotOwner with its owner: a call that lands on a server that does not own
the range either is not sent on again; the caller decides). Calls to one owner share one
connection, opened at the first call after looking up the owner's peer address, and are queued
and written together: N concurrent calls cost about one send and one receive. Answers are
matched to calls by id. When the connection breaks, every call waiting on it fails at once with
a ConnectionError naming the owner, and the next call connects again (looking the address up
again: the owner may have restarted elsewhere). A call not answered within timeout_s fails with
a ConnectionError too; like any request that timed out, its command may or may not have been
carried out.

Security: with the cluster's secret (the gRPC endpoint's), a server takes calls only from
servers that prove it: the first call on a connection is a PeerAuth carrying it (bkcore.table.
peer_wire), sent without waiting for an answer, as a bookie client sends its AuthRequest; a
connection that starts otherwise is answered Unauthorized (to call id 0) and closed before any
of its calls is run, and the first refusal of each host is logged. When the gRPC endpoint speaks
TLS, so does this channel, with the same certificate; the servers verify each other with the
CAs their client of the bookies trusts (the system's when it has none).

Limits: a call or an answer is at most PACKED_SIZE_MAX bytes (larger ones are refused with a
TableError before they are sent); a client has at most PENDING_CALLS_MAX calls waiting per owner
and a server at most CALLS_IN_FLIGHT_MAX calls running (more are refused with a ConnectionError,
which clients retry); answers and calls waiting to be written are bounded by FramedConnection's
backpressure. A malformed frame closes the connection that carried it, with one log line.
"""

from __future__ import annotations

import itertools
import logging
import math
import ssl
from dataclasses import dataclass
from typing import Callable

import trio

from bkcore.errors import Unauthorized
from bkcore.table.commands import Command, RangeRead, RangeResult, TableError
from bkcore.table.ownership import peer_address_of
from bkcore.table.kv import WatchEvent
from bkcore.table.peer_wire import (
    AUTH_CALL_ID, CANCEL_WATCH, WATCH_ENDED, CancelWatch, PeerAuth, TableAnswer, TableCall, WatchCreated,
    WatchOperation, decode_answers, decode_calls, frame_of, pack_answer, pack_call,
)
from bkcore.table.range import WatchTooSlow
from bkcore.wire import FRAME_SIZE_MAX
from bktransports.auth import RefusalLog, is_secret
from bktransports.connection import FrameCodec, FramedConnection
from bktransports.tls import handshake as tls_handshake

log = logging.getLogger("bk.stream-storage")

CALL_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 5.0
PENDING_CALLS_MAX = 10_000
CALLS_IN_FLIGHT_MAX = 10_000
# Watches one connection may carry (each holds a task on the owner while it lasts), and the
# changes a watch may have waiting on the receiving server.
WATCHES_PER_CONNECTION_MAX = 10_000
WATCH_BUFFER_EVENTS = 10_000
# One call or answer fits in a frame with room for the frame's array header.
PACKED_SIZE_MAX = FRAME_SIZE_MAX - 64

# Servers receive calls and send answers; clients the other way round. Messages are queued
# packed (pack_call, pack_answer), so their size is their length.
_SERVER_CODEC = FrameCodec(encode_frame=frame_of, decode=decode_calls, size_of=len)
_CLIENT_CODEC = FrameCodec(encode_frame=frame_of, decode=decode_answers, size_of=len)


@dataclass(frozen=True, slots=True)
class PeerServerStatistics:
    call_count: int
    refused_call_count: int          # over CALLS_IN_FLIGHT_MAX
    calls_in_flight_peak: int
    received_frame_count: int
    sent_frame_count: int
    malformed_frame_count: int
    refused_connection_count: int    # without the secret, or failing the TLS handshake
    served_without_task_count: int   # calls whose range was open here: queued or read at once


@dataclass(frozen=True, slots=True)
class PeerClientStatistics:
    call_count: int
    sent_frame_count: int
    received_frame_count: int
    connect_count: int
    connection_failure_count: int    # connections that could not be opened, or broke
    timeout_count: int
    late_answer_count: int           # answers to calls that had timed out or been cancelled
    malformed_frame_count: int
    submitted_call_count: int        # of call_count: sent by submit(), without a task waiting


class _Incoming:
    """One connection from another server: its watches by call id, and whether it has proved
    the secret (always, when this server asks for none)."""

    __slots__ = ("peer", "calls", "watches", "is_authenticated")

    def __init__(self, peer: str, calls: trio.Nursery, *, is_authenticated: bool) -> None:
        self.peer = peer
        self.calls = calls
        self.watches: dict[int, trio.CancelScope] = {}
        self.is_authenticated = is_authenticated


class PeerServer:
    """Answers the table calls of other servers against this server's Tables."""

    def __init__(self, tables, *, host: str, port: int = 0, tls: ssl.SSLContext | None = None,
                 auth_secret: bytes = b"") -> None:
        """port 0: any free port (`port` holds the one listened on once run() has started).
        tls: serve over TLS with this server context; auth_secret: take calls only from servers
        that prove it (b"": from any)."""
        self._tables = tables
        self.host, self.port = host, port
        self._tls = tls
        self._auth_secret = auth_secret
        self._refusals = RefusalLog(log, "table calls")
        self._calls_in_flight = 0
        self._call_count = self._refused_call_count = self._calls_in_flight_peak = 0
        self._served_without_task_count = 0
        # Frames of the connections that ended; the live ones are in _connections.
        self._received_frame_count = self._sent_frame_count = self._malformed_frame_count = 0
        self._connections: set[FramedConnection] = set()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; `task_status.started(self)` once listening."""
        try:
            listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        except OSError as exc:
            raise OSError(f"cannot listen for table calls on {self.host}:{self.port}: {exc}") from exc
        self.port = listeners[0].socket.getsockname()[1]
        self._refusals.what = f"table calls on {self.host}:{self.port}"
        task_status.started(self)
        await trio.serve_listeners(self._serve, listeners)

    async def _serve(self, stream: trio.SocketStream) -> None:
        peer = "%s:%d" % stream.socket.getpeername()[:2]
        if self._tls is not None:
            stream = trio.SSLStream(stream, self._tls, server_side=True)
            if not await tls_handshake(stream, what="table calls", refusals=self._refusals):
                return
        connection = None
        try:
            async with trio.open_nursery() as calls:
                incoming = _Incoming(peer, calls, is_authenticated=not self._auth_secret)
                connection = FramedConnection(stream, name=f"table calls from {peer}", codec=_SERVER_CODEC,
                                              on_messages=lambda batch, c: self._take_calls(batch, c, incoming))
                self._connections.add(connection)
                await connection.run()
                if connection.malformed_frame_count:
                    log.warning("table calls from %s: %s; connection closed", peer, connection.close_reason)
                # The calls still running finish (their commands are in the journal's hands);
                # their answers have nowhere to go. The watches have nobody to tell: they end.
                for scope in incoming.watches.values():
                    scope.cancel()
        finally:
            if connection is not None:
                self._connections.discard(connection)
                self._received_frame_count += connection.received_frame_count
                self._sent_frame_count += connection.sent_frame_count
                self._malformed_frame_count += connection.malformed_frame_count

    def _take_calls(self, batch: list[TableCall], connection: FramedConnection, incoming: _Incoming) -> None:
        if connection.is_closed:            # (refused: what it sent after is not looked at)
            return
        if not incoming.is_authenticated:
            batch = self._authenticated(batch, connection, incoming)
        for call in batch:
            kind = type(call.operation)
            if kind is CancelWatch:
                scope = incoming.watches.get(call.call_id)
                if scope is not None:
                    scope.cancel()
                continue
            if kind is PeerAuth:            # (from a server with a secret, to one that asks for none)
                continue
            if kind is WatchOperation:
                if len(incoming.watches) >= WATCHES_PER_CONNECTION_MAX:
                    connection.send(pack_answer(TableAnswer(call.call_id, error=ConnectionError(
                        f"{self.host}:{self.port} has {WATCHES_PER_CONNECTION_MAX} watches from "
                        f"{incoming.peer}; retry"))))
                    continue
                incoming.watches[call.call_id] = trio.CancelScope()
                incoming.calls.start_soon(self._serve_watch, call, connection, incoming.watches)
                continue
            if self._calls_in_flight >= CALLS_IN_FLIGHT_MAX:
                self._refused_call_count += 1
                connection.send(pack_answer(TableAnswer(call.call_id, error=ConnectionError(
                    f"{self.host}:{self.port} has {CALLS_IN_FLIGHT_MAX} table calls running; retry"))))
                continue
            self._calls_in_flight += 1
            self._calls_in_flight_peak = max(self._calls_in_flight_peak, self._calls_in_flight)
            if not self._answer_without_task(call, connection):
                incoming.calls.start_soon(self._answer, call, connection)

    def _answer_without_task(self, call: TableCall, connection: FramedConnection) -> bool:
        """Serve a call as the gRPC gateway serves its own, without a task, when its range is
        open and serving here: a read from the range's state (Tables.read_in_thread), a command
        queued into the range (Tables.submit_here) and answered by the range's callback once
        durable. False (nothing done) leaves it to a task (_answer), which opens the range,
        waits out a handover, or refuses."""
        tables = self._tables
        if call.is_read:
            result = tables.read_in_thread(call.namespace, call.stream, call.pkey, call.operation)
            if result is None:
                return False
            self._call_count += 1
            self._served_without_task_count += 1
            self._calls_in_flight -= 1
            connection.send(self._packed(TableAnswer(call.call_id, result=result)))
            return True

        def on_done(result, error: BaseException | None) -> None:
            self._calls_in_flight -= 1
            connection.send(self._packed(TableAnswer(call.call_id, result=result, error=error)))
        try:
            if not tables.submit_here(call.namespace, call.stream, call.pkey, call.operation, on_done):
                return False
        except Exception:      # noqa: BLE001 - refused at once: the task's path says so properly
            return False
        self._call_count += 1
        self._served_without_task_count += 1
        return True

    def _authenticated(self, batch: list[TableCall], connection: FramedConnection,
                       incoming: _Incoming) -> list[TableCall]:
        """The calls after a first PeerAuth with the secret; none (Unauthorized answered, the
        connection closing, no call run) when the connection starts otherwise."""
        first = batch[0]
        if type(first.operation) is PeerAuth and is_secret(first.operation.secret, self._auth_secret):
            incoming.is_authenticated = True
            return batch[1:]
        reason = ("a wrong secret" if type(first.operation) is PeerAuth
                  else "a table call without the cluster's secret")
        self._refusals.refused(incoming.peer.rpartition(":")[0], f"{reason}; its calls are not run")
        connection.send(pack_answer(TableAnswer(AUTH_CALL_ID, error=Unauthorized(
            f"stream storage server {self.host}:{self.port} takes table calls only from servers that show the "
            f"cluster's secret, and {incoming.peer} sent {reason}: give every server the same one "
            f"(--grpc-auth-secret-file, or the bookies' bookieAuthSecret)"))))
        connection.close("refused: no secret")
        return []

    async def _answer(self, call: TableCall, connection: FramedConnection) -> None:
        self._call_count += 1
        try:
            if call.is_read:
                result = await self._tables.read(call.namespace, call.stream, call.pkey, call.operation)
            else:
                result = await self._tables.execute(call.namespace, call.stream, call.pkey, call.operation)
            answer = TableAnswer(call.call_id, result=result)
        except Exception as exc:      # noqa: BLE001 - every error goes back to the caller, as it would locally
            answer = TableAnswer(call.call_id, error=exc)
        finally:
            self._calls_in_flight -= 1
        connection.send(self._packed(answer))

    @staticmethod
    def _packed(answer: TableAnswer) -> bytes:
        """The answer packed, or, when it cannot go, an error answer saying why."""
        try:
            packed = pack_answer(answer)
        except TypeError as exc:      # a result of no kind peer_wire knows: a bug here, said there
            log.exception("table call %d: cannot send its answer", answer.call_id)
            packed = pack_answer(TableAnswer(answer.call_id, error=RuntimeError(f"cannot send the answer: {exc}")))
        if len(packed) > PACKED_SIZE_MAX:
            packed = pack_answer(TableAnswer(answer.call_id, error=TableError(
                f"the answer is {len(packed)} bytes, more than a table call between servers carries "
                f"({PACKED_SIZE_MAX}); ask for less (a limit)")))
        return packed

    async def _serve_watch(self, call: TableCall, connection: FramedConnection,
                           watches: dict[int, trio.CancelScope]) -> None:
        """Tables.watch for a peer: its changes go back as they come, until the peer cancels the
        call, the connection ends, or the watch does (then its end or its error is the last
        answer)."""
        self._call_count += 1
        op, call_id = call.operation, call.call_id

        def send(result=None, error: BaseException | None = None) -> None:
            connection.send(pack_answer(TableAnswer(call_id, result=result, error=error)))

        try:
            with watches[call_id]:
                try:
                    async for event in self._tables.watch(call.namespace, call.stream, call.pkey, op.lkey,
                                                          op.lkey_end, start_revision=op.start_revision,
                                                          started=lambda revision: send(WatchCreated(revision))):
                        if connection.is_backed_up:
                            raise WatchTooSlow(f"the watcher at {connection.name} reads its changes too slowly; "
                                               f"watch again from the revision after the last change it got")
                        send(event)
                    send(WATCH_ENDED)
                except Exception as exc:      # noqa: BLE001 - every error goes back to the watcher
                    send(error=exc)
        finally:
            watches.pop(call_id, None)

    def statistics(self) -> PeerServerStatistics:
        live = self._connections
        return PeerServerStatistics(
            self._call_count, self._refused_call_count, self._calls_in_flight_peak,
            self._received_frame_count + sum(c.received_frame_count for c in live),
            self._sent_frame_count + sum(c.sent_frame_count for c in live),
            self._malformed_frame_count + sum(c.malformed_frame_count for c in live), self._refusals.count,
            self._served_without_task_count)


class _Pending:
    """A call waiting for its answer: a task waiting on `done`, or (submit) a callback that
    takes the answer, with the time past which the call fails unanswered."""

    __slots__ = ("done", "answer", "on_answer", "deadline")

    def __init__(self, on_answer: Callable[[TableAnswer], None] | None = None, deadline: float = math.inf) -> None:
        self.done = trio.Event() if on_answer is None else None
        self.answer: TableAnswer | None = None
        self.on_answer = on_answer
        self.deadline = deadline

    def answered(self, answer: TableAnswer) -> None:
        self.answer = answer
        if self.on_answer is None:
            self.done.set()
        else:
            self.on_answer(answer)


class _Watch:
    """A watch sent on a link: its answers as they arrive (`arrived` is set when there are
    some), and what ended it here (`failure`: the link broke, or too many answers waited)."""

    __slots__ = ("answers", "arrived", "failure")

    def __init__(self) -> None:
        self.answers: list[TableAnswer] = []
        self.arrived = trio.Event()
        self.failure: BaseException | None = None

    def take(self, answer: TableAnswer) -> None:
        if len(self.answers) >= WATCH_BUFFER_EVENTS:
            self.end(WatchTooSlow(f"{WATCH_BUFFER_EVENTS} changes of a watch were waiting to be read; "
                                  f"watch again from the revision after the last change read"))
            return
        self.answers.append(answer)
        self.arrived.set()

    def end(self, failure: BaseException) -> None:
        if self.failure is None:
            self.failure = failure
        self.arrived.set()


class _Link:
    """The connection to one owner: connecting until `ready` is set, then open (`connection`)
    or failed (`failure`). Invariant: `pending` holds only calls sent on `connection`, each
    answered, failed or given up (and removed) by its caller; so does `watches`."""

    __slots__ = ("owner", "ready", "connection", "failure", "refusal", "pending", "watches")

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.ready = trio.Event()
        self.connection: FramedConnection | None = None
        self.failure = ""
        self.refusal = ""           # why the owner refused this server (its Unauthorized answer)
        self.pending: dict[int, _Pending] = {}
        self.watches: dict[int, _Watch] = {}


class PeerClient:
    """Sends table calls to the servers that own their ranges (see the module's docstring)."""

    def __init__(self, *, store, root: str, nursery: trio.Nursery, timeout_s: float = CALL_TIMEOUT_S,
                 tls: ssl.SSLContext | None = None, auth_secret: bytes = b"") -> None:
        """store, root: the metastore and layout root where servers register (their peer
        addresses); nursery: where the connections run (they end with it). tls: reach the
        owners over TLS, verifying them with this client context; auth_secret: prove it first."""
        self._store, self._root, self._nursery = store, root, nursery
        self.timeout_s = timeout_s
        self._tls = tls
        self._auth_secret = auth_secret
        # One per owner with an open or opening connection; removed when it fails or breaks.
        self._links: dict[str, _Link] = {}
        self._call_ids = itertools.count(1)
        self._call_count = self._connect_count = self._connection_failure_count = 0
        self._timeout_count = self._late_answer_count = self._malformed_frame_count = 0
        self._submitted_call_count = 0
        self._closed_sent_frame_count = self._closed_received_frame_count = 0
        self._refusal_logged = False    # (a refusal is logged once; the calls say it each time)

    async def execute(self, owner: str, namespace: str, stream: str, pkey: bytes, command: Command) -> object:
        """Tables.execute(namespace, stream, pkey, command) on server `owner` (its id)."""
        if isinstance(command, RangeRead):
            raise TypeError("a RangeRead is sent with read(), not execute()")
        return await self._call(owner, TableCall(next(self._call_ids), namespace, stream, pkey, command))

    async def read(self, owner: str, namespace: str, stream: str, pkey: bytes, range_read: RangeRead) -> RangeResult:
        """Tables.read(namespace, stream, pkey, range_read) on server `owner` (its id)."""
        if not isinstance(range_read, RangeRead):
            raise TypeError(f"read() takes a RangeRead, not {type(range_read).__name__}")
        return await self._call(owner, TableCall(next(self._call_ids), namespace, stream, pkey, range_read))

    async def watch(self, owner: str, namespace: str, stream: str, pkey: bytes, lkey: bytes,
                    lkey_end: bytes | None = None, *, start_revision: int = 0, started=None):
        """Tables.watch(namespace, stream, pkey, lkey, lkey_end, start_revision=..., started=...)
        on server `owner`: its changes (WatchEvents), as they come, until the caller stops
        iterating (which ends the owner's watch) or the watch ends there (its error raised here)."""
        call = TableCall(next(self._call_ids), namespace, stream, pkey, WatchOperation(lkey, lkey_end, start_revision))
        packed = self._packed(call)
        link = None
        with trio.move_on_after(self.timeout_s):
            link = await self._link_to(owner)
        if link is None:
            self._timeout_count += 1
            raise ConnectionError(f"stream storage server {owner} could not be reached for a watch within "
                                  f"{self.timeout_s:g} s; retry")
        if len(link.watches) >= WATCHES_PER_CONNECTION_MAX:
            raise ConnectionError(f"{WATCHES_PER_CONNECTION_MAX} watches go to {owner} already; retry")
        watch = link.watches[call.call_id] = _Watch()
        is_over_there = False         # the owner's watch ended: nothing to cancel
        try:
            if not link.connection.send(packed):
                raise ConnectionError(f"the table call connection to {owner} is closing; retry")
            while True:
                await watch.arrived.wait()
                watch.arrived = trio.Event()
                answers, watch.answers = watch.answers, []
                for answer in answers:
                    is_over_there = answer.error is not None or answer.result is WATCH_ENDED
                    if answer.error is not None:
                        raise answer.error
                    result = answer.result
                    if result is WATCH_ENDED:
                        return
                    if type(result) is WatchCreated:
                        if started is not None:
                            started(result.revision)
                    elif type(result) is WatchEvent:
                        yield result
                if watch.failure is not None:
                    raise watch.failure
        finally:
            del link.watches[call.call_id]
            if not is_over_there:         # (a connection that broke takes nothing: no harm)
                link.connection.send(pack_call(TableCall(call.call_id, "", "", b"", CANCEL_WATCH)))

    def submit(self, owner: str, namespace: str, stream: str, pkey: bytes, operation,
               on_done: Callable[[object, BaseException | None], None]) -> bool:
        """execute() or read() (by the operation's kind) without a task, when the connection to
        `owner` is open: the call is sent now, and on_done(result, error) runs once its answer
        arrives, the connection breaks or timeout_s passes (a ConnectionError, as execute()
        raises). False, and nothing sent, when there is no open connection to `owner` yet (or
        too many calls wait for it): the caller goes through execute() or read(). Raises
        TableError for a call too large to send, as they do."""
        link = self._links.get(owner)
        if link is None or link.connection is None or len(link.pending) >= PENDING_CALLS_MAX:
            return False
        call = TableCall(next(self._call_ids), namespace, stream, pkey, operation)
        packed = self._packed(call)
        if not link.connection.send(packed):
            return False

        def on_answer(answer: TableAnswer) -> None:
            on_done(answer.result, answer.error)
        link.pending[call.call_id] = _Pending(on_answer, trio.current_time() + self.timeout_s)
        self._submitted_call_count += 1
        return True

    async def _expire_submitted(self, link: _Link) -> None:
        """Fail the submitted calls on `link` that their owner has not answered in timeout_s
        (the awaited ones have deadlines of their own)."""
        while True:
            await trio.sleep(min(1.0, self.timeout_s / 4))
            now = trio.current_time()
            for call_id, pending in [(i, p) for i, p in link.pending.items() if p.deadline <= now]:
                del link.pending[call_id]
                self._timeout_count += 1
                pending.answered(TableAnswer(call_id, error=ConnectionError(
                    f"stream storage server {link.owner} did not answer a table call within {self.timeout_s:g} s; "
                    f"retry")))

    def _packed(self, call: TableCall) -> bytes:
        packed = pack_call(call)
        if len(packed) > PACKED_SIZE_MAX:
            raise TableError(f"the request is {len(packed)} bytes, more than a table call between servers "
                             f"carries ({PACKED_SIZE_MAX})")
        self._call_count += 1
        return packed

    async def _call(self, owner: str, call: TableCall) -> object:
        packed = self._packed(call)
        pending = _Pending()
        with trio.move_on_after(self.timeout_s) as deadline:
            link = await self._link_to(owner)
            if len(link.pending) >= PENDING_CALLS_MAX:
                raise ConnectionError(f"{PENDING_CALLS_MAX} table calls are waiting for {owner} already; retry")
            if not link.connection.send(packed):
                raise ConnectionError(f"the table call connection to {owner} is closing; retry")
            link.pending[call.call_id] = pending
            try:
                await pending.done.wait()
            finally:
                link.pending.pop(call.call_id, None)
        if deadline.cancelled_caught:
            self._timeout_count += 1
            raise ConnectionError(f"stream storage server {owner} did not answer a table call within "
                                  f"{self.timeout_s:g} s; retry")
        answer = pending.answer
        if answer.error is not None:
            raise answer.error
        return answer.result

    async def _link_to(self, owner: str) -> _Link:
        link = self._links.get(owner)
        if link is None:
            link = self._links[owner] = _Link(owner)
            self._nursery.start_soon(self._run_link, link)
        await link.ready.wait()
        if link.connection is None:
            raise ConnectionError(link.failure)
        return link

    async def _run_link(self, link: _Link) -> None:
        try:
            address, stream = await self._connect(link.owner)
        except ConnectionError as exc:
            self._end_link(link, str(exc))
            return
        self._connect_count += 1
        connection = link.connection = FramedConnection(
            stream, name=f"table calls to {link.owner}", on_messages=lambda answers, _: self._on_answers(link, answers),
            codec=_CLIENT_CODEC)
        if self._auth_secret:           # (the first call on the connection, before any other)
            connection.send(pack_call(TableCall(AUTH_CALL_ID, "", "", b"", PeerAuth(self._auth_secret))))
        link.ready.set()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._expire_submitted, link)
                await connection.run()
                nursery.cancel_scope.cancel()
        finally:
            self._closed_sent_frame_count += connection.sent_frame_count
            self._closed_received_frame_count += connection.received_frame_count
            self._malformed_frame_count += connection.malformed_frame_count
            if connection.malformed_frame_count:
                log.warning("table calls to %s (%s): %s; connection closed", link.owner, address,
                            connection.close_reason)
            self._end_link(link, link.refusal or f"the table call connection to stream storage server {link.owner} "
                                                 f"({address}) ended: {connection.close_reason or 'closed'}; retry")

    async def _connect(self, owner: str) -> tuple[str, trio.abc.Stream]:
        """(owner's peer address, a stream to it, over TLS if this client speaks it); a
        ConnectionError saying why not."""
        stream = None
        try:
            with trio.fail_after(CONNECT_TIMEOUT_S):
                address = await peer_address_of(self._store, self._root, owner)
                host, _, port = address.rpartition(":")
                stream = await trio.open_tcp_stream(host, int(port))
                if self._tls is not None:
                    stream = trio.SSLStream(stream, self._tls, server_hostname=host)
                    await stream.do_handshake()
                return address, stream
        except trio.BrokenResourceError as exc:          # (only the TLS handshake raises it here)
            await trio.aclose_forcefully(stream)
            raise ConnectionError(f"TLS handshake with stream storage server {owner} ({address}) for table calls "
                                  f"failed: {exc.__cause__ or exc}; its certificate must be signed by a CA this "
                                  f"server trusts (--tls-ca, or the bookie's tlsTrustStore)") from None
        except (OSError, ValueError, trio.TooSlowError) as exc:
            if stream is not None:
                await trio.aclose_forcefully(stream)
            raise ConnectionError(f"cannot reach stream storage server {owner} for table calls: "
                                  f"{exc or 'no answer in %g s' % CONNECT_TIMEOUT_S}; retry") from None

    def _on_answers(self, link: _Link, answers: list[TableAnswer]) -> None:
        for answer in answers:
            if answer.call_id == AUTH_CALL_ID and isinstance(answer.error, Unauthorized):
                link.refusal = f"{answer.error}; retry once it does"
                if not self._refusal_logged:
                    self._refusal_logged = True
                    log.warning("table calls to %s: refused: %s", link.owner, answer.error)
                link.connection.close("refused by the owner")
                return
            pending = link.pending.pop(answer.call_id, None)
            if pending is None:
                watch = link.watches.get(answer.call_id)
                if watch is not None:
                    watch.take(answer)
                else:
                    self._late_answer_count += 1
                continue
            pending.answered(answer)

    def _end_link(self, link: _Link, reason: str) -> None:
        """The link is over: every call waiting on it fails now, and the next call to its owner
        opens a new one."""
        self._connection_failure_count += 1
        if self._links.get(link.owner) is link:
            del self._links[link.owner]
        link.failure = reason
        pendings = list(link.pending.values())
        link.pending.clear()
        for pending in pendings:
            pending.answered(TableAnswer(0, error=ConnectionError(reason)))
        for watch in link.watches.values():
            watch.end(ConnectionError(reason))
        link.ready.set()

    def statistics(self) -> PeerClientStatistics:
        live = [link.connection for link in self._links.values() if link.connection is not None]
        return PeerClientStatistics(
            self._call_count, self._closed_sent_frame_count + sum(c.sent_frame_count for c in live),
            self._closed_received_frame_count + sum(c.received_frame_count for c in live),
            self._connect_count, self._connection_failure_count, self._timeout_count, self._late_answer_count,
            self._malformed_frame_count, self._submitted_call_count)
