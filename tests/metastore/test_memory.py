"""MemoryMetastore: ZooKeeper semantics for every op and its errors, sequential numbering per
parent, sessions and ephemeral nodes, CAS conflicts, and a model-based check against a plain
dict over random op sequences (hypothesis)."""

import copy

from hypothesis import given, settings, strategies as st

from bkcore.ledger.layout import LedgerLayout
from bkcore.metaops import Children, Create, Delete, Get, MetaCode, SetData
from bkmetastore.memory import MemoryMetastore


def test_create_then_get():
    store = MemoryMetastore()
    created = store.apply(Create("/a", b"x"))
    assert (created.code, created.path, created.version) == (MetaCode.OK, "/a", 0)
    got = store.apply(Get("/a"))
    assert (got.code, got.data, got.version) == (MetaCode.OK, b"x", 0)


def test_create_existing_node_fails_and_changes_nothing():
    store = MemoryMetastore()
    store.apply(Create("/a", b"x"))
    assert store.apply(Create("/a", b"y")).code is MetaCode.NODE_EXISTS
    assert store.apply(Get("/a")).data == b"x"
    assert store.apply(Create("/", b"")).code is MetaCode.NODE_EXISTS


def test_create_makes_missing_parents_as_empty_persistent_nodes():
    store = MemoryMetastore()
    assert store.apply(Create("/a/b/c", b"leaf")).code is MetaCode.OK
    assert store.apply(Get("/a")).data == b"" and store.apply(Get("/a/b")).version == 0
    assert store.apply(Children("/")).children == ("a",)
    assert store.apply(Children("/a/b")).children == ("c",)
    store.invariants()


def test_get_missing_node():
    store = MemoryMetastore()
    assert store.apply(Get("/nope")).code is MetaCode.NO_NODE
    assert store.apply(Get("/")).code is MetaCode.OK


def test_set_data_compare_and_set():
    store = MemoryMetastore()
    store.apply(Create("/n", b"0"))
    first = store.apply(SetData("/n", b"1", 0))
    assert (first.code, first.version) == (MetaCode.OK, 1)
    stale = store.apply(SetData("/n", b"2", 0))
    assert (stale.code, stale.version, stale.data) == (MetaCode.BAD_VERSION, 1, b"1")
    assert store.apply(Get("/n")).data == b"1"
    assert store.apply(SetData("/n", b"3", -1)).version == 2
    assert store.apply(SetData("/missing", b"", 0)).code is MetaCode.NO_NODE
    assert store.statistics().conflict_count == 1


def test_concurrent_writers_one_wins_the_loser_rereads_and_retries():
    store = MemoryMetastore()
    store.apply(Create("/ledger", b"v0"))
    version_a = store.apply(Get("/ledger")).version
    version_b = store.apply(Get("/ledger")).version
    assert store.apply(SetData("/ledger", b"from a", version_a)).code is MetaCode.OK
    assert store.apply(SetData("/ledger", b"from b", version_b)).code is MetaCode.BAD_VERSION
    reread = store.apply(Get("/ledger"))
    assert store.apply(SetData("/ledger", reread.data + b"+b", reread.version)).code is MetaCode.OK
    assert store.apply(Get("/ledger")).data == b"from a+b"


def test_delete_rules():
    store = MemoryMetastore()
    store.apply(Create("/p/c"))
    assert store.apply(Delete("/p")).code is MetaCode.NOT_EMPTY
    assert store.apply(Delete("/p/c", 5)).code is MetaCode.BAD_VERSION
    assert store.apply(Delete("/p/c", 0)).code is MetaCode.OK
    assert store.apply(Delete("/p/c")).code is MetaCode.NO_NODE
    assert store.apply(Children("/p")).children == ()
    assert store.apply(Delete("/p")).code is MetaCode.OK
    assert store.apply(Delete("/")).code is MetaCode.NO_NODE
    store.invariants()


def test_children_are_sorted_names():
    store = MemoryMetastore()
    for name in ("b", "a", "c10", "c2"):
        store.apply(Create(f"/dir/{name}"))
    assert store.apply(Children("/dir")).children == ("a", "b", "c10", "c2")
    assert store.apply(Children("/none")).code is MetaCode.NO_NODE


