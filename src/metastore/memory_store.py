"""memory:// — the async MetadataStore over an in-process MemoryMetastore.

For tests and single-process tools: every store opened on the same name shares one tree (and
its sessions), so a test's bookies and clients see each other. Nothing survives the process.
"""

from __future__ import annotations

from bkcore.metaops import Children, Get, MetaCode, MetaOp, MetaResult
from bkmetastore.api import MetadataStore, Watch
from bkmetastore.memory import MemoryMetastore
from bkmetastore.watches import WatchTable


class MemoryServer:
    """One shared tree plus the watches of every store opened on it."""

    def __init__(self) -> None:
        self.tree = MemoryMetastore(is_recording_changes=True)
        self.watches = WatchTable(Watch)

    def apply(self, op: MetaOp, session_id: int | None) -> MetaResult:
        result = self.tree.apply(op, session_id=session_id)
        self.watches.fire_changes(self.tree.take_changes())
        return result

    def close_session(self, session_id: int) -> None:
        self.tree.close_session(session_id)
        self.watches.fire_changes(self.tree.take_changes())


_servers: dict[str, MemoryServer] = {}


def memory_server(name: str) -> MemoryServer:
    """The process-wide tree called `name` (made on first use)."""
    server = _servers.get(name)
    if server is None:
        server = _servers[name] = MemoryServer()
    return server


def forget_memory_servers() -> None:
    """Drop every named tree (tests call this between cases)."""
    _servers.clear()


class MemoryStore(MetadataStore):
    def __init__(self, server: MemoryServer) -> None:
        self._server = server
        self._session_id = server.tree.open_session()
        self._is_closed = False

    async def execute(self, op: MetaOp) -> MetaResult:
        if self.session_lost:     # as ZooKeeper: an expired session answers nothing else
            return MetaResult(MetaCode.SESSION_EXPIRED)
        return self._server.apply(op, self._session_id)

    async def execute_watch(self, op: Get | Children) -> tuple[MetaResult, Watch]:
        if not isinstance(op, (Get, Children)):
            raise TypeError(f"only Get and Children can be watched, not {type(op).__name__}")
        result = await self.execute(op)
        return result, self._server.watches.add(op.path, is_children=isinstance(op, Children))

    @property
    def session_lost(self) -> bool:
        return self._is_closed or not self._server.tree.is_session_alive(self._session_id)

    def expire_session(self) -> None:
        """What a session timeout does: the ephemeral nodes vanish (tests use this)."""
        self._server.close_session(self._session_id)
        self._server.watches.fire_all("session expired")

    async def aclose(self) -> None:
        if not self._is_closed:
            self._is_closed = True
            self._server.close_session(self._session_id)
