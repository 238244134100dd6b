"""raft:// — the MetadataStore of a raft-lite cluster (see server.py for the protocol).

One connection at a time, to the leader: a member that is not the leader answers "not leader"
with the leader's address and the client follows it (or tries the next member). A request so
refused was not carried out, so the client sends it again to the leader it finds (for up to a
session timeout); so is a read whose leader lost its leadership before answering. A write
pending when its leader lost its leadership may or may not be committed by the next leader: it
answers CONNECTION_LOSS, as ZooKeeper's would. Every connection is opened by
connection.open_connection, over TLS when given a context and showing the secret given; a
member that refuses it (no secret, a wrong one, TLS expected) ends the client: start() raises
MetastoreRefused, later calls answer SESSION_EXPIRED (retrying cannot help). The session
opened on first connect is kept alive by pings every third of its timeout and re-attached after
a reconnect; if the cluster says it is gone, `session_lost` becomes true and every later call
answers SESSION_EXPIRED. When a connection drops, requests in flight answer CONNECTION_LOSS
(their outcome is unknown) and every watch fires, as the api requires.
"""

from __future__ import annotations

import itertools
import logging
import math
import ssl

import trio

from bkcore.metaops import Children, Get, MetaCode, MetaOp, MetaResult, op_to_list, result_from_list
from bkmetastore.api import MetadataStore, MetastoreRefused, Watch
from bkmetastore.raftlite.connection import RaftConnection, is_connection_failure, open_connection

log = logging.getLogger("bk.metastore.client")

CONNECT_TIMEOUT_S = 2.0
REQUEST_TIMEOUT_S = 10.0
# The share of the session timeout, counted from when the newest acknowledged ping was sent,
# for which the session is taken to be alive (the rest covers clocks running at slightly
# different rates on the client and the leader).
SESSION_LEASE_FRACTION = 0.8


class _NotLeader(Exception):
    """The member is not (or no longer) the leader; `hint` is the leader it knows of.

    `refused`: the request was turned away unprocessed. Otherwise it was pending when the
    member lost its leadership, and its outcome is unknown."""

    def __init__(self, hint: str | None, *, refused: bool) -> None:
        super().__init__(hint or "no leader known")
        self.hint = hint
        self.refused = refused


