"""TLS on the server side, one way for every listener here (bookies, the gRPC endpoint, the HTTP
admin port, raft-lite members, the channel between stream storage servers): the context made from
a certificate chain and key, the handshake of an accepted connection, bounded in time, and whether
a client opened with a TLS handshake at all (so that one in the clear can be told, in the clear,
what it lacks)."""

from __future__ import annotations

import logging
import socket
import ssl
from typing import Callable

import trio

from bktransports.auth import RefusalLog, peer_host

HANDSHAKE_TIMEOUT_S = 10.0
TLS_HANDSHAKE_RECORD = 0x16     # the first byte of a TLS client's first record

log = logging.getLogger("bk.tls")


def server_context(cert_file: str, key_file: str | None = None, *, alpn: tuple[str, ...] = ()) -> ssl.SSLContext:
    """A server context presenting `cert_file` (a PEM chain) with `key_file` (or the key in the
    chain's file); `alpn` names the protocols it offers (gRPC clients require "h2")."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file or None)
    if alpn:
        context.set_alpn_protocols(list(alpn))
    return context


async def handshake(stream: trio.SSLStream, *, what: str, refusals: RefusalLog | None = None) -> bool:
    """The server side of an accepted connection's handshake; False (the connection closed, a
    line logged naming `what`, or the failure handed to `refusals`, which logs a host once) when
    the client fails it or takes longer than HANDSHAKE_TIMEOUT_S."""
    try:
        with trio.fail_after(HANDSHAKE_TIMEOUT_S):
            await stream.do_handshake()
        return True
    except (trio.BrokenResourceError, trio.TooSlowError) as exc:
        cause = exc.__cause__ or exc            # (trio wraps the SSLError that says why)
        if refusals is not None:
            refusals.refused(peer_host(stream), f"TLS handshake failed: {cause!r}")
        else:
            log.warning("%s: TLS handshake with a client failed: %r", what, cause)
        await trio.aclose_forcefully(stream)
        return False


async def is_tls_client(stream: trio.SocketStream) -> bool | None:
    """Whether the client's first byte, read without taking it, opens a TLS handshake record;
    None when it closes, fails or sends nothing within HANDSHAKE_TIMEOUT_S."""
    with trio.move_on_after(HANDSHAKE_TIMEOUT_S):
        try:
            first = await stream.socket.recv(1, socket.MSG_PEEK)
        except OSError:
            return None
        return first[0] == TLS_HANDSHAKE_RECORD if first else None
    return None
