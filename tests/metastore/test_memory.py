"""MemoryMetastore: ZooKeeper semantics for every op, sessions and ephemeral nodes, and a
model-based check against a plain dict."""

from hypothesis import given, settings, strategies as st

from bkcore.metaops import Children, Create, Delete, Get, MetaCode, SetData
from metastore.memory import MemoryMetastore


def test_create_get_and_versions():
    store = MemoryMetastore()
    assert store.apply(Create("/a/b", b"x")).code is MetaCode.OK
    assert store.apply(Create("/a/b", b"y")).code is MetaCode.NODE_EXISTS
    assert store.apply(Get("/a/b")) .data == b"x"
    assert store.apply(Get("/a")).code is MetaCode.OK      # parent made on the way
    assert store.apply(Get("/nope")).code is MetaCode.NO_NODE


def test_compare_and_set():
    store = MemoryMetastore()
    store.apply(Create("/n", b"0"))
    assert store.apply(SetData("/n", b"1", 0)).version == 1
    stale = store.apply(SetData("/n", b"2", 0))
    assert stale.code is MetaCode.BAD_VERSION and stale.version == 1
    assert store.apply(SetData("/n", b"3", -1)).code is MetaCode.OK
    assert store.apply(SetData("/missing", b"", 0)).code is MetaCode.NO_NODE


def test_delete_rules():
    store = MemoryMetastore()
    store.apply(Create("/p/c"))
    assert store.apply(Delete("/p")).code is MetaCode.NOT_EMPTY
    assert store.apply(Delete("/p/c", 5)).code is MetaCode.BAD_VERSION
    assert store.apply(Delete("/p/c", 0)).code is MetaCode.OK
    assert store.apply(Delete("/p/c")).code is MetaCode.NO_NODE
    assert store.apply(Children("/p")).children == ()


def test_sequential_numbers_are_per_parent_and_never_reused():
    store = MemoryMetastore()
    first = store.apply(Create("/ids/ID-", is_sequential=True)).path
    second = store.apply(Create("/ids/ID-", is_sequential=True)).path
    store.apply(Delete(second))
    third = store.apply(Create("/ids/ID-", is_sequential=True)).path
    other = store.apply(Create("/other/ID-", is_sequential=True)).path
    assert (first, second, third) == ("/ids/ID-0000000001", "/ids/ID-0000000002", "/ids/ID-0000000003")
    assert other == "/other/ID-0000000001"


def test_ephemeral_nodes_follow_their_session():
    store = MemoryMetastore()
    assert store.apply(Create("/avail/b1", is_ephemeral=True)).code is MetaCode.SESSION_EXPIRED
    session = store.open_session()
    store.apply(Create("/avail/b1", is_ephemeral=True), session_id=session)
    store.apply(Create("/avail/b2"))
    assert store.apply(Children("/avail")).children == ("b1", "b2")
    store.expire_session(session)
    assert not store.is_session_alive(session)
    assert store.apply(Children("/avail")).children == ("b2",)


def test_invalid_paths_do_not_exist():
    store = MemoryMetastore()
    for path in ("", "relative", "/trailing/", "/double//slash"):
        assert store.apply(Get(path)).code is MetaCode.NO_NODE


paths = st.sampled_from(["/x", "/y", "/x/a", "/x/b"])
ops = st.one_of(
    st.builds(Create, paths, st.binary(max_size=2)),
    st.builds(SetData, paths, st.binary(max_size=2), st.integers(-1, 3)),
    st.builds(Delete, paths, st.integers(-1, 3)),
    st.builds(Get, paths),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(ops, max_size=30))
def test_matches_a_dict_model(op_list):
    store = MemoryMetastore()
    model: dict[str, tuple[bytes, int]] = {}
    for op in op_list:
        result = store.apply(op)
        if isinstance(op, Create):
            if op.path in model:
                assert result.code is MetaCode.NODE_EXISTS
            else:
                assert result.code is MetaCode.OK
                parent = op.path.rpartition("/")[0]
                if parent and parent not in model:
                    model[parent] = (b"", 0)
                model[op.path] = (op.data, 0)
        elif isinstance(op, SetData):
            if op.path not in model:
                assert result.code is MetaCode.NO_NODE
            elif op.version not in (-1, model[op.path][1]):
                assert result.code is MetaCode.BAD_VERSION
            else:
                model[op.path] = (op.data, model[op.path][1] + 1)
                assert result.version == model[op.path][1]
        elif isinstance(op, Delete):
            has_children = any(p.startswith(op.path + "/") for p in model)
            if op.path not in model:
                assert result.code is MetaCode.NO_NODE
            elif op.version not in (-1, model[op.path][1]):
                assert result.code is MetaCode.BAD_VERSION
            elif has_children:
                assert result.code is MetaCode.NOT_EMPTY
            else:
                assert result.code is MetaCode.OK
                del model[op.path]
        else:
            expected = model.get(op.path)
            assert (result.data, result.version) == expected if expected else result.code is MetaCode.NO_NODE
