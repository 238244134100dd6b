"""The raft-lite wire: msgpack lists in length+crc32c frames (bkcore.wire's framing), a framed
trio connection with a send queue drained by its own task, and the opening every connection
makes. Shared by the raft-lite client (bkmetastore.raftlite.client) and the node's server
(bktransports.raftlite_server).

Opening a connection (open_connection, the one dialler of clients and members alike): TCP, then
TLS when the member serves it (the dialler checks the member's certificate against its CA), then
the hello, which ends with the cluster's shared secret (b"" for none):

    ["client", secret]          a metastore client
    ["peer", node_id, secret]   a member dialling another member

The member answers ["hello", session_timeout_ms] and serves, or ["refused", reason] (one of
REFUSAL_HINTS) and closes, having read nothing more; a member that serves TLS answers a client
in the clear that way too. Nothing is served before the hello is accepted.
"""

from __future__ import annotations

import ssl

import msgpack
import trio

from bkcore.wire import FrameDecoder, MalformedFrame, frame_body
from bkmetastore.api import MetastoreRefused

RECEIVE_SIZE = 256 * 1024
HELLO_TIMEOUT_S = 10.0

REFUSED_NO_SECRET = "no auth secret"
REFUSED_WRONG_SECRET = "wrong auth secret"
REFUSED_TLS_ONLY = "no TLS handshake; this member serves TLS only"

_SECRET_HINT = "--auth-secret-file or BK_AUTH_SECRET (a bookie: bookieAuthSecret)"
# What a refused client is told to do, by the reason the member gave.
REFUSAL_HINTS = {
    REFUSED_NO_SECRET: "no auth secret; pass --auth-secret-file or set BK_AUTH_SECRET (a bookie: bookieAuthSecret)",
    REFUSED_WRONG_SECRET: f"wrong auth secret; pass the cluster's secret with {_SECRET_HINT}",
    REFUSED_TLS_ONLY: "it serves TLS only; use a raft+tls:// metastore URI (and --tls-ca with its CA)",
}


def encode(message: list) -> bytes:
    return frame_body(msgpack.packb(message, use_bin_type=True))


def decode(body: bytes):
    try:
        return [msgpack.unpackb(body, raw=False, strict_map_key=False)]
    except (ValueError, msgpack.UnpackException) as exc:
        raise MalformedFrame(f"not msgpack: {exc}") from None


CONNECTION_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError, trio.TooSlowError, MalformedFrame)


def is_connection_failure(exc: BaseException) -> bool:
    """A broken or bad connection (possibly inside an exception group from a nursery)."""
    if isinstance(exc, BaseExceptionGroup):
        return all(is_connection_failure(e) for e in exc.exceptions)
    return isinstance(exc, CONNECTION_ERRORS)


class RaftConnection:
    """A framed connection with a send queue drained by its own task."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.outbox: list[bytes] = []
        self.wakeup = trio.Event()
        self.is_closed = False
        # Bytes received and not yet handed out: the hello's answer and what follows it may
        # arrive together, so receive_message() and messages() share this one decoder.
        self._decoder = FrameDecoder(decode=decode)

    def send(self, message: list) -> None:
        if not self.is_closed:
            self.outbox.append(encode(message))
            self.wakeup.set()

    async def write_loop(self) -> None:
        while True:
            await self.wakeup.wait()
            self.wakeup = trio.Event()
            data, self.outbox = b"".join(self.outbox), []
            if data:
                await self.stream.send_all(data)

    async def receive_message(self):
        """The next message; None once the peer has closed."""
        while (frame := self._decoder.next_frame()) is None:
            data = await self.stream.receive_some(RECEIVE_SIZE)
            if not data:
                return None
            self._decoder.feed(data)
        return frame[0]

    async def messages(self):
        while (message := await self.receive_message()) is not None:
            yield message


async def open_connection(address: str, *, hello: list, tls: ssl.SSLContext | None, auth_secret: bytes,
                          timeout_s: float) -> tuple[RaftConnection, list]:
    """Dial the member at `address` ("host:port") and introduce this end with `hello` and the
    secret; the connection (its write loop not started) and the member's answer. Raises
    MetastoreRefused when the member turns it away or its TLS handshake fails for a reason other
    than the network; network failures as trio's and OSError."""
    host, _, port = address.rpartition(":")
    with trio.fail_after(timeout_s):
        stream = await trio.open_tcp_stream(host, int(port))
        try:
            if tls is not None:
                stream = trio.SSLStream(stream, tls, server_hostname=host)
                await _tls_handshake(stream, address)
            connection = RaftConnection(stream)
            await stream.send_all(encode([*hello, auth_secret]))
            answer = await connection.receive_message()
            if answer is None:
                raise trio.BrokenResourceError(f"{address} closed the connection before answering")
            if answer[0] == "refused":
                why = REFUSAL_HINTS.get(answer[1], str(answer[1]))
                raise MetastoreRefused(f"raft-lite metastore {address} refused the connection: {why}")
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
    return connection, answer


async def _tls_handshake(stream: trio.SSLStream, address: str) -> None:
    """The client side of the TLS handshake; a failure that TLS itself reports (a certificate
    not trusted, a member that speaks no TLS) is a refusal, said in one line."""
    try:
        await stream.do_handshake()
    except trio.BrokenResourceError as exc:
        cause = exc.__cause__
        if isinstance(cause, ssl.SSLCertVerificationError):
            raise MetastoreRefused(f"raft-lite metastore {address} refused the connection: its certificate is not "
                                   f"trusted ({cause.verify_message}); pass the CA that signed the members' "
                                   f"certificates with --tls-ca (a bookie: tlsTrustStore)") from None
        if isinstance(cause, ssl.SSLError):
            raise MetastoreRefused(f"raft-lite metastore {address} refused the connection: the TLS handshake failed "
                                   f"({cause.reason or cause}); does it serve TLS? (raft+tls:// is for members "
                                   f"started with --tls-cert; use raft:// for the others)") from None
        raise
