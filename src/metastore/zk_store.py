"""zk:// — the MetadataStore over a real ZooKeeper ensemble, through kazoo.

kazoo runs its own threads. Each call runs in a trio worker thread (one kazoo call each, at most
ZK_THREADS at once) so the event loop never blocks; watch callbacks and connection-state
changes arrive on kazoo's thread and are handed to the trio loop with trio.from_thread.

- Codes: NoNode -> NO_NODE, NodeExists -> NODE_EXISTS, BadVersion -> BAD_VERSION, NotEmpty ->
  NOT_EMPTY, NoChildrenForEphemerals -> NO_NODE, SessionExpired -> SESSION_EXPIRED; a lost
  connection, a timeout or a refused oversized request -> CONNECTION_LOSS (outcome unknown).
- Creates make missing parents (makepath), as BookKeeper's createFullPathOptimistic does.
- A watch on a missing node is an exists() watch, so it fires when the node is created.
- SUSPENDED (connection lost, session maybe alive) and LOST (session expired) fire every
  outstanding watch; LOST also sets session_lost, after which calls answer SESSION_EXPIRED.
"""

from __future__ import annotations

import logging
import math

import trio
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError, ConnectionLoss, KazooException, NodeExistsError, NoChildrenForEphemeralsError, NoNodeError,
    NotEmptyError, OperationTimeoutError, SessionExpiredError, ZookeeperError,
)
from kazoo.handlers.threading import KazooTimeoutError

from bkcore.metaops import Children, Create, Delete, Get, MetaCode, MetaOp, MetaResult, SetData
from bkmetastore.api import MetadataStore, Watch

log = logging.getLogger("bk.metastore.zk")

ZK_THREADS = 16
_CODES = ((NoNodeError, MetaCode.NO_NODE), (NodeExistsError, MetaCode.NODE_EXISTS),
          (BadVersionError, MetaCode.BAD_VERSION), (NotEmptyError, MetaCode.NOT_EMPTY),
          (NoChildrenForEphemeralsError, MetaCode.NO_NODE), (SessionExpiredError, MetaCode.SESSION_EXPIRED))


def _code_of(exc: BaseException) -> MetaCode:
    for kind, code in _CODES:
        if isinstance(exc, kind):
            return code
    return MetaCode.CONNECTION_LOSS      # ConnectionLoss, timeouts, anything the server refused


