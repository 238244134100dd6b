"""A raft-lite node over trio: peers and metastore clients on one TCP port.

Every frame (bkcore.wire framing: length | crc32c | msgpack) holds one message, a list. A
connection first says who it is, ending with the cluster's secret: ["peer", node_id, secret] or
["client", secret] (bkmetastore.raftlite.connection opens every one, members' included). Accepted,
it is told ["hello", session_timeout_ms] (the cluster's session timeout, which clients ping well
within); peers then exchange the core's messages, clients send requests and get
["r", request_id, error, payload] answers, plus ["w", watch_id] when a watch fires:

    ["open", rid]                        a new session            -> session id
    ["attach", rid, session]             continue a session (after a reconnect) -> True/False
    ["ping", rid, session]               keep the session alive   -> True/False
    ["op", rid, session, op, watch_id]   one metadata op (watch_id > 0: also watch the node or
                                         its children, for Get / Children) -> MetaResult list
    ["close", rid, session]              end the session (its ephemeral nodes go)
    ["status", rid]                      this member's role, term, leader and indexes (any member)

Only the leader serves clients; others answer error "not leader" with the leader's address
as payload, so a client can follow it: such a request was refused, nothing of it was done. A
leader that loses its leadership with requests still pending answers them "leadership lost"
(again with the address it knows): those may yet be committed by its successor, or not. Effects of the core are performed strictly in order by
one task, Save* in a worker thread (fsync) before anything after them.

A node publishes its numbers in its registry (bktransports.raftlite_metrics), served at /metrics
on its HTTP port when it has one.

Security (RaftSecurity, all optional): with a certificate every connection is TLS, and a member
dials the others over TLS, checking their certificates against the CA it trusts; with a secret
every connection, client or member, must show it in its hello. A connection that fails either is
answered ["refused", reason] (in the clear to a client that sent no TLS handshake) and closed,
nothing after its hello read; the member logs it once per kind of refusal and source, counts it
in `refused_connection_count`, and serves on.
"""

from __future__ import annotations

import functools
import hmac
import logging
import random
import ssl
from dataclasses import dataclass

import trio

from bkcore.metaops import Children, Get, op_from_list, op_to_list
from bkcore.wire import MalformedFrame
from bkmetastore.api import MetastoreRefused, Watch
from bkmetastore.raftlite.core import (
    Changed, RaftConfig, RaftNode, Reply, SaveHardState, SaveLog, SaveSnapshot, Send,
)
from bkmetastore.raftlite.connection import (
    HELLO_TIMEOUT_S, REFUSED_NO_SECRET, REFUSED_TLS_ONLY, REFUSED_WRONG_SECRET, RaftConnection, encode,
    is_connection_failure, open_connection,
)
from bkmetastore.raftlite.storage import RaftStorage
from bkmetastore.watches import WatchTable
from bktransports.metrics import new_registry, publish, serve_metrics
from bktransports.raftlite_metrics import metastore_families
from bktransports.timer import CoreTimer, now_ns
from bktransports.tls import handshake as tls_handshake, is_tls_client

log = logging.getLogger("bk.metastore")

EFFECT_BACKLOG_MAX = 1000      # effect batches waiting to be performed before inputs pause
PEER_CONNECT_TIMEOUT_S = 2.0
PEER_REFUSED_RETRY_S = 2.0     # a member that refuses this one is dialled again after this long
REFUSALS_LOGGED_MAX = 256      # distinct refusals logged (a warning each); later ones are only counted
DRAIN_SIZE_MAX = 1024 * 1024   # what a refused connection may still send before it is closed
DRAIN_QUIET_S = 0.25           # ... or the silence after which it is closed (it waits for an answer)


