"""MemoryMetastore: a linearizable tree of versioned values with ZooKeeper's semantics.

Pure Python, no I/O and no clock: unit tests use it directly and the simulator puts it behind
latency, outages and lost answers. Each apply() is one atomic step (its linearization point).

Rules: new nodes have version 0 and every SetData bumps it; SetData/Delete with version -1
skip the check; missing parents are created as empty persistent nodes (BookKeeper creates full
paths optimistically); sequential creates append a 10-digit counter kept per parent, never
reused; ephemeral nodes belong to a live session and vanish when it closes or expires.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bkcore.metaops import Children, Create, Delete, Get, MetaCode, MetaResult, SetData


@dataclass(slots=True)
class _Node:
    data: bytes = b""
    version: int = 0
    owner_session_id: int | None = None
    children: set[str] = field(default_factory=set)
    sequence_no: int = 0


@dataclass(frozen=True, slots=True)
class MetastoreStatistics:
    node_count: int
    session_count: int
    op_count: int


def _parent_and_name(path: str) -> tuple[str, str]:
    parent, _, name = path.rpartition("/")
    return parent or "/", name


def _is_valid(path: str) -> bool:
    return path == "/" or (path.startswith("/") and not path.endswith("/") and "//" not in path)


class MemoryMetastore:
    def __init__(self) -> None:
        self._nodes: dict[str, _Node] = {"/": _Node()}
        self._sessions: dict[int, set[str]] = {}
        self._next_session_id = 1
        self._op_count = 0

    # -- sessions -------------------------------------------------------------------------

    def open_session(self) -> int:
        session_id = self._next_session_id
        self._next_session_id += 1
        self._sessions[session_id] = set()
        return session_id

    def is_session_alive(self, session_id: int) -> bool:
        return session_id in self._sessions

    def close_session(self, session_id: int) -> None:
        for path in sorted(self._sessions.pop(session_id, ()), reverse=True):
            if path in self._nodes:
                self._remove(path)

    expire_session = close_session

    # -- operations -----------------------------------------------------------------------

    def apply(self, op: object, *, session_id: int | None = None) -> MetaResult:
        self._op_count += 1
        path = getattr(op, "path", "")
        if not _is_valid(path):
            return MetaResult(MetaCode.NO_NODE)
        if isinstance(op, Get):
            node = self._nodes.get(path)
            return MetaResult(MetaCode.NO_NODE) if node is None else MetaResult(MetaCode.OK, node.data, node.version)
        if isinstance(op, Create):
            return self._create(op, session_id)
        if isinstance(op, SetData):
            node = self._nodes.get(path)
            if node is None:
                return MetaResult(MetaCode.NO_NODE)
            if op.version != -1 and op.version != node.version:
                return MetaResult(MetaCode.BAD_VERSION, node.data, node.version)
            node.data = op.data
            node.version += 1
            return MetaResult(MetaCode.OK, node.data, node.version)
        if isinstance(op, Delete):
            node = self._nodes.get(path)
            if node is None or path == "/":
                return MetaResult(MetaCode.NO_NODE)
            if op.version != -1 and op.version != node.version:
                return MetaResult(MetaCode.BAD_VERSION, node.data, node.version)
            if node.children:
                return MetaResult(MetaCode.NOT_EMPTY)
            self._remove(path)
            return MetaResult(MetaCode.OK)
        if isinstance(op, Children):
            node = self._nodes.get(path)
            if node is None:
                return MetaResult(MetaCode.NO_NODE)
            return MetaResult(MetaCode.OK, version=node.version, children=tuple(sorted(node.children)))
        raise TypeError(f"unknown metadata op {op!r}")

    def _create(self, op: Create, session_id: int | None) -> MetaResult:
        if op.is_ephemeral and (session_id is None or session_id not in self._sessions):
            return MetaResult(MetaCode.SESSION_EXPIRED)
        parent, name = _parent_and_name(op.path)
        parent_node = self._ensure_path(parent)
        if parent_node.owner_session_id is not None:
            return MetaResult(MetaCode.NO_NODE)   # ephemeral nodes have no children
        path = op.path
        if op.is_sequential:
            parent_node.sequence_no += 1
            path = f"{op.path}{parent_node.sequence_no:010d}"
            name = path.rpartition("/")[2]
        if path in self._nodes:
            return MetaResult(MetaCode.NODE_EXISTS)
        owner = session_id if op.is_ephemeral else None
        self._nodes[path] = _Node(data=op.data, owner_session_id=owner)
        parent_node.children.add(name)
        if owner is not None:
            self._sessions[owner].add(path)
        return MetaResult(MetaCode.OK, op.data, 0, path=path)

    def _ensure_path(self, path: str) -> _Node:
        node = self._nodes.get(path)
        if node is not None:
            return node
        parent, name = _parent_and_name(path)
        parent_node = self._ensure_path(parent)
        node = _Node()
        self._nodes[path] = node
        parent_node.children.add(name)
        return node

    def _remove(self, path: str) -> None:
        node = self._nodes.pop(path)
        for child in sorted(node.children):
            self._remove(f"{path}/{child}" if path != "/" else f"/{child}")
        parent, name = _parent_and_name(path)
        self._nodes[parent].children.discard(name)
        if node.owner_session_id is not None and node.owner_session_id in self._sessions:
            self._sessions[node.owner_session_id].discard(path)

    # -- introspection --------------------------------------------------------------------

    def snapshot(self) -> dict[str, tuple[bytes, int]]:
        return {path: (node.data, node.version) for path, node in sorted(self._nodes.items())}

    def statistics(self) -> MetastoreStatistics:
        return MetastoreStatistics(len(self._nodes), len(self._sessions), self._op_count)
