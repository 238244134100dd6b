"""gRPC over HTTP/2 on trio: a server whose calls are handled in the trio loop itself.

grpc.aio needs an asyncio loop, and the table service lives in trio: a server on grpc.aio runs
the two loops in two threads and hands every call across (bkbench.grpc_bridge), which costs
as much CPU as gRPC's own work and makes the threads fight over the GIL. This server speaks the
same protocol (HTTP/2 through bktransports.http2, gRPC's length-prefixed messages and status
trailers) from trio tasks, so a call reaches its handler without leaving the loop; the
stream-storage endpoint (streamstorage.grpc_gateway) is served by it. `bk bench table
--ceiling` measures it beside grpc.aio (kind "trio_grpc"): less than half of grpc.aio's CPU per
call here.

    server = GrpcServer({
        "/pkg.Service/Get": Unary(Request.FromString, Response.SerializeToString, handle=get),
        "/pkg.Service/Put": Unary(..., start=start_put),          # answered by a callback
        "/pkg.Service/Watch": ServerStream(..., handle=watch),      # send(message) for each
    })
    await nursery.start(server.serve, listeners)
    ...
    await server.stop(grace_s=1.0)      # streams end now, unary calls get the grace to finish

A unary method either has `handle(request, call)`, a coroutine run as a task of its own, or
`start(request, call, answer)`, a plain function that takes the call and later (or at once)
calls answer(response, error) from the loop: no task per call, for handlers that mostly queue
work somewhere a callback finishes it. A handler ends a call with a status by raising
GrpcError; any other exception is INTERNAL with its message. Request headers other than
HTTP/2's and gRPC's own are the call's metadata (names lowercase; values str, or bytes for
names ending in "-bin", which travel base64-encoded as gRPC has it), and so are trailers.
A server stream's handler is a coroutine `handle(request, call, send)` that calls send(message)
for each message; call.is_backed_up says when the client has fallen far behind.

With `tls` (server_tls_context(cert, key)) it serves over TLS, with ALPN "h2" as gRPC clients
require. What it does not do: compressed messages (refused with UNIMPLEMENTED), client
streaming, client certificates.
Each method's calls are counted and timed (GrpcServer.call_stats: started, completed, latency
by success), as BookKeeper's MonitoringServerInterceptor does; streamstorage.metrics publishes them.
A deadline (grpc-timeout) cancels a task handler's work when it passes; the client gives up at
its deadline anyway, so callback handlers are not told. Outgoing data respects HTTP/2 flow
control: a stream whose window is spent waits for the client's WINDOW_UPDATE.
"""

from __future__ import annotations

import base64
import binascii
import logging
import math
import os
import ssl
import struct
import time
from dataclasses import dataclass
from typing import Awaitable, Callable
from urllib.parse import quote

import trio

from bktransports.metrics import CallStats
from bktransports.auth import is_bearer
from bktransports.tls import handshake as tls_handshake, server_context as tls_server_context
from bktransports.http2 import RESPONSE_HEADER_BLOCK, Http2Server, ProtocolError, encode_literal

log = logging.getLogger("bk.grpc")

# gRPC status codes (grpc.StatusCode's numbers).
OK, CANCELLED, UNKNOWN, INVALID_ARGUMENT, DEADLINE_EXCEEDED = 0, 1, 2, 3, 4
NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED, RESOURCE_EXHAUSTED = 5, 6, 7, 8
FAILED_PRECONDITION, ABORTED, OUT_OF_RANGE, UNIMPLEMENTED, INTERNAL, UNAVAILABLE = 9, 10, 11, 12, 13, 14
UNAUTHENTICATED = 16
# The request header a client proves the server's secret with: "Bearer <secret>".
AUTHORIZATION_HEADER = b"authorization"

RECEIVE_SIZE = 256 * 1024
# Windows granted to clients: one call's request may be this large before they wait for us.
INITIAL_WINDOW_SIZE = 4 * 1024 * 1024
CONNECTION_WINDOW_SIZE = 16 * 1024 * 1024
MESSAGE_SIZE_MAX = 16 * 1024 * 1024
MAX_CONCURRENT_STREAMS = 1000
# What a server stream may hold for a client that does not read before is_backed_up says so.
STREAM_BACKLOG_MAX = 16 * 1024 * 1024
_MESSAGE_HEADER = struct.Struct(">BI")
_OK_STATUS = encode_literal(b"grpc-status", b"0")
_RESERVED_HEADERS = frozenset({b"content-type", b"te", b"grpc-timeout", b"grpc-encoding", b"grpc-accept-encoding",
                               b"user-agent", b"grpc-message-type"})