@dataclass(frozen=True)
class RaftSecurity:
    """What a member asks of connections and shows the members it dials (all optional).

    tls: the server context (its certificate and key; bktransports.tls.server_context), or None to
    serve in the clear. peer_tls: the client context it dials members with when serving TLS (it
    trusts the members' CA; None: the system's CAs). auth_secret: the cluster's shared secret,
    asked of every connection and shown to members (b"": none asked, none shown)."""
    tls: ssl.SSLContext | None = None
    peer_tls: ssl.SSLContext | None = None
    auth_secret: bytes = b""

    def dialling_context(self) -> ssl.SSLContext | None:
        if self.tls is None:
            return None
        return self.peer_tls or ssl.create_default_context()


class _RemoteWatch(Watch):
    """A watch whose firing is a notification to the client that set it."""

    def __init__(self, connection: RaftConnection, watch_id: int) -> None:
        super().__init__()
        self.connection = connection
        self.watch_id = watch_id

    def fire(self, reason: str = "changed") -> None:
        if not self.is_fired:
            super().fire(reason)
            self.connection.send(["w", self.watch_id])


class RaftServer:
    def __init__(self, *, node_id: int, addresses: dict[int, tuple[str, int]], data_dir: str,
                 config: RaftConfig = RaftConfig(), security: RaftSecurity = RaftSecurity()) -> None:
        self.node_id = node_id
        self.addresses = addresses
        self.security = security
        self._peer_tls = security.dialling_context()
        self.refused_connection_count = 0
        self._refusals_logged: set[tuple[str, str]] = set()     # (source, line), at most REFUSALS_LOGGED_MAX
        self.storage = RaftStorage(data_dir)
        restored = self.storage.load()
        if self.storage.tail_problem:
            log.warning("metastore node %d: %s", node_id, self.storage.tail_problem)
        self.core = RaftNode(node_id=node_id, peer_ids=list(addresses), rng=random.Random(), config=config,
                             restored=restored, now_ns=now_ns())
        # The core's effects must all be performed, in order, so the channel cannot refuse any;
        # instead its backlog is bounded from the input side: connections stop reading while
        # more than EFFECT_BACKLOG_MAX batches wait (see _wait_for_backlog).
        self._effects_send, self._effects_receive = trio.open_memory_channel(float("inf"))
        self._effects_backlog = 0
        self._backlog_drained = trio.Event()
        self._peer_outboxes: dict[int, RaftConnection | None] = {p: None for p in self.core.peer_ids}
        self._peer_wakeups = {p: trio.Event() for p in self.core.peer_ids}
        self._peer_queues: dict[int, list[list]] = {p: [] for p in self.core.peer_ids}
        self.watches = WatchTable(Watch)
        self._timer = CoreTimer(self._on_timer)
        self._nursery: trio.Nursery | None = None
        self.request_counts: dict[str, int] = {}    # client requests by kind (known kinds only)
        self.client_connection_count = 0
        self.registry = new_registry()
        publish(self.registry, lambda: metastore_families(self))

    # -- core plumbing ------------------------------------------------------------------------

    def _pump(self) -> None:
        effects = self.core.take_effects()
        if effects:
            self._effects_send.send_nowait(effects)
            self._effects_backlog += 1
        self._timer.set(self.core.next_deadline_ns())

    async def _wait_for_backlog(self) -> None:
        while self._effects_backlog >= EFFECT_BACKLOG_MAX:
            await self._backlog_drained.wait()

    def _on_timer(self, at_ns: int) -> None:
        self.core.on_timer(at_ns)
        self._pump()

    async def _effects_loop(self) -> None:
        async for effects in self._effects_receive:
            self._effects_backlog -= 1
            if self._effects_backlog < EFFECT_BACKLOG_MAX:
                self._backlog_drained.set()
                self._backlog_drained = trio.Event()
            for effect in effects:
                kind = type(effect)
                if kind is Send:
                    self._send_to_peer(effect.destination, effect.message)
                elif kind is SaveLog:
                    await trio.to_thread.run_sync(self.storage.save_log, effect.first_index, effect.entries)
                elif kind is SaveHardState:
                    await trio.to_thread.run_sync(self.storage.save_hard_state, effect.term, effect.voted_for)
                elif kind is SaveSnapshot:
                    await trio.to_thread.run_sync(self.storage.save_snapshot, effect.index, effect.term, effect.state)
                elif kind is Reply:
                    connection, request_id = effect.token
                    if effect.error:
                        connection.send(["r", request_id, "leadership lost", self._leader_address()])
                    else:
                        connection.send(["r", request_id, "", effect.result])
                elif kind is Changed:
                    self.watches.fire_changes(effect.changes)

    def _leader_address(self) -> str | None:
        leader = self.core.leader_id
        if leader is None or leader not in self.addresses:
            return None
        host, port = self.addresses[leader]
        return f"{host}:{port}"

    # -- peers ----------------------------------------------------------------------------------

    def _send_to_peer(self, peer: int, message: list) -> None:
        queue = self._peer_queues[peer]
        if len(queue) < 10_000:              # a peer that is away loses messages, as a network would
            queue.append(message)
            self._peer_wakeups[peer].set()

    async def _peer_sender(self, peer: int) -> None:
        host, port = self.addresses[peer]
        address = f"{host}:{port}"
        while True:
            try:
                connection, _ = await open_connection(address, hello=["peer", self.node_id], tls=self._peer_tls,
                                                      auth_secret=self.security.auth_secret,
                                                      timeout_s=PEER_CONNECT_TIMEOUT_S)
            except MetastoreRefused as exc:
                self._note_refusal(f"member {peer}", f"member {peer} refuses this one: {exc}")
                self._peer_queues[peer].clear()
                await trio.sleep(PEER_REFUSED_RETRY_S)
                continue
            except (OSError, trio.TooSlowError, trio.BrokenResourceError, MalformedFrame):
                self._peer_queues[peer].clear()
                await trio.sleep(0.1)
                continue
            try:
                while True:
                    await self._peer_wakeups[peer].wait()
                    self._peer_wakeups[peer] = trio.Event()
                    queue, self._peer_queues[peer] = self._peer_queues[peer], []
                    await connection.stream.send_all(b"".join(encode(m) for m in queue))
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                await trio.sleep(0.05)
            finally:
                await trio.aclose_forcefully(connection.stream)

    # -- serving --------------------------------------------------------------------------------

    async def serve(self, host: str, port: int, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(port, host=host)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._effects_loop)
            nursery.start_soon(self._timer.run)
            for peer in self.core.peer_ids:
                nursery.start_soon(self._peer_sender, peer)
            await nursery.start(trio.serve_listeners, self._handle, listeners)
            self._pump()
            log.info("metastore node %d listening on %s:%d", self.node_id, host, port)
            task_status.started(listeners[0].socket.getsockname()[1])

    async def _handle(self, stream: trio.SocketStream) -> None:
        accepted = None
        try:
            accepted = await self._accept(stream)
            if accepted is None:
                return
            connection, hello = accepted
            async with trio.open_nursery() as nursery:
                nursery.start_soon(connection.write_loop)
                if hello[0] == "peer":
                    async for message in connection.messages():
                        await self._wait_for_backlog()
                        self.core.receive(hello[1], message, now_ns())
                        self._pump()
                else:
                    self.client_connection_count += 1
                    try:
                        async for message in connection.messages():
                            await self._wait_for_backlog()
                            self._on_client(connection, message)
                            self._pump()
                    finally:
                        self.client_connection_count -= 1
                nursery.cancel_scope.cancel()
        except BaseException as exc:
            # A peer or client that breaks, or sends nonsense, loses its connection; nothing else.
            if not (is_connection_failure(exc) or _is_bad_input(exc)):
                raise
        finally:
            if accepted is not None:
                accepted[0].is_closed = True
            await trio.aclose_forcefully(stream)

    async def _accept(self, stream: trio.SocketStream) -> tuple[RaftConnection, list] | None:
        """TLS (when served) and the hello with the secret: the connection and its hello once
        both pass, answered ["hello", ...]; None once refused (answered, logged, closed)."""
        security = self.security
        source = _source_of(stream)
        speaks_tls = await is_tls_client(stream)
        if speaks_tls is None:
            return None                         # closed, or silent (a port probe)
        if speaks_tls != (security.tls is not None):
            if speaks_tls:                      # (it cannot read an answer in the clear)
                self._note_refusal(source, f"refused a TLS connection from {source}: this member serves no TLS "
                                           f"(give it --tls-cert, or the client a raft:// URI)")
                await _drain_and_close(stream)
            else:
                await self._refuse(RaftConnection(stream), source, REFUSED_TLS_ONLY)
            return None
        if security.tls is not None:
            stream = trio.SSLStream(stream, security.tls, server_side=True)
            if not await tls_handshake(stream, what=f"a connection from {source}", refusals=_NotedRefusals(self)):
                return None
        connection = RaftConnection(stream)
        with trio.move_on_after(HELLO_TIMEOUT_S):
            hello = await connection.receive_message()
            if not _is_hello(hello):
                return None
            refusal = _secret_refusal(hello[-1], security.auth_secret)
            if refusal:
                await self._refuse(connection, source if hello[0] == "client" else f"member {hello[1]}", refusal)
                return None
            await stream.send_all(encode(["hello", self.core.config.session_timeout_ns // 1_000_000]))
            return connection, hello
        return None

    async def _refuse(self, connection: RaftConnection, source: str, reason: str) -> None:
        """Tell the other end why, then close (once it has read that, or after a while)."""
        self._note_refusal(source, f"refused a connection from {source}: {reason}")
        with trio.move_on_after(HELLO_TIMEOUT_S):
            await connection.stream.send_all(encode(["refused", reason]))
        await _drain_and_close(connection.stream)

    def _note_refusal(self, source: str, line: str) -> None:
        """Count a refusal (by this member, or of it by a member it dials); log `line` the first
        time it is said of `source` (a host, for clients: a client retrying is not logged again)."""
        self.refused_connection_count += 1
        key = (source.rpartition(":")[0] or source, line.replace(source, ""))
        if key in self._refusals_logged or len(self._refusals_logged) >= REFUSALS_LOGGED_MAX:
            log.debug("metastore node %d: %s", self.node_id, line)
            return
        self._refusals_logged.add(key)
        log.warning("metastore node %d: %s", self.node_id, line)

    def _on_client(self, connection: RaftConnection, message: list) -> None:
        kind, request_id = message[0], message[1]
        core, at_ns = self.core, now_ns()
        if kind in _CLIENT_REQUEST_KINDS:
            self.request_counts[kind] = self.request_counts.get(kind, 0) + 1
        if kind == "status":
            connection.send(["r", request_id, "", {"node": self.node_id, "role": core.role.value, "term": core.term,
                                                   "leader": core.leader_id, "commit_index": core.commit_index,
                                                   "last_index": core.last_index}])
            return
        if not core.is_leader:
            connection.send(["r", request_id, "not leader", self._leader_address()])
            return
        token = (connection, request_id)
        if kind == "open":
            core.propose(token, ["open"], at_ns)
        elif kind in ("attach", "ping"):
            core.ping(token, message[2], at_ns)         # answered once a majority confirms
        elif kind == "close":
            core.propose(token, ["close", message[2]], at_ns)
        elif kind == "op":
            session, op_list, watch_id = message[2], message[3], message[4]
            core.touch(session, at_ns)
            op = op_from_list(op_list)
            if isinstance(op, (Get, Children)):
                if watch_id:
                    self.watches.add_watch(op.path, _RemoteWatch(connection, watch_id),
                                           is_children=isinstance(op, Children))
                core.read(token, op, at_ns)
            else:
                core.propose(token, ["op", session, op_to_list(op)], at_ns)
        else:
            connection.send(["r", request_id, f"unknown request {kind!r}", None])


_CLIENT_REQUEST_KINDS = frozenset({"open", "attach", "ping", "op", "close", "status"})


class _NotedRefusals:
    """A failed TLS handshake, noted as the member notes every refusal (tls.handshake's refusals)."""

    def __init__(self, server: RaftServer) -> None:
        self._server = server

    def refused(self, host: str, reason: str) -> None:
        self._server._note_refusal(host, f"refused a connection from {host}: {reason}")


def _is_hello(message) -> bool:
    """["client", secret] or ["peer", node_id, secret]."""
    if not isinstance(message, list) or not message or not isinstance(message[-1], bytes):
        return False
    if message[0] == "client":
        return len(message) == 2
    return message[0] == "peer" and len(message) == 3 and isinstance(message[1], int)


def _secret_refusal(shown: bytes, secret: bytes) -> str:
    """Why a hello showing `shown` is refused by a member asking for `secret` ("" if it is not)."""
    if not secret or hmac.compare_digest(shown, secret):
        return ""
    return REFUSED_WRONG_SECRET if shown else REFUSED_NO_SECRET


def _source_of(stream: trio.SocketStream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
    except OSError:
        return "a client"
    return f"{host}:{port}"


async def _drain_and_close(stream: trio.abc.Stream) -> None:
    """Read what the other end still sends until it closes or falls silent for DRAIN_QUIET_S
    (bounded in bytes and time), then close: closing with unread bytes would reset the
    connection, and the other end could lose the answer it was sent before reading it."""
    received = 0
    with trio.move_on_after(HELLO_TIMEOUT_S):
        try:
            while received < DRAIN_SIZE_MAX:
                with trio.move_on_after(DRAIN_QUIET_S) as quiet:
                    data = await stream.receive_some(64 * 1024)
                if quiet.cancelled_caught or not data:
                    break
                received += len(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
    await trio.aclose_forcefully(stream)


def _is_bad_input(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_is_bad_input(e) or is_connection_failure(e) for e in exc.exceptions)
    return isinstance(exc, (StopAsyncIteration, TypeError, IndexError, ValueError, KeyError))


def parse_peers(text: str) -> dict[int, tuple[str, int]]:
    """ "1=127.0.0.1:2281,2=127.0.0.1:2282" -> {1: ("127.0.0.1", 2281), ...}"""
    peers = {}
    for part in text.split(","):
        node, _, address = part.partition("=")
        host, _, port = address.rpartition(":")
        if not node.strip().isdigit() or not host or not port.isdigit():
            raise ValueError(f"peer {part!r} is not ID=HOST:PORT")
        peers[int(node)] = (host, int(port))
    return peers


async def run_raft_node(*, node_id: int, peers: dict[int, tuple[str, int]], data_dir: str,
                        config: RaftConfig = RaftConfig(), http_port: int = 0,
                        security: RaftSecurity = RaftSecurity(), task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve node `node_id` (its address is peers[node_id]) until cancelled; with an
    http_port, its /metrics there too (on the node's host). task_status.started() gets
    (port, HTTP port or None)."""
    if node_id not in peers:
        raise ValueError(f"node {node_id} is not among the peers {sorted(peers)}")
    server = RaftServer(node_id=node_id, addresses=peers, data_dir=data_dir, config=config, security=security)
    host, port = peers[node_id]
    try:
        async with trio.open_nursery() as nursery:
            served_http_port = None
            if http_port:
                served_http_port = await nursery.start(functools.partial(serve_metrics, server.registry,
                                                                         host=host, port=http_port))
            port = await nursery.start(functools.partial(server.serve, host, port))
            task_status.started((port, served_http_port))
    finally:
        server.storage.close()