def test_sequential_numbers_are_per_parent_and_never_reused():
    store = MemoryMetastore()
    first = store.apply(Create("/ids/ID-", is_sequential=True)).path
    second = store.apply(Create("/ids/ID-", is_sequential=True)).path
    store.apply(Delete(second))
    third = store.apply(Create("/ids/ID-", is_sequential=True)).path
    other = store.apply(Create("/other/ID-", is_sequential=True)).path
    assert (first, second, third) == ("/ids/ID-0000000001", "/ids/ID-0000000002", "/ids/ID-0000000003")
    assert other == "/other/ID-0000000001"
    # The counter is the parent's, shared by every prefix under it.
    assert store.apply(Create("/ids/X-", is_sequential=True)).path == "/ids/X-0000000004"
    assert store.apply(Create("/ids/", is_sequential=True)).path == "/ids/0000000005"


def test_sequential_ledger_ids_from_the_layout():
    layout = LedgerLayout()
    store = MemoryMetastore()
    paths = [store.apply(Create(layout.idgen_prefix, is_sequential=True)).path for _ in range(3)]
    assert [layout.ledger_id_from_sequential(path) for path in paths] == [1, 2, 3]
    assert paths[0] == "/ledgers/idgen/ID-0000000001"


def test_sequential_collision_with_a_plain_node():
    store = MemoryMetastore()
    store.apply(Create("/s/n0000000001"))
    assert store.apply(Create("/s/n", is_sequential=True)).code is MetaCode.NODE_EXISTS
    assert store.apply(Create("/s/n", is_sequential=True)).path == "/s/n0000000002"


def test_ephemeral_nodes_need_a_live_session():
    store = MemoryMetastore()
    assert store.apply(Create("/avail/b1", is_ephemeral=True)).code is MetaCode.SESSION_EXPIRED
    assert store.apply(Create("/avail/b1", is_ephemeral=True), session_id=99).code is MetaCode.SESSION_EXPIRED
    session = store.open_session()
    store.close_session(session)
    assert store.apply(Create("/avail/b1", is_ephemeral=True), session_id=session).code is MetaCode.SESSION_EXPIRED
    assert store.apply(Get("/avail")).code is MetaCode.NO_NODE      # nothing was made


def test_ephemeral_nodes_vanish_with_their_session():
    store = MemoryMetastore()
    layout = LedgerLayout()
    session = store.open_session()
    survivor = store.open_session()
    assert store.open_session() != session
    store.apply(Create(layout.bookie_path("b1"), is_ephemeral=True), session_id=session)
    store.apply(Create(layout.bookie_path("b3", is_readonly=True), is_ephemeral=True), session_id=session)
    store.apply(Create(layout.bookie_path("b2"), is_ephemeral=True), session_id=survivor)
    store.apply(Create(layout.bookie_path("persistent")))
    assert store.apply(Children(layout.available_path)).children == ("b1", "b2", "persistent", "readonly")
    assert store.statistics().ephemeral_count == 3
    store.expire_session(session)
    assert not store.is_session_alive(session) and store.is_session_alive(survivor)
    assert store.apply(Children(layout.available_path)).children == ("b2", "persistent", "readonly")
    assert store.apply(Children(layout.readonly_path)).children == ()
    store.close_session(survivor)
    store.close_session(survivor)                      # twice: no-op
    assert store.apply(Children(layout.available_path)).children == ("persistent", "readonly")
    store.invariants()


def test_deleted_ephemeral_node_is_forgotten_by_its_session():
    store = MemoryMetastore()
    session = store.open_session()
    store.apply(Create("/e", is_ephemeral=True), session_id=session)
    assert store.apply(Delete("/e")).code is MetaCode.OK
    store.apply(Create("/e", b"persistent now"))
    store.close_session(session)
    assert store.apply(Get("/e")).data == b"persistent now"
    store.invariants()


