"""MemoryMetastore: a linearizable tree of versioned values with ZooKeeper's semantics.

Pure Python, no I/O and no clock: unit tests use it directly and the simulator puts it behind
latency, outages and lost answers. Each apply() is one atomic step (its linearization point)
and either applies the whole op or changes nothing (except that a sequential create whose
numbered path is already taken still uses up its number).

Rules (ZooKeeper's, as BookKeeper uses them):
- Paths are absolute, "/"-separated, with no empty part; anything else does not exist.
- New nodes have version 0 and every SetData bumps it; SetData and Delete with version -1 skip
  the check, otherwise a mismatch is BAD_VERSION.
- Create makes missing parents as empty persistent nodes (BookKeeper's createFullPathOptimistic).
- Sequential creates append a 10-digit counter kept per parent: monotonic, never reused while
  the parent lives. The created path comes back in MetaResult.path.
- Ephemeral nodes belong to a live session (else SESSION_EXPIRED) and vanish when it closes or
  expires. Ephemeral nodes have no children (ZooKeeper's NoChildrenForEphemerals is NO_NODE here).
- Delete refuses a node with children (NOT_EMPTY); the root cannot be deleted.
- Data over data_size_max is refused the way ZooKeeper refuses a request over jute.maxbuffer:
  the connection drops (CONNECTION_LOSS) and nothing is applied.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bkcore.metaops import Children, Create, Delete, Get, MetaCode, MetaOp, MetaResult, SetData

DATA_SIZE_MAX_DEFAULT = 1 << 20     # ZooKeeper's default jute.maxbuffer
SEQUENCE_DIGITS = 10


@dataclass(slots=True)
class _Node:
    data: bytes = b""
    version: int = 0
    owner_session_id: int | None = None     # set only on ephemeral nodes
    children: set[str] = field(default_factory=set)
    # Last sequential number handed out under this node (never decreases).
    sequence_no: int = 0


@dataclass(frozen=True, slots=True)
class MetastoreStatistics:
    node_count: int
    node_count_peak: int
    ephemeral_count: int
    session_count: int
    op_count: int
    conflict_count: int           # BAD_VERSION answers
    oversize_refusal_count: int


def _parent_and_name(path: str) -> tuple[str, str]:
    parent, _, name = path.rpartition("/")
    return parent or "/", name


def _is_valid(path: str) -> bool:
    return path == "/" or (path.startswith("/") and not path.endswith("/") and "//" not in path)


def _join(parent: str, name: str) -> str:
    return f"/{name}" if parent == "/" else f"{parent}/{name}"


class MemoryMetastore:
    def __init__(self, *, data_size_max: int = DATA_SIZE_MAX_DEFAULT, is_recording_changes: bool = False) -> None:
        assert data_size_max >= 0
        self.is_recording_changes = is_recording_changes
        self.data_size_max = data_size_max
        # Invariant: every node but "/" has its parent in _nodes, listed in parent.children.
        self._nodes: dict[str, _Node] = {"/": _Node()}
        # Live sessions -> paths of their ephemeral nodes (each such node's owner_session_id).
        self._sessions: dict[int, set[str]] = {}
        self._next_session_id = 1
        self._op_count = 0
        self._conflict_count = 0
        self._oversize_refusal_count = 0
        self._node_count_peak = 1
        # When recording: (path, is_membership_change) for every node created, changed or
        # deleted since the last take_changes(), which is what watch tables need.
        self._changes: list[tuple[str, bool]] = []

    # -- sessions ---------------------------------------------------------------------------

    def open_session(self) -> int:
        session_id = self._next_session_id
        self._next_session_id += 1
        self._sessions[session_id] = set()
        return session_id

    def is_session_alive(self, session_id: int) -> bool:
        return session_id in self._sessions

    def close_session(self, session_id: int) -> None:
        """End the session and delete its ephemeral nodes. Unknown or ended sessions: no-op."""
        for path in sorted(self._sessions.pop(session_id, ())):
            self._remove_leaf(path)

    def expire_session(self, session_id: int) -> None:
        """The session timed out: the same outcome as closing it."""
        self.close_session(session_id)

    # -- operations -------------------------------------------------------------------------

    def apply(self, op: MetaOp, *, session_id: int | None = None) -> MetaResult:
        """Apply one op atomically. session_id matters only for ephemeral creates."""
        self._op_count += 1
        match op:
            case Get(path=path):
                node = self._nodes.get(path) if _is_valid(path) else None
                if node is None:
                    return MetaResult(MetaCode.NO_NODE)
                return MetaResult(MetaCode.OK, node.data, node.version)
            case Create():
                return self._create(op, session_id)
            case SetData():
                return self._set_data(op)
            case Delete():
                return self._delete(op)
            case Children(path=path):
                node = self._nodes.get(path) if _is_valid(path) else None
                if node is None:
                    return MetaResult(MetaCode.NO_NODE)
                return MetaResult(MetaCode.OK, version=node.version, children=tuple(sorted(node.children)))
        raise TypeError(f"unknown metadata op {op!r}")

    def _create(self, op: Create, session_id: int | None) -> MetaResult:
        # A sequential path may end in "/" (its name is then just the counter).
        if not _is_valid(op.path + "0" * SEQUENCE_DIGITS if op.is_sequential else op.path):
            return MetaResult(MetaCode.NO_NODE)
        if len(op.data) > self.data_size_max:
            self._oversize_refusal_count += 1
            return MetaResult(MetaCode.CONNECTION_LOSS)
        if op.is_ephemeral and (session_id is None or session_id not in self._sessions):
            return MetaResult(MetaCode.SESSION_EXPIRED)
        parent, _ = _parent_and_name(op.path)
        if not self._can_make_path(parent):
            return MetaResult(MetaCode.NO_NODE)
        if not op.is_sequential and op.path in self._nodes:
            return MetaResult(MetaCode.NODE_EXISTS)
        parent_node = self._make_path(parent)
        path = op.path
        if op.is_sequential:
            parent_node.sequence_no += 1
            path = f"{op.path}{parent_node.sequence_no:0{SEQUENCE_DIGITS}d}"
            if path in self._nodes:      # taken by a plain create; the number stays used
                return MetaResult(MetaCode.NODE_EXISTS)
        owner_session_id = session_id if op.is_ephemeral else None
        self._add_node(path, _Node(data=op.data, owner_session_id=owner_session_id))
        if owner_session_id is not None:
            self._sessions[owner_session_id].add(path)
        return MetaResult(MetaCode.OK, op.data, 0, path=path)

    def _set_data(self, op: SetData) -> MetaResult:
        node = self._nodes.get(op.path) if _is_valid(op.path) else None
        if node is None:
            return MetaResult(MetaCode.NO_NODE)
        if op.version != -1 and op.version != node.version:
            self._conflict_count += 1
            return MetaResult(MetaCode.BAD_VERSION, node.data, node.version)
        if len(op.data) > self.data_size_max:
            self._oversize_refusal_count += 1
            return MetaResult(MetaCode.CONNECTION_LOSS)
        node.data = op.data
        node.version += 1
        if self.is_recording_changes:
            self._changes.append((op.path, False))
        return MetaResult(MetaCode.OK, node.data, node.version)

    def _delete(self, op: Delete) -> MetaResult:
        node = self._nodes.get(op.path) if _is_valid(op.path) and op.path != "/" else None
        if node is None:
            return MetaResult(MetaCode.NO_NODE)
        if op.version != -1 and op.version != node.version:
            self._conflict_count += 1
            return MetaResult(MetaCode.BAD_VERSION, node.data, node.version)
        if node.children:
            return MetaResult(MetaCode.NOT_EMPTY)
        if node.owner_session_id is not None:
            self._sessions[node.owner_session_id].discard(op.path)
        self._remove_leaf(op.path)
        return MetaResult(MetaCode.OK)

    # -- tree helpers -----------------------------------------------------------------------

    def _can_make_path(self, path: str) -> bool:
        """Whether path exists or can be made: its nearest existing ancestor is not ephemeral."""
        while path not in self._nodes:
            path, _ = _parent_and_name(path)
        return self._nodes[path].owner_session_id is None

    def _make_path(self, path: str) -> _Node:
        node = self._nodes.get(path)
        if node is not None:
            return node
        parent, _ = _parent_and_name(path)
        self._make_path(parent)
        node = _Node()
        self._add_node(path, node)
        return node

    def _add_node(self, path: str, node: _Node) -> None:
        parent, name = _parent_and_name(path)
        parent_node = self._nodes[parent]
        assert parent_node.owner_session_id is None and path not in self._nodes, path
        self._nodes[path] = node
        parent_node.children.add(name)
        if self.is_recording_changes:
            self._changes.append((path, True))
        self._node_count_peak = max(self._node_count_peak, len(self._nodes))

    def _remove_leaf(self, path: str) -> None:
        node = self._nodes.pop(path)
        assert not node.children, path
        parent, name = _parent_and_name(path)
        self._nodes[parent].children.discard(name)
        if self.is_recording_changes:
            self._changes.append((path, True))

    def take_changes(self) -> list[tuple[str, bool]]:
        """Paths changed since the last call, in order: (path, True) when the node was created
        or deleted (its parent's children changed too), (path, False) when its data changed."""
        changes, self._changes = self._changes, []
        return changes

    # -- whole state (raft-lite snapshots) ---------------------------------------------------

    def export_state(self) -> list:
        """Everything that determines future answers, as plain msgpack-able values."""
        nodes = [[path, n.data, n.version, n.owner_session_id, n.sequence_no]
                 for path, n in sorted(self._nodes.items())]
        return [nodes, sorted(self._sessions), self._next_session_id]

    @classmethod
    def from_state(cls, state: list, **kwargs) -> MemoryMetastore:
        """The inverse of export_state()."""
        nodes, session_ids, next_session_id = state
        store = cls(**kwargs)
        store._sessions = {session_id: set() for session_id in session_ids}
        store._next_session_id = next_session_id
        store._nodes = {}
        for path, data, version, owner, sequence_no in nodes:
            store._nodes[path] = _Node(data=data, version=version, owner_session_id=owner, sequence_no=sequence_no)
        for path in store._nodes:
            if path != "/":
                parent, name = _parent_and_name(path)
                store._nodes[parent].children.add(name)
            owner = store._nodes[path].owner_session_id
            if owner is not None:
                store._sessions[owner].add(path)
        store._node_count_peak = len(store._nodes)
        return store

    # -- introspection ----------------------------------------------------------------------

    def snapshot(self) -> dict[str, tuple[bytes, int]]:
        """Every node as path -> (data, version), in path order. Plain values: safe to deepcopy."""
        return {path: (node.data, node.version) for path, node in sorted(self._nodes.items())}

    def statistics(self) -> MetastoreStatistics:
        return MetastoreStatistics(
            node_count=len(self._nodes), node_count_peak=self._node_count_peak,
            ephemeral_count=sum(len(paths) for paths in self._sessions.values()),
            session_count=len(self._sessions), op_count=self._op_count,
            conflict_count=self._conflict_count, oversize_refusal_count=self._oversize_refusal_count)

    def invariants(self) -> None:
        for path, node in self._nodes.items():
            for name in node.children:
                assert _join(path, name) in self._nodes, (path, name)
            if path != "/":
                parent, name = _parent_and_name(path)
                assert name in self._nodes[parent].children, path
            if node.owner_session_id is not None:
                assert not node.children and path in self._sessions[node.owner_session_id], path
        for session_id, paths in self._sessions.items():
            for path in paths:
                assert self._nodes[path].owner_session_id == session_id, path
