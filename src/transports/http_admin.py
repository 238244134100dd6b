"""The HTTP admin server (a bookie's httpServerPort; the /metrics port of the other processes):
HTTP/1.1 on trio, parsed by h11.

It owns connections, requests and routing; the endpoints are bktransports.http_admin_api's (a
bookie's) and bktransports.metrics' (/metrics, in every process).
- Keep-alive: a connection carries one request after another (pipelined ones too) until the
  client closes it, asks to (Connection: close, HTTP/1.0), or an error does.
- Limits: a request's head holds at most REQUEST_HEAD_SIZE_MAX bytes (431 otherwise), its body
  REQUEST_BODY_SIZE_MAX (413), and it must arrive whole within REQUEST_TIMEOUT_S of its first
  byte (408); a connection idle for IDLE_TIMEOUT_S between requests is closed without a word.
- Routes: path -> {method: handler}. A trailing "/" is ignored (BookKeeper's docs write
  /api/v1/ledger/list/?...). An unknown path is 404 naming the known ones; a method a path does
  not take is 405 naming those it does (and an Allow header).
- Arguments: query parameters and the fields of a JSON object body, the body's first; typed
  (Request.text/boolean/integer), so that a bad one is 400 with a line saying what was wrong.
- Answers: JSON (application/json) or text. Every error is one plain-text line; a handler that
  fails unexpectedly is 500, with the traceback in the bookie's log, never on the wire.
- Authentication: a server given the cluster's secret answers a request on any path, known or
  not, only if it carries "Authorization: Bearer <secret>" (compared in constant time); any other
  gets 401 with a WWW-Authenticate header (RFC 6750: error="invalid_token" when a wrong one came)
  and one line saying what to send. The first refusal of each client host is logged.
"""

from __future__ import annotations

import http
import json
import logging
import ssl
from dataclasses import dataclass, field
from typing import Awaitable, Callable
from urllib.parse import parse_qs, unquote, urlsplit

import h11
import trio

from bktransports.auth import RefusalLog, is_bearer, peer_host
from bktransports.tls import handshake as tls_handshake

log = logging.getLogger("bk.http")

REQUEST_HEAD_SIZE_MAX = 8192
REQUEST_BODY_SIZE_MAX = 64 * 1024
REQUEST_TIMEOUT_S = 5.0                 # from a request's first byte to its last
IDLE_TIMEOUT_S = 30.0                   # between requests on a kept-alive connection
RECEIVE_SIZE = 16 * 1024
CLOSE_LINGER_S = 1.0
TEXT = "text/plain; charset=utf-8"
JSON = "application/json"
AUTH_REALM = "bookkeeper"