_TIMEOUT_UNITS = {b"H": 3600.0, b"M": 60.0, b"S": 1.0, b"m": 1e-3, b"u": 1e-6, b"n": 1e-9}


class GrpcError(Exception):
    """Raised by a handler: the call ends with this status, message and trailing metadata."""

    def __init__(self, code: int, message: str = "", trailers: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.trailers = trailers


@dataclass(frozen=True)
class Unary:
    decode: Callable[[bytes], object]
    encode: Callable[[object], bytes]
    handle: Callable[[object, "Call"], Awaitable[object]] | None = None
    start: Callable[[object, "Call", Callable[[object, BaseException | None], None]], None] | None = None


@dataclass(frozen=True)
class ServerStream:
    decode: Callable[[bytes], object]
    encode: Callable[[object], bytes]
    handle: Callable[[object, "Call", Callable[[object], None]], Awaitable[None]]


class Call:
    """One call as its handler sees it: the request's metadata, its deadline (trio time, inf
    if none), and room for trailing metadata."""

    __slots__ = ("method", "metadata", "deadline", "trailers", "_connection", "_stream_id", "_scope", "is_done",
                 "is_stream", "stats", "started_s")

    def __init__(self, connection: _Connection, stream_id: int, method: str, headers: tuple) -> None:
        self._connection, self._stream_id = connection, stream_id
        self.method = method
        self.metadata: dict[str, str] = {}
        self.deadline = math.inf
        for name, value in headers:
            if name[:1] == b":" or name in _RESERVED_HEADERS:
                if name == b"grpc-timeout":
                    self.deadline = trio.current_time() + _timeout_s(value)
                continue
            key = name.decode("latin-1").lower()
            if key.endswith("-bin"):
                try:
                    self.metadata[key] = base64.b64decode(value + b"=" * (-len(value) % 4))
                except binascii.Error:
                    continue
            else:
                self.metadata[key] = value.decode("latin-1")
        self.trailers: list[tuple[str, str | bytes]] = []
        self._scope: trio.CancelScope | None = None
        self.is_done = False
        self.is_stream = False
        self.stats: CallStats | None = None     # its method's, once the call is taken
        self.started_s = 0.0                    # (perf_counter)

    def header(self, name: str) -> str | bytes | None:
        return self.metadata.get(name)

    @property
    def is_backed_up(self) -> bool:
        """A server stream's client has not taken STREAM_BACKLOG_MAX bytes sent to it."""
        stream = self._connection._streams.get(self._stream_id)
        return stream is not None and len(stream.outbound) > STREAM_BACKLOG_MAX


def _timeout_s(value: bytes) -> float:
    try:
        return int(value[:-1]) * _TIMEOUT_UNITS[value[-1:]]
    except (ValueError, KeyError):
        return math.inf


def _status_of(error: BaseException) -> tuple[int, str, tuple]:
    if isinstance(error, GrpcError):
        return error.code, error.message, error.trailers
    return INTERNAL, f"{type(error).__name__}: {error}", ()


class _Stream:
    """A request being received, then its answer's bytes waiting for flow-control window."""

    __slots__ = ("path", "headers", "body", "outbound", "end_after", "headers_sent")

    def __init__(self, path: str, headers: tuple) -> None:
        self.path, self.headers = path, headers
        self.body = bytearray()
        self.headers_sent = False
        self.outbound = bytearray()       # gRPC message bytes the window has not let out yet
        self.end_after: bytes | None = None  # the trailers' header block, sent once outbound is empty


class _Connection:
    def __init__(self, server: GrpcServer, stream: trio.abc.Stream, nursery: trio.Nursery) -> None:
        self._server = server
        self._socket_stream = stream
        # A plain TCP stream is written straight to its socket when the writer task is idle; a
        # TLS one always through the stream (-1).
        self._fd = stream.socket.fileno() if isinstance(stream, trio.SocketStream) else -1
        self._nursery = nursery
        self.http2 = Http2Server(self, initial_window=INITIAL_WINDOW_SIZE, connection_window=CONNECTION_WINDOW_SIZE,
                                 max_concurrent_streams=MAX_CONCURRENT_STREAMS)
        self._streams: dict[int, _Stream] = {}
        self._calls: dict[int, Call] = {}
        self._unsent = b""
        self._is_writing = False
        self._send_wakeup = trio.Event()
        self._in_receive = False             # answers made meanwhile are flushed after the batch
        self.is_closed = False

    # -- receiving --------------------------------------------------------------------------

    async def run(self) -> None:
        self.flush()                  # (our SETTINGS)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._write_loop)
            try:
                while True:
                    data = await self._socket_stream.receive_some(RECEIVE_SIZE)
                    if not data:
                        break
                    self._in_receive = True
                    try:
                        self.http2.receive(data)
                    except ProtocolError:
                        break                 # (its GOAWAY goes out with the flush below)
                    finally:
                        self._in_receive = False
                        self.flush()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            finally:
                self._close()
                nursery.cancel_scope.cancel()

    # -- what the HTTP/2 layer says (Http2Server's owner) --------------------------------------

    def on_request(self, stream_id: int, headers: tuple, end_stream: bool) -> None:
        path = ""
        for name, value in headers:
            if name == b":path":
                path = value.decode("latin-1")
                break
        stream = self._streams[stream_id] = _Stream(path, headers)
        if end_stream:
            self._dispatch(stream_id, stream)

    def on_data(self, stream_id: int, data: bytes, end_stream: bool) -> None:
        stream = self._streams.get(stream_id)
        if stream is None or stream.end_after is not None:
            return
        stream.body += data
        if len(stream.body) > MESSAGE_SIZE_MAX + _MESSAGE_HEADER.size:
            self._end(stream_id, RESOURCE_EXHAUSTED, f"a request larger than {MESSAGE_SIZE_MAX} bytes (the server's "
                                                     f"limit)")
        elif end_stream:
            self._dispatch(stream_id, stream)

    def on_window(self, stream_id: int) -> None:
        self._send_waiting(stream_id)

    def on_reset(self, stream_id: int) -> None:
        self._forget(stream_id)

    def on_goaway(self) -> None:
        self._close()

    def _dispatch(self, stream_id: int, stream: _Stream) -> None:
        if self._server.is_stopping:
            self._end(stream_id, UNAVAILABLE, "the server is stopping")
            return
        method = self._server.methods.get(stream.path)
        if method is None:
            self._end(stream_id, UNIMPLEMENTED, f"unknown method {stream.path}")
            return
        if self._server.auth_secret and not self._server.is_authorized(stream.headers):
            self._end(stream_id, UNAUTHENTICATED, "this server asks for the cluster's secret (authorization: Bearer ...)")
            return
        body = stream.body
        stream.body = bytearray()
        if len(body) < 5:
            self._end(stream_id, INTERNAL, "no request message")
            return
        compressed, length = _MESSAGE_HEADER.unpack_from(body)
        if compressed:
            self._end(stream_id, UNIMPLEMENTED, "compressed messages are not supported")
            return
        if length != len(body) - 5:
            self._end(stream_id, INTERNAL, "expected one request message")
            return
        call = Call(self, stream_id, stream.path, stream.headers)
        call.stats = self._server.stats_of(stream.path)
        call.stats.started_count += 1
        call.started_s = time.perf_counter()
        try:
            request = method.decode(bytes(body[5:]))
        except Exception as exc:      # noqa: BLE001 - a malformed request ends its call
            self._end(stream_id, INVALID_ARGUMENT, f"cannot decode the request: {exc}")
            return
        self._calls[stream_id] = call
        if type(method) is ServerStream:
            call.is_stream = True
            self._nursery.start_soon(self._run_stream, method, request, call)
        elif method.start is not None:
            def answer(response, error: BaseException | None = None) -> None:
                self._answer(call, method, response, error)
            try:
                method.start(request, call, answer)
            except Exception as exc:      # noqa: BLE001 - the call's outcome
                self._answer(call, method, None, exc)
        else:
            self._nursery.start_soon(self._run_unary, method, request, call)

    # -- handlers -----------------------------------------------------------------------------

    async def _run_unary(self, method: Unary, request, call: Call) -> None:
        with trio.CancelScope(deadline=call.deadline) as scope:
            call._scope = scope
            try:
                response = await method.handle(request, call)
            except Exception as exc:      # noqa: BLE001 - the call's outcome
                self._answer(call, method, None, exc)
                return
            self._answer(call, method, response, None)
            return
        self._end_cancelled(call)

    async def _run_stream(self, method: ServerStream, request, call: Call) -> None:
        def send(item) -> None:
            if not call.is_done:
                self._send_message(call._stream_id, method.encode(item))
                self.flush()

        with trio.CancelScope(deadline=call.deadline) as scope:
            call._scope = scope
            try:
                self._start_response(call)
                await method.handle(request, call, send)
            except Exception as exc:      # noqa: BLE001 - the call's outcome
                self._finish(call, *_status_of(exc))
                return
            self._finish(call, OK, "")
            return
        self._end_cancelled(call)

    def _end_cancelled(self, call: Call) -> None:
        """A handler's scope was cancelled: the deadline passed, or the server is stopping (a
        reset by the client has already ended the call)."""
        if call.is_done:
            return
        if trio.current_time() >= call.deadline:
            self._finish(call, DEADLINE_EXCEEDED, "deadline exceeded")
        else:
            self._finish(call, UNAVAILABLE, "the server is stopping")

    def _answer(self, call: Call, method: Unary, response, error: BaseException | None) -> None:
        """A unary call's outcome: its response and OK, or the error's status. Never raises
        (it is called from whatever callback finished the work)."""
        if call.is_done:
            return                        # (reset by the client meanwhile, or the connection closed)
        if error is not None:
            self._finish(call, *_status_of(error))
        else:
            try:
                data = method.encode(response)
            except Exception as exc:      # noqa: BLE001 - a response that cannot be encoded
                self._finish(call, *_status_of(exc))
                return
            self._start_response(call)
            self._send_message(call._stream_id, data)
            self._finish(call, OK, "")

    # -- sending ------------------------------------------------------------------------------

    def _start_response(self, call: Call) -> None:
        stream = self._streams.get(call._stream_id)
        if stream is not None and not stream.headers_sent and not self.is_closed:
            stream.headers_sent = True
            self.http2.send_headers(call._stream_id, RESPONSE_HEADER_BLOCK, end_stream=False)

    def _send_message(self, stream_id: int, data: bytes) -> None:
        stream = self._streams.get(stream_id)
        if stream is None or self.is_closed:
            return
        message = _MESSAGE_HEADER.pack(0, len(data)) + data
        if stream.outbound:
            stream.outbound += message
        else:
            sent = self.http2.send_data(stream_id, message)
            if sent == len(message):
                return                    # (the usual case: it fits at once)
            stream.outbound += memoryview(message)[sent:]
        self._send_waiting(stream_id)

    def _finish(self, call: Call, code: int, message: str, trailers: tuple = ()) -> None:
        call.is_done = True
        stats = call.stats
        if stats is not None:
            stats.completed_count += 1
            stats.latency.observe(time.perf_counter() - call.started_s, is_success=code == OK)
        stream_id = call._stream_id
        self._calls.pop(stream_id, None)
        stream = self._streams.get(stream_id)
        if stream is None:
            return                        # (reset by the client)
        block = _OK_STATUS if code == OK else encode_literal(b"grpc-status", str(code).encode())
        if message:
            block += encode_literal(b"grpc-message", quote(message, safe=" ").encode())
        for name, value in (*call.trailers, *trailers):
            block += encode_literal(name.lower().encode("latin-1"), base64.b64encode(value) if name.endswith("-bin")
                                    else value.encode("latin-1"))
        if not stream.headers_sent:          # a trailers-only response
            stream.headers_sent = True
            block = RESPONSE_HEADER_BLOCK + block
        stream.end_after = block
        self._send_waiting(stream_id)
        self.flush()

    def _end(self, stream_id: int, code: int, message: str) -> None:
        """A call refused before it had a handler."""
        self._finish(Call(self, stream_id, "", []), code, message)

    def _send_waiting(self, stream_id: int) -> None:
        """Send what the flow-control windows allow of the stream's waiting bytes (of every
        stream's, for a connection-wide WINDOW_UPDATE), then its trailers once nothing waits."""
        if stream_id == 0:
            for waiting_id in [i for i, s in self._streams.items() if s.outbound or s.end_after]:
                self._send_waiting(waiting_id)
            return
        stream = self._streams.get(stream_id)
        if stream is None or self.is_closed:
            return
        if stream.outbound:
            sent = self.http2.send_data(stream_id, stream.outbound)
            del stream.outbound[:sent]
            if stream.outbound:
                return                    # (until the client's WINDOW_UPDATE)
        if stream.end_after is not None:
            self.http2.send_headers(stream_id, stream.end_after, end_stream=True)
            self._streams.pop(stream_id, None)

    def _forget(self, stream_id: int) -> None:
        self.http2.forget(stream_id)
        self._streams.pop(stream_id, None)
        call = self._calls.pop(stream_id, None)
        if call is not None:
            call.is_done = True
            if call._scope is not None:
                call._scope.cancel()

    def flush(self) -> None:
        """Write what the HTTP/2 layer has queued: at once with a non-blocking write when the writer task is
        idle, the rest by the writer task."""
        if self._in_receive:
            return
        data = self.http2.take_output()
        if not data:
            return
        if self._is_writing or self._unsent or self.is_closed or self._fd < 0:
            self._unsent += data
            self._send_wakeup.set()
            return
        try:
            written = os.write(self._fd, data)
        except OSError:                # would block, or broken: the writer task finds out which
            written = 0
        if written < len(data):
            self._unsent = data[written:]
            self._send_wakeup.set()

    async def _write_loop(self) -> None:
        while True:
            await self._send_wakeup.wait()
            self._send_wakeup = trio.Event()
            self._is_writing = True
            while self._unsent:
                data, self._unsent = self._unsent, b""
                await self._socket_stream.send_all(data)
            self._is_writing = False

    def _close(self) -> None:
        self.is_closed = True
        for stream_id in list(self._calls):
            self._forget(stream_id)

    @property
    def unary_calls(self) -> int:
        return sum(1 for call in self._calls.values() if not call.is_stream)

    def end_streams(self) -> None:
        """Server streams end now (UNAVAILABLE: their clients resume elsewhere)."""
        for call in list(self._calls.values()):
            if call.is_stream and call._scope is not None:
                call._scope.cancel()


def server_tls_context(cert_file: str, key_file: str | None = None) -> ssl.SSLContext:
    """A server context for gRPC over TLS: the certificate chain and key, and ALPN "h2", which
    gRPC clients require."""
    return tls_server_context(cert_file, key_file, alpn=("h2",))


class GrpcServer:
    def __init__(self, methods: dict[str, Unary | ServerStream], *, tls: ssl.SSLContext | None = None,
                 auth_secret: bytes = b"", call_stats: dict[str, CallStats] | None = None) -> None:
        """tls: serve over TLS with this context (server_tls_context makes one). auth_secret:
        answer only calls whose authorization header is "Bearer <secret>" (UNAUTHENTICATED
        otherwise). call_stats: where the calls of each method are counted and timed (by
        method path; a dict of the caller's, to keep them across servers)."""
        self.methods = methods
        self.call_stats = {} if call_stats is None else call_stats
        self._tls = tls
        self.auth_secret = auth_secret
        self.is_stopping = False
        self._connections: set[_Connection] = set()
        self._nursery: trio.Nursery | None = None
        self._accepting = trio.CancelScope()

    def stats_of(self, path: str) -> CallStats:
        stats = self.call_stats.get(path)
        if stats is None:
            stats = self.call_stats[path] = CallStats()
        return stats

    def is_authorized(self, headers: tuple) -> bool:
        for name, value in headers:
            if name == AUTHORIZATION_HEADER:
                return is_bearer(value, self.auth_secret)
        return False

    async def serve(self, listeners: list[trio.SocketListener], *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Serve connections on `listeners` until cancelled (calls in flight are cancelled), or
        until stop()."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._accept_all, listeners, nursery)
            task_status.started()

    async def _accept_all(self, listeners: list[trio.SocketListener], nursery: trio.Nursery) -> None:
        with self._accepting:
            async with trio.open_nursery() as accepting:
                for listener in listeners:
                    accepting.start_soon(self._accept, listener, nursery)

    async def stop(self, grace_s: float) -> None:
        """Stop listening; refuse new calls (UNAVAILABLE); end server streams now; give the
        unary calls in flight up to grace_s to finish; then close every connection."""
        self.is_stopping = True
        self._accepting.cancel()
        for connection in list(self._connections):
            connection.end_streams()
        with trio.move_on_after(grace_s):
            while any(connection.unary_calls for connection in self._connections):
                await trio.sleep(0.01)
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    async def _accept(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        async with listener:
            while True:
                stream = await listener.accept()
                nursery.start_soon(self._serve_connection, stream)

    async def _serve_connection(self, stream: trio.abc.Stream) -> None:
        if self._tls is not None:
            stream = trio.SSLStream(stream, self._tls, server_side=True)
            if not await tls_handshake(stream, what="gRPC"):
                return
        async with stream, trio.open_nursery() as calls:
            connection = _Connection(self, stream, calls)
            self._connections.add(connection)
            try:
                await connection.run()
            finally:
                self._connections.discard(connection)
                calls.cancel_scope.cancel()