def test_ephemeral_nodes_have_no_children():
    store = MemoryMetastore()
    session = store.open_session()
    store.apply(Create("/e", is_ephemeral=True), session_id=session)
    assert store.apply(Create("/e/child")).code is MetaCode.NO_NODE
    assert store.apply(Create("/e/deep/child")).code is MetaCode.NO_NODE
    assert store.apply(Get("/e/deep")).code is MetaCode.NO_NODE     # no parent made on the way
    store.close_session(session)
    assert store.apply(Create("/e/deep/child")).code is MetaCode.OK
    store.invariants()


def test_ephemeral_sequential_nodes():
    store = MemoryMetastore()
    session = store.open_session()
    created = store.apply(Create("/locks/lock-", is_ephemeral=True, is_sequential=True), session_id=session)
    assert created.path == "/locks/lock-0000000001"
    store.expire_session(session)
    assert store.apply(Get(created.path)).code is MetaCode.NO_NODE


def test_invalid_paths_do_not_exist():
    store = MemoryMetastore()
    for path in ("", "relative", "/trailing/", "/double//slash"):
        assert store.apply(Get(path)).code is MetaCode.NO_NODE
        assert store.apply(Create(path)).code is MetaCode.NO_NODE
        assert store.apply(SetData(path, b"", -1)).code is MetaCode.NO_NODE
        assert store.apply(Delete(path)).code is MetaCode.NO_NODE
        assert store.apply(Children(path)).code is MetaCode.NO_NODE
    assert store.snapshot() == {"/": (b"", 0)}


def test_oversized_data_is_refused_like_zookeeper():
    store = MemoryMetastore(data_size_max=4)
    assert store.apply(Create("/big", b"12345")).code is MetaCode.CONNECTION_LOSS
    assert store.apply(Get("/big")).code is MetaCode.NO_NODE
    store.apply(Create("/small", b"1234"))
    assert store.apply(SetData("/small", b"12345", -1)).code is MetaCode.CONNECTION_LOSS
    assert store.apply(Get("/small")) .data == b"1234"
    assert store.statistics().oversize_refusal_count == 2


def test_snapshot_is_a_plain_copyable_view():
    store = MemoryMetastore()
    store.apply(Create("/a/b", b"x"))
    snapshot = store.snapshot()
    assert copy.deepcopy(snapshot) == snapshot == {"/": (b"", 0), "/a": (b"", 0), "/a/b": (b"x", 0)}
    store.apply(SetData("/a/b", b"y", 0))
    assert snapshot["/a/b"] == (b"x", 0)               # not a live view
    statistics = store.statistics()
    assert statistics.node_count == 3 and statistics.op_count == 2


def test_unknown_op_is_a_type_error():
    store = MemoryMetastore()
    try:
        store.apply("not an op")
        raise AssertionError("expected TypeError")
    except TypeError:
        pass


# -- model-based: a plain dict of path -> (data, version, owner) and per-parent counters ------

PATHS = ["/x", "/y", "/x/a", "/x/b", "/x/a/q"]
SESSION_SLOTS = 3

op_strategy = st.one_of(
    st.tuples(st.just("create"), st.sampled_from(PATHS), st.binary(max_size=2), st.booleans(),
              st.booleans(), st.integers(0, SESSION_SLOTS - 1)),
    st.tuples(st.just("set"), st.sampled_from(PATHS), st.binary(max_size=2), st.integers(-1, 3)),
    st.tuples(st.just("delete"), st.sampled_from(PATHS), st.integers(-1, 3)),
    st.tuples(st.just("get"), st.sampled_from(PATHS)),
    st.tuples(st.just("children"), st.sampled_from(PATHS + ["/"])),
    st.tuples(st.just("open"),),
    st.tuples(st.just("close"), st.integers(0, SESSION_SLOTS - 1)),
)


