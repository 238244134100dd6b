"""A raft-lite node over trio: peers and metastore clients on one TCP port.

Every frame (bkcore.wire framing: length | crc32c | msgpack) holds one message, a list. A
connection first says who it is: ["peer", node_id] or ["client"]. Peers then exchange the core's
messages. Clients are first told ["hello", session_timeout_ms] (the cluster's session timeout, which
they ping well within), then send requests and get ["r", request_id, error, payload] answers,
plus ["w", watch_id] when a watch fires:

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

A node publishes its numbers in its registry (transports.raftlite_metrics), served at /metrics
on its HTTP port when it has one.
"""

from __future__ import annotations

import functools
import logging
import random

import trio

from bkcore.metaops import Children, Get, op_from_list, op_to_list
from metastore.api import Watch
from metastore.raftlite.core import (
    Changed, RaftConfig, RaftNode, Reply, SaveHardState, SaveLog, SaveSnapshot, Send,
)
from metastore.raftlite.connection import RaftConnection, encode, is_connection_failure
from metastore.raftlite.storage import RaftStorage
from metastore.watches import WatchTable
from transports.metrics import new_registry, publish, serve_metrics
from transports.raftlite_metrics import metastore_families
from transports.timer import CoreTimer, now_ns

log = logging.getLogger("bk.metastore")

EFFECT_BACKLOG_MAX = 1000      # effect batches waiting to be performed before inputs pause


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
                 config: RaftConfig = RaftConfig()) -> None:
        self.node_id = node_id
        self.addresses = addresses
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
        while True:
            try:
                with trio.fail_after(2):
                    stream = await trio.open_tcp_stream(host, port)
            except (OSError, trio.TooSlowError):
                self._peer_queues[peer].clear()
                await trio.sleep(0.1)
                continue
            try:
                await stream.send_all(encode(["peer", self.node_id]))
                while True:
                    await self._peer_wakeups[peer].wait()
                    self._peer_wakeups[peer] = trio.Event()
                    queue, self._peer_queues[peer] = self._peer_queues[peer], []
                    await stream.send_all(b"".join(encode(m) for m in queue))
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                await trio.sleep(0.05)
            finally:
                await trio.aclose_forcefully(stream)

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
        connection = RaftConnection(stream)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(connection.write_loop)
                messages = connection.messages()
                hello = await messages.__anext__()
                if hello[0] == "peer" and isinstance(hello[1], int):
                    async for message in messages:
                        await self._wait_for_backlog()
                        self.core.receive(hello[1], message, now_ns())
                        self._pump()
                elif hello[0] == "client":
                    # Sessions live as long as the cluster says: the client pings often enough.
                    connection.send(["hello", self.core.config.session_timeout_ns // 1_000_000])
                    self.client_connection_count += 1
                    try:
                        async for message in messages:
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
            connection.is_closed = True
            await trio.aclose_forcefully(stream)

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
                        task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve node `node_id` (its address is peers[node_id]) until cancelled; with an
    http_port, its /metrics there too (on the node's host). task_status.started() gets
    (port, HTTP port or None)."""
    if node_id not in peers:
        raise ValueError(f"node {node_id} is not among the peers {sorted(peers)}")
    server = RaftServer(node_id=node_id, addresses=peers, data_dir=data_dir, config=config)
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