class HttpError(Exception):
    """An answer other than success, as one line of text: raise it from a handler."""

    def __init__(self, status: int, message: str, *, headers: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = TEXT
    headers: tuple[tuple[str, str], ...] = ()


def json_response(value: object, status: int = 200) -> Response:
    return Response(status, (json.dumps(value) + "\n").encode(), JSON)


def text_response(text: str, status: int = 200, content_type: str = TEXT) -> Response:
    return Response(status, text.encode(), content_type)


def error_response(error: HttpError) -> Response:
    return Response(error.status, f"{error.message}\n".encode(), TEXT, error.headers)


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    body: bytes = b""
    authorization: bytes | None = None          # the Authorization header's value, if sent
    _body_fields: dict | None = field(default=None, repr=False)

    def argument(self, name: str) -> object | None:
        """The argument `name`: from the JSON body if it has the field, else from the query (one
        value); None when neither gives it."""
        fields = self._json_fields()
        if name in fields:
            return fields[name]
        values = self.query.get(name, [])
        if len(values) > 1:
            raise HttpError(400, f"{name} is given {len(values)} times; give it once")
        return values[0] if values else None

    def _json_fields(self) -> dict:
        if self._body_fields is None:
            if not self.body.strip():
                self._body_fields = {}
            else:
                try:
                    fields = json.loads(self.body)
                except (UnicodeDecodeError, ValueError) as exc:
                    raise HttpError(400, f"the body is not JSON: {exc}") from None
                if not isinstance(fields, dict):
                    raise HttpError(400, f"the body must be a JSON object, not {type(fields).__name__}")
                self._body_fields = fields
        return self._body_fields

    def text(self, name: str, *, choices: tuple[str, ...] = (), required: bool = False) -> str | None:
        value = self.argument(name)
        if value is None:
            if required:
                raise HttpError(400, f"{name} is required" + (f": one of {', '.join(choices)}" if choices else ""))
            return None
        if not isinstance(value, str) or (choices and value not in choices):
            expected = f"one of {', '.join(choices)}" if choices else "text"
            raise HttpError(400, f"{name} must be {expected}, not {json.dumps(value)}")
        return value

    def texts(self, name: str, *, required: bool = False) -> list[str]:
        """One text or a JSON list of them (BookKeeper's bookie_src), as a list; [] when absent
        and not required."""
        value = self.argument(name)
        expected = f'a text or a list of them (in a JSON body: "{name}": ["..."])'
        if value is None:
            if required:
                raise HttpError(400, f"{name} is required: {expected}")
            return []
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not value or not all(isinstance(each, str) for each in value):
            raise HttpError(400, f"{name} must be {expected}, not {json.dumps(value)}")
        return value

    def boolean(self, name: str, *, default: bool | None = None) -> bool:
        """true/false, as JSON or as text in any case; required when there is no default."""
        value = self.argument(name)
        if value is None:
            if default is None:
                raise HttpError(400, f"{name} is required: true or false")
            return default
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if type(value) is not bool:
            raise HttpError(400, f"{name} must be true or false, not {json.dumps(value)}")
        return value

    def integer(self, name: str, *, minimum: int, maximum: int, default: int | None = None) -> int:
        """A whole number in [minimum, maximum], as JSON or as decimal text; required when there
        is no default."""
        value = self.argument(name)
        if value is None:
            if default is not None:
                return default
            raise HttpError(400, f"{name} is required: a number from {minimum} to {maximum}")
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        if type(value) is not int or not minimum <= value <= maximum:
            raise HttpError(400, f"{name} must be a number from {minimum} to {maximum}, not {json.dumps(value)}")
        return value


Handler = Callable[[Request], Awaitable[Response]]
Routes = dict[str, dict[str, Handler]]


class AdminHttpServer:
    def __init__(self, routes: Routes, *, tls: ssl.SSLContext | None = None, auth_secret: bytes = b"") -> None:
        """tls: serve HTTPS with this server context (BookKeeper's httpServerTlsEnable).
        auth_secret: answer only requests with "Authorization: Bearer <auth_secret>" (b"": all)."""
        self.routes = routes
        self._tls = tls
        self._auth_secret = auth_secret
        self.refusals = RefusalLog(log, "HTTP admin")

    async def serve(self, port: int, host: str, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            listeners = await trio.open_tcp_listeners(port, host=host)
        except OSError as exc:
            raise OSError(f"cannot listen on {host}:{port} for HTTP: {exc.strerror or exc} (is another program "
                          f"there?)") from None
        if self._tls is not None:
            listeners = [trio.SSLListener(listener, self._tls, https_compatible=True) for listener in listeners]
        task_status.started(listeners[0].transport_listener.socket.getsockname()[1] if self._tls is not None
                            else listeners[0].socket.getsockname()[1])
        await trio.serve_listeners(self._serve_connection, listeners)

    async def _serve_connection(self, stream: trio.abc.Stream) -> None:
        if isinstance(stream, trio.SSLStream) and not await tls_handshake(stream, what="HTTP admin"):
            return
        await self._serve_http(stream)

    async def _serve_http(self, stream: trio.abc.Stream) -> None:
        connection = h11.Connection(h11.SERVER, max_incomplete_event_size=REQUEST_HEAD_SIZE_MAX)
        try:
            while True:
                try:
                    request = await self._receive_request(connection, stream)
                except HttpError as error:
                    # Malformed, too large or too slow: answer and close (what follows in the
                    # stream cannot be trusted to start a request).
                    if connection.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                        await self._send(connection, stream, error_response(error), closing=True)
                        await _close_gently(stream)
                    return
                if request is None:
                    return
                refusal = self._refusal(request, stream)
                response = error_response(refusal) if refusal is not None else await self._answer(request)
                await self._send(connection, stream, response, has_body=request.method != "HEAD")
                if connection.our_state is not h11.DONE or connection.their_state is not h11.DONE:
                    return          # one of us asked to close
                connection.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except Exception:
            # One connection's trouble must not stop the server (and with it the bookie).
            log.exception("HTTP admin: a connection failed; closing it")
        finally:
            await trio.aclose_forcefully(stream)

    async def _receive_request(self, connection: h11.Connection, stream: trio.SocketStream) -> Request | None:
        """The next request, read whole; None when the client closed (or idled out) between
        requests. Raises HttpError for a request that cannot be served."""
        buffered, is_closed = connection.trailing_data      # (what came after the last request)
        if not buffered and not is_closed:
            with trio.move_on_after(IDLE_TIMEOUT_S):
                connection.receive_data(await stream.receive_some(RECEIVE_SIZE))
            if not connection.trailing_data[0] and not connection.trailing_data[1]:
                return None                                 # idle too long
        deadline = trio.current_time() + REQUEST_TIMEOUT_S
        head = await _next_event(connection, stream, deadline)
        if type(head) is h11.ConnectionClosed:
            return None
        assert type(head) is h11.Request, head
        if _head_size(head) > REQUEST_HEAD_SIZE_MAX:       # (h11 limits only a head still incomplete)
            raise HttpError(431, f"request head over {REQUEST_HEAD_SIZE_MAX} bytes")
        declared = _content_length(head)
        if declared is not None and declared > REQUEST_BODY_SIZE_MAX:
            raise HttpError(413, f"request body of {declared} bytes; at most {REQUEST_BODY_SIZE_MAX} are taken")
        if connection.they_are_waiting_for_100_continue:
            await stream.send_all(connection.send(h11.InformationalResponse(status_code=100, headers=[])))
        body = bytearray()
        while type(event := await _next_event(connection, stream, deadline)) is h11.Data:
            body += event.data
            if len(body) > REQUEST_BODY_SIZE_MAX:
                raise HttpError(413, f"request body over {REQUEST_BODY_SIZE_MAX} bytes")
        if type(event) is not h11.EndOfMessage:
            return None                 # the client left halfway through its body
        try:
            target = urlsplit(head.target.decode("ascii"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise HttpError(400, f"the request target cannot be read: {exc}") from None
        path = unquote(target.path).rstrip("/") or "/"
        return Request(head.method.decode("ascii"), path, parse_qs(target.query, keep_blank_values=True),
                       bytes(body), authorization=_header(head, b"authorization"))

    def _refusal(self, request: Request, stream: trio.abc.Stream) -> HttpError | None:
        """401 for a request without the secret, when this server asks for one; else None."""
        if not self._auth_secret or is_bearer(request.authorization, self._auth_secret):
            return None
        if request.authorization is None:
            challenge = f'Bearer realm="{AUTH_REALM}"'
            reason = "this endpoint asks for the cluster's secret: send the header Authorization: Bearer <secret>"
        else:
            challenge = f'Bearer realm="{AUTH_REALM}", error="invalid_token"'
            reason = "the Authorization header does not carry this endpoint's secret (Bearer <secret>)"
        self.refusals.refused(peer_host(stream), f"{request.method} {request.path}: {reason}")
        return HttpError(401, reason, headers=(("WWW-Authenticate", challenge),))

    async def _answer(self, request: Request) -> Response:
        methods = self.routes.get(request.path)
        try:
            if methods is None:
                raise HttpError(404, f"no endpoint {request.path}; the endpoints are {', '.join(sorted(self.routes))}")
            handler = methods.get(request.method)
            if handler is None:
                allowed = ", ".join(sorted(methods))
                raise HttpError(405, f"{request.method} is not allowed on {request.path}; use {allowed}",
                                headers=(("Allow", allowed),))
            return await handler(request)
        except HttpError as error:
            return error_response(error)
        except Exception as exc:
            log.exception("HTTP admin: %s %s failed", request.method, request.path)
            return error_response(HttpError(500, f"internal error ({type(exc).__name__}); see the server's log"))

    async def _send(self, connection: h11.Connection, stream: trio.SocketStream, response: Response, *,
                    closing: bool = False, has_body: bool = True) -> None:
        """has_body=False: the answer to a HEAD request (its headers, not its body)."""
        headers = [("Content-Type", response.content_type), ("Content-Length", str(len(response.body))),
                   *response.headers]
        if closing:
            headers.append(("Connection", "close"))
        reason = http.HTTPStatus(response.status).phrase.encode()
        data = connection.send(h11.Response(status_code=response.status, headers=headers, reason=reason))
        if response.body and has_body:
            data += connection.send(h11.Data(data=response.body))
        data += connection.send(h11.EndOfMessage())
        await stream.send_all(data)


async def _next_event(connection: h11.Connection, stream: trio.SocketStream, deadline: float):
    """h11's next event of a request, receiving as needed until the deadline (408 after it)."""
    with trio.move_on_at(deadline):
        while True:
            try:
                event = connection.next_event()
            except h11.RemoteProtocolError as exc:
                if exc.error_status_hint == 431:
                    raise HttpError(431, f"request head over {REQUEST_HEAD_SIZE_MAX} bytes") from None
                raise HttpError(exc.error_status_hint, f"malformed request: {exc}") from None
            if event is not h11.NEED_DATA:
                return event
            connection.receive_data(await stream.receive_some(RECEIVE_SIZE))
    raise HttpError(408, f"the request did not arrive whole within {REQUEST_TIMEOUT_S:g} s")


async def _close_gently(stream: trio.SocketStream) -> None:
    """After an error answer: stop sending, then read what the client still sends for a moment,
    so that closing with unread data (a TCP reset) does not destroy the answer before it reads it."""
    with trio.move_on_after(CLOSE_LINGER_S):
        await stream.send_eof()
        while await stream.receive_some(RECEIVE_SIZE):
            pass


def _head_size(request: h11.Request) -> int:
    """The size of the request line and headers as sent (give or take their spaces)."""
    line = len(request.method) + len(request.target) + len(b" HTTP/1.1\r\n") + 1
    return line + sum(len(name) + len(value) + 4 for name, value in request.headers) + 2


def _content_length(request: h11.Request) -> int | None:
    value = _header(request, b"content-length")
    return None if value is None else int(value)        # (h11 has checked it is a number)


def _header(request: h11.Request, name: bytes) -> bytes | None:
    """The value of the header `name` (lower case, as h11 gives names), or None."""
    for each, value in request.headers:
        if each == name:
            return value
    return None