class Model:
    def __init__(self):
        self.nodes = {"/": (b"", 0, None)}
        self.counters: dict[str, int] = {}
        self.sessions: list[int] = []
        self.live: set[int] = set()
        self.next_session_id = 1

    @staticmethod
    def parent(path):
        return path.rpartition("/")[0] or "/"

    def children(self, path):
        return sorted(p.rpartition("/")[2] for p in self.nodes if p != "/" and self.parent(p) == path)

    def ancestors(self, path):
        while path != "/":
            path = self.parent(path)
            yield path

    def create(self, path, data, is_sequential, is_ephemeral, session_id):
        if is_ephemeral and session_id not in self.live:
            return MetaCode.SESSION_EXPIRED, None
        nearest = next(a for a in self.ancestors(path) if a in self.nodes)
        if self.nodes[nearest][2] is not None:
            return MetaCode.NO_NODE, None
        if not is_sequential and path in self.nodes:
            return MetaCode.NODE_EXISTS, None
        parent = self.parent(path)
        for ancestor in reversed(list(self.ancestors(path))):
            self.nodes.setdefault(ancestor, (b"", 0, None))
        if is_sequential:
            self.counters[parent] = self.counters.get(parent, 0) + 1
            path = f"{path}{self.counters[parent]:010d}"
        self.nodes[path] = (data, 0, session_id if is_ephemeral else None)
        return MetaCode.OK, path

    def remove(self, path):
        del self.nodes[path]
        self.counters.pop(path, None)      # a recreated parent counts from 1 again


@settings(max_examples=300, deadline=None)
@given(st.lists(op_strategy, min_size=1, max_size=60))
def test_matches_a_dict_model(op_list):
    store, model = MemoryMetastore(), Model()
    for op in [("open",), ("open",)] + op_list:      # two live sessions from the start
        kind = op[0]
        if kind == "open":
            session_id = store.open_session()
            assert session_id == model.next_session_id
            model.next_session_id += 1
            model.sessions.append(session_id)
            model.live.add(session_id)
            continue
        if kind == "close":
            if model.sessions:
                session_id = model.sessions[op[1] % len(model.sessions)]
                store.close_session(session_id)
                model.live.discard(session_id)
                for path in sorted(p for p, node in model.nodes.items() if node[2] == session_id):
                    model.remove(path)
            continue
        path = op[1]
        if kind == "create":
            _, _, data, is_sequential, is_ephemeral, slot = op
            session_id = model.sessions[slot % len(model.sessions)] if model.sessions else None
            result = store.apply(Create(path, data, is_ephemeral=is_ephemeral, is_sequential=is_sequential),
                                 session_id=session_id)
            code, created = model.create(path, data, is_sequential, is_ephemeral, session_id)
            assert result.code is code
            if code is MetaCode.OK:
                assert result.path == created and result.version == 0
        elif kind == "set":
            _, _, data, version = op
            result = store.apply(SetData(path, data, version))
            if path not in model.nodes:
                assert result.code is MetaCode.NO_NODE
            elif version not in (-1, model.nodes[path][1]):
                assert result.code is MetaCode.BAD_VERSION and result.version == model.nodes[path][1]
            else:
                old = model.nodes[path]
                model.nodes[path] = (data, old[1] + 1, old[2])
                assert result.code is MetaCode.OK and result.version == old[1] + 1
        elif kind == "delete":
            version = op[2]
            result = store.apply(Delete(path, version))
            if path not in model.nodes:
                assert result.code is MetaCode.NO_NODE
            elif version not in (-1, model.nodes[path][1]):
                assert result.code is MetaCode.BAD_VERSION
            elif model.children(path):
                assert result.code is MetaCode.NOT_EMPTY
            else:
                assert result.code is MetaCode.OK
                model.remove(path)
        elif kind == "get":
            result = store.apply(Get(path))
            if path in model.nodes:
                assert (result.code, result.data, result.version) == (MetaCode.OK,) + model.nodes[path][:2]
            else:
                assert result.code is MetaCode.NO_NODE
        else:
            result = store.apply(Children(path))
            if path in model.nodes:
                assert result.children == tuple(model.children(path))
            else:
                assert result.code is MetaCode.NO_NODE
        store.invariants()
    assert store.snapshot() == {path: node[:2] for path, node in sorted(model.nodes.items())}
    for session_id in model.sessions:
        assert store.is_session_alive(session_id) == (session_id in model.live)