class RaftStore(MetadataStore):
    def __init__(self, hosts: tuple[tuple[str, int], ...], *, session_timeout_s: float,
                 tls: ssl.SSLContext | None = None, auth_secret: bytes = b"") -> None:
        self.hosts = [f"{h}:{p}" for h, p in hosts]
        self.session_timeout_s = session_timeout_s
        self.tls = tls
        self.auth_secret = auth_secret
        self.refusal: MetastoreRefused | None = None     # why a member turned this client away
        self._cluster_timeout_s = session_timeout_s     # until a member says otherwise
        self.session_id: int | None = None
        self._lost = False
        self._connection: RaftConnection | None = None
        self._state_changed = trio.Event()
        self._pending: dict[int, tuple[trio.Event, list]] = {}
        self._watches: dict[int, Watch] = {}
        self._ids = itertools.count(1)
        self._host_index = 0
        self._scope: trio.CancelScope | None = None
        self._connection_scope = trio.CancelScope()      # the current connection's tasks
        self._redirect_to: str | None = None               # where _follow_leader sends the next one
        self._confirmed_at = -math.inf     # trio time at which the newest acknowledged ping was sent

    # -- lifetime -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the connection task (a trio system task: it outlives the caller and ends at
        aclose()) and wait for the session."""
        self._scope = trio.CancelScope()
        trio.lowlevel.spawn_system_task(self._run_guarded)
        await self._wait_connected(max(REQUEST_TIMEOUT_S, self.session_timeout_s))
        if self._connection is None:
            await self.aclose()
            if self.refusal is not None:
                raise self.refusal
            raise ConnectionError(f"raft://{','.join(self.hosts)}: no member answered with a session; "
                                  f"is the metastore running? (bk standalone, or bk metastore)")

    async def _run_guarded(self) -> None:
        with self._scope:
            try:
                await self._run()
            except Exception as exc:       # a bug must not take the whole program down
                log.exception("raft-lite client failed: %r", exc)
                self._mark_lost(f"client error {exc!r}")
                self._drop_connection()

    async def _run(self) -> None:
        backoff = 0.05
        hint: str | None = None
        while not self._lost:
            address = hint or self.hosts[self._host_index % len(self.hosts)]
            hint = None
            self._host_index += 1
            try:
                hint = await self._serve_connection(address)
                backoff = 0.05
            except MetastoreRefused as exc:       # (before the next: it is a ConnectionError too)
                self.refusal = exc
                self._mark_lost(str(exc))
            except BaseException as exc:
                if not is_connection_failure(exc):
                    raise
                log.debug("raft member %s: %r", address, exc)
            self._drop_connection()
            await trio.sleep(backoff if hint is None else 0)
            backoff = min(backoff * 2, 1.0)

    async def _serve_connection(self, address: str) -> str | None:
        """Talk to one member until the connection fails; returns a leader hint if redirected."""
        connection, hello = await open_connection(address, hello=["client"], tls=self.tls,
                                                  auth_secret=self.auth_secret, timeout_s=CONNECT_TIMEOUT_S)
        # Sessions live as long as the cluster says: pings go well within its timeout.
        self._cluster_timeout_s = hello[1] / 1000
        redirect: list[str | None] = []
        self._redirect_to = None
        try:
            async with trio.open_nursery() as nursery:
                self._connection_scope = nursery.cancel_scope
                nursery.start_soon(connection.write_loop)
                nursery.start_soon(self._read, connection, nursery)
                try:
                    await self._converse(connection)
                except _NotLeader as exc:            # caught here, inside: never in a group
                    redirect.append(exc.hint)
                nursery.cancel_scope.cancel()
        finally:
            connection.is_closed = True
            await trio.aclose_forcefully(connection.stream)
        return redirect[0] if redirect else self._redirect_to

    async def _converse(self, connection: RaftConnection) -> None:
        """Open or re-attach the session, then keep it alive until something fails."""
        sent_at = trio.current_time()
        if self.session_id is None:
            self.session_id = await self._call(connection, ["open"])
        elif not await self._call(connection, ["attach", self.session_id]):
            self._mark_lost("the cluster says the session expired")
            return
        self._confirmed_at = sent_at
        self._connection = connection
        self._notify()
        while True:
            await trio.sleep(min(self.session_timeout_s, self._cluster_timeout_s) / 3)
            sent_at = trio.current_time()
            if not await self._call(connection, ["ping", self.session_id]):
                self._mark_lost("the cluster says the session expired")
                return
            # The leader heard this ping after it was sent, so it cannot expire the session
            # sooner than a timeout after sent_at.
            self._confirmed_at = sent_at

    def _notify(self) -> None:
        """Wake everyone waiting for the connection state to change (connected, dropped, lost)."""
        self._state_changed.set()
        self._state_changed = trio.Event()

    async def _wait_connected(self, timeout_s: float) -> None:
        with trio.move_on_after(timeout_s):
            while self._connection is None and not self._lost:
                await self._state_changed.wait()

    async def _read(self, connection: RaftConnection, nursery: trio.Nursery) -> None:
        try:
            async for message in connection.messages():
                if message[0] == "r":
                    waiter = self._pending.pop(message[1], None)
                    if waiter is not None:
                        waiter[1].extend([message[2], message[3]])
                        waiter[0].set()
                elif message[0] == "w":
                    watch = self._watches.pop(message[1], None)
                    if watch is not None:
                        watch.fire("changed")
        finally:
            nursery.cancel_scope.cancel()

    async def _call(self, connection: RaftConnection, message: list):
        request_id = next(self._ids)
        event, answer = trio.Event(), []
        self._pending[request_id] = (event, answer)
        connection.send([message[0], request_id, *message[1:]])
        with trio.fail_after(REQUEST_TIMEOUT_S):
            await event.wait()
        if not answer:
            raise trio.BrokenResourceError("connection lost")
        error, payload = answer
        if error in ("not leader", "leadership lost"):
            raise _NotLeader(payload, refused=error == "not leader")
        if error:
            raise ValueError(error)
        return payload

    def _drop_connection(self) -> None:
        self._connection = None
        self._notify()
        for event, _ in self._pending.values():
            event.set()                       # empty answer: connection lost
        self._pending.clear()
        watches, self._watches = self._watches, {}
        for watch in watches.values():
            watch.fire("connection lost")

    def _mark_lost(self, why: str) -> None:
        if not self._lost and self.session_id is not None:      # (start() says why it had none)
            log.warning("raft-lite session %s lost: %s", self.session_id, why)
        self._lost = True
        self._notify()

    # -- MetadataStore ----------------------------------------------------------------------

    @property
    def session_lost(self) -> bool:
        return self._lost

    def session_lease_s(self) -> float:
        if self._lost:
            return 0.0
        expires_at = self._confirmed_at + self._cluster_timeout_s * SESSION_LEASE_FRACTION
        return max(0.0, expires_at - trio.current_time())

    async def execute(self, op: MetaOp) -> MetaResult:
        return (await self._execute(op, 0))[0]

    async def execute_watch(self, op: Get | Children) -> tuple[MetaResult, Watch]:
        if not isinstance(op, (Get, Children)):
            raise TypeError(f"only Get and Children can be watched, not {type(op).__name__}")
        watch_id = next(self._ids)
        watch = Watch()
        self._watches[watch_id] = watch
        result, _ = await self._execute(op, watch_id)
        if result.code is MetaCode.CONNECTION_LOSS:
            watch.fire("connection lost")
        return result, watch

    async def _execute(self, op: MetaOp, watch_id: int) -> tuple[MetaResult, None]:
        deadline = trio.current_time() + self.session_timeout_s
        while True:
            if self._lost:
                return MetaResult(MetaCode.SESSION_EXPIRED), None
            await self._wait_connected(deadline - trio.current_time())
            connection = self._connection
            if connection is None or self._lost:
                return MetaResult(MetaCode.SESSION_EXPIRED if self._lost else MetaCode.CONNECTION_LOSS), None
            try:
                payload = await self._call(connection, ["op", self.session_id, op_to_list(op), watch_id])
            except _NotLeader as exc:
                self._follow_leader(connection, exc.hint)
                if (exc.refused or isinstance(op, (Get, Children))) and trio.current_time() < deadline:
                    continue                    # nothing was done (or only read): ask the leader
                return MetaResult(MetaCode.CONNECTION_LOSS), None
            except (trio.BrokenResourceError, trio.TooSlowError):
                return MetaResult(MetaCode.CONNECTION_LOSS), None
            return result_from_list(payload), None

    def _follow_leader(self, connection: RaftConnection, hint: str | None) -> None:
        """Leave a member that says it does not lead, for the leader it names (or the next)."""
        if connection is self._connection:
            self._redirect_to = hint
            self._connection_scope.cancel()
            self._drop_connection()

    async def aclose(self) -> None:
        if self._scope is None:
            return
        connection = self._connection
        if connection is not None and not self._lost:
            with trio.move_on_after(2):
                try:
                    await self._call(connection, ["close", self.session_id])
                except (_NotLeader, ValueError, trio.BrokenResourceError, trio.TooSlowError):
                    pass                        # closing is best effort; the session will expire
        self._lost = True
        self._scope.cancel()
        self._scope = None
        self._drop_connection()


async def open_raft_store(hosts: tuple[tuple[str, int], ...], *, session_timeout_s: float,
                          tls: ssl.SSLContext | None = None, auth_secret: bytes = b"") -> MetadataStore:
    """Connect to a raft-lite cluster (over TLS with `tls`, showing `auth_secret`) and open a session."""
    store = RaftStore(hosts, session_timeout_s=session_timeout_s, tls=tls, auth_secret=auth_secret)
    await store.start()
    return store


async def member_status(address: str, *, timeout_s: float = 2.0, tls: ssl.SSLContext | None = None,
                        auth_secret: bytes = b"") -> dict:
    """What one raft-lite member says of itself: node, role, term, leader, commit_index."""
    with trio.fail_after(timeout_s):
        connection, _ = await open_connection(address, hello=["client"], tls=tls, auth_secret=auth_secret,
                                              timeout_s=timeout_s)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(connection.write_loop)
                connection.send(["status", 1])
                async for message in connection.messages():
                    if message[0] == "r":
                        nursery.cancel_scope.cancel()
                        return message[3]
        finally:
            await trio.aclose_forcefully(connection.stream)
    raise ConnectionError(f"raft-lite member {address} closed without answering")