class ZooKeeperStore(MetadataStore):
    def __init__(self, hosts: tuple[tuple[str, int], ...], *, session_timeout_s: float) -> None:
        self.hosts = ",".join(f"{h}:{p}" for h, p in hosts)
        self._client = KazooClient(hosts=self.hosts, timeout=session_timeout_s)
        self._limiter = trio.CapacityLimiter(ZK_THREADS)
        self._token: trio.lowlevel.TrioToken | None = None
        self._watches: set[Watch] = set()
        self._lost = False
        self._closed = False

    async def start(self, *, timeout_s: float) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._client.add_listener(self._on_state)
        try:
            await trio.to_thread.run_sync(lambda: self._client.start(timeout=timeout_s), limiter=self._limiter)
        except KazooTimeoutError:
            await trio.to_thread.run_sync(self._client.close)
            raise ConnectionError(f"zk://{self.hosts}: no ZooKeeper server answered within {timeout_s:g}s; "
                                  f"is it running?") from None

    # -- kazoo's thread -> trio ---------------------------------------------------------------

    def _to_trio(self, fn, *args) -> None:
        try:
            trio.from_thread.run_sync(fn, *args, trio_token=self._token)
        except (trio.RunFinishedError, RuntimeError):
            pass    # the trio run ended: nobody waits for this any more

    def session_lease_s(self) -> float:
        """Unbounded while kazoo is CONNECTED, 0.0 otherwise. Kazoo turns SUSPENDED when the
        server has been silent for two thirds of the session timeout (it pings every third), so
        a connected client's session has not expired; the window between the server's last
        answer and kazoo noticing its silence is what this trusts."""
        if self._lost or self._closed or self._client.state != KazooState.CONNECTED:
            return 0.0
        return math.inf

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self._to_trio(self._fire_all, "session expired", True)
        elif state == KazooState.SUSPENDED:
            self._to_trio(self._fire_all, "connection lost", False)

    def _fire_all(self, reason: str, is_lost: bool) -> None:
        if is_lost and not self._closed:
            self._lost = True
            log.warning("zk://%s: session expired", self.hosts)
        watches, self._watches = self._watches, set()
        for watch in watches:
            watch.fire(reason)

    def _watcher(self, watch: Watch):
        def on_event(event) -> None:
            self._to_trio(self._fire_one, watch)
        return on_event

    def _fire_one(self, watch: Watch) -> None:
        self._watches.discard(watch)
        watch.fire("changed")

    # -- calls -------------------------------------------------------------------------------

    async def _run(self, fn) -> MetaResult:
        if self._lost or self._closed:
            return MetaResult(MetaCode.SESSION_EXPIRED)
        try:
            return await trio.to_thread.run_sync(fn, limiter=self._limiter)
        except (ZookeeperError, ConnectionLoss, OperationTimeoutError, KazooTimeoutError, KazooException) as exc:
            return MetaResult(_code_of(exc))

    async def execute(self, op: MetaOp) -> MetaResult:
        return await self._run(lambda: self._apply(op, None))

    async def execute_watch(self, op: Get | Children) -> tuple[MetaResult, Watch]:
        if not isinstance(op, (Get, Children)):
            raise TypeError(f"only Get and Children can be watched, not {type(op).__name__}")
        watch = Watch()
        self._watches.add(watch)
        result = await self._run(lambda: self._apply(op, self._watcher(watch)))
        if result.code in (MetaCode.CONNECTION_LOSS, MetaCode.SESSION_EXPIRED):
            self._fire_one(watch)
        return result, watch

    def _apply(self, op: MetaOp, watcher) -> MetaResult:
        """One kazoo call (in a worker thread)."""
        client = self._client
        match op:
            case Get(path=path):
                try:
                    data, stat = client.get(path, watch=watcher)
                except NoNodeError:
                    if watcher is not None and client.exists(path, watch=watcher) is not None:
                        return self._apply(op, None)         # created in between: read it now
                    return MetaResult(MetaCode.NO_NODE)
                return MetaResult(MetaCode.OK, data, stat.version)
            case Children(path=path):
                try:
                    children, stat = client.get_children(path, watch=watcher, include_data=True)
                except NoNodeError:
                    if watcher is not None and client.exists(path, watch=watcher) is not None:
                        return self._apply(op, None)
                    return MetaResult(MetaCode.NO_NODE)
                return MetaResult(MetaCode.OK, version=stat.version, children=tuple(sorted(children)))
            case Create(path=path, data=data, is_ephemeral=ephemeral, is_sequential=sequential):
                created = client.create(path, data, ephemeral=ephemeral, sequence=sequential, makepath=True)
                return MetaResult(MetaCode.OK, data, 0, path=created)
            case SetData(path=path, data=data, version=version):
                stat = client.set(path, data, version)
                return MetaResult(MetaCode.OK, data, stat.version)
            case Delete(path=path, version=version):
                client.delete(path, version)
                return MetaResult(MetaCode.OK)
        raise TypeError(f"unknown metadata op {op!r}")

    # -- lifetime -----------------------------------------------------------------------------

    @property
    def session_lost(self) -> bool:
        return self._lost or self._closed

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        client = self._client

        def stop() -> None:
            try:
                client.stop()
            finally:
                client.close()

        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(stop)
        self._fire_all("closed", False)


async def open_zookeeper_store(hosts: tuple[tuple[str, int], ...], *, session_timeout_s: float) -> MetadataStore:
    store = ZooKeeperStore(hosts, session_timeout_s=session_timeout_s)
    await store.start(timeout_s=max(5.0, session_timeout_s))
    return store
