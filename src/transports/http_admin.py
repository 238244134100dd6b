"""The bookie's HTTP admin endpoint (httpServerPort): a small HTTP/1.1 server on trio.

    GET /heartbeat                          "OK"
    GET /metrics                            Prometheus text: counters, queue sizes, latency histograms
    GET /api/v1/bookie/state                JSON: id, readonly, registered, running, journal backlog
    GET /api/v1/ledger/metadata?ledger_id=N JSON: that ledger's metadata, read from the metastore

One request per connection (Connection: close); requests larger than 8 KiB or slower than 5 s
are refused. Anything else is 404 / 405 / 400 with a line saying what was wrong.
"""

from __future__ import annotations

import json
import logging
from urllib.parse import parse_qs, urlsplit

import trio

log = logging.getLogger("bk.http")

REQUEST_SIZE_MAX = 8192
REQUEST_TIMEOUT_S = 5.0
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 500: "Internal Server Error"}


def _response(status: int, body: str, content_type: str = "text/plain; charset=utf-8") -> bytes:
    data = body.encode()
    head = (f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n")
    return head.encode() + data


class AdminHttpServer:
    def __init__(self, bookie_server) -> None:
        self.bookie = bookie_server

    async def serve(self, port: int, host: str, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(port, host=host)
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        try:
            with trio.move_on_after(REQUEST_TIMEOUT_S):
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = await stream.receive_some(4096)
                    if not chunk:
                        return
                    data += chunk
                    if len(data) > REQUEST_SIZE_MAX:
                        await stream.send_all(_response(400, "request too large\n"))
                        return
                await stream.send_all(await self._answer(data))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(stream)

    async def _answer(self, data: bytes) -> bytes:
        try:
            method, target, _ = data.split(b"\r\n", 1)[0].decode("ascii").split(" ", 2)
        except (UnicodeDecodeError, ValueError):
            return _response(400, "malformed request line\n")
        if method != "GET":
            return _response(405, f"{method} not allowed; every endpoint is GET\n")
        url = urlsplit(target)
        try:
            if url.path == "/heartbeat":
                return _response(200, "OK\n")
            if url.path == "/metrics":
                return _response(200, self.bookie.metrics_text(), "text/plain; version=0.0.4")
            if url.path == "/api/v1/bookie/state":
                return _response(200, json.dumps(self.bookie.state()) + "\n", "application/json")
            if url.path == "/api/v1/ledger/metadata":
                return await self._ledger_metadata(parse_qs(url.query))
        except Exception:
            log.exception("HTTP admin %s failed", url.path)
            return _response(500, "internal error; see the bookie's log\n")
        return _response(404, f"no endpoint {url.path}; try /heartbeat, /metrics, /api/v1/bookie/state, "
                              f"/api/v1/ledger/metadata?ledger_id=N\n")

    async def _ledger_metadata(self, query: dict) -> bytes:
        from bkcore.ledger.metadata import LedgerMetadata
        from bkcore.metaops import Get, MetaCode
        values = query.get("ledger_id", [])
        if len(values) != 1 or not values[0].isdigit():
            return _response(400, "give one ledger_id=N\n")
        ledger_id = int(values[0])
        result = await self.bookie.store.execute(Get(self.bookie.layout.ledger_path(ledger_id)))
        if result.code is MetaCode.NO_NODE:
            return _response(404, f"ledger {ledger_id} does not exist\n")
        if result.code is not MetaCode.OK:
            return _response(500, f"metastore answered {result.code.name}\n")
        body = LedgerMetadata.from_bytes(result.data, version=result.version).summary()
        return _response(200, json.dumps(body) + "\n", "application/json")
