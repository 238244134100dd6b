"""memory:// store: the shared contract, URI parsing, and watch bookkeeping."""

import pytest

from bkcore.metaops import Children, Create, Get, MetaCode
from bkmetastore.memory_store import forget_memory_servers
from bkmetastore.uri import MetastoreUriError, open_metastore, parse_metastore_uri
from store_contract import check_store_contract


async def test_memory_store_keeps_the_contract():
    forget_memory_servers()
    await check_store_contract(lambda: open_metastore("memory://contract"))


async def test_stores_on_different_names_do_not_share():
    forget_memory_servers()
    async with await open_metastore("memory://one") as one, await open_metastore("memory://two") as two:
        await one.execute(Create("/x", b"1"))
        assert (await two.execute(Get("/x"))).code is MetaCode.NO_NODE


async def test_expired_session_removes_ephemerals_and_fires_watches():
    forget_memory_servers()
    async with await open_metastore("memory://exp") as bookie, await open_metastore("memory://exp") as client:
        await bookie.execute(Create("/ledgers/available/b1", is_ephemeral=True))
        _, watch = await client.execute_watch(Children("/ledgers/available"))
        bookie.expire_session()
        assert bookie.session_lost and watch.is_fired
        assert (await bookie.execute(Get("/ledgers/available/b1"))).code is MetaCode.SESSION_EXPIRED


def test_uri_parsing():
    uri = parse_metastore_uri("zk+flat://127.0.0.1:2181,127.0.0.1:2182/bk/ledgers")
    assert (uri.backend, uri.hosts, uri.root, uri.layout) == (
        "zk", (("127.0.0.1", 2181), ("127.0.0.1", 2182)), "/bk/ledgers", "flat")
    assert str(uri) == "zk+flat://127.0.0.1:2181,127.0.0.1:2182/bk/ledgers"
    # BookKeeper's metadataServiceUri parts its hosts with ";".
    bookkeeper_style = parse_metastore_uri("zk+hierarchical://a:2181;b:2181;c:2181/ledgers")
    assert (bookkeeper_style.hosts, bookkeeper_style.root, bookkeeper_style.layout) == (
        (("a", 2181), ("b", 2181), ("c", 2181)), "/ledgers", "hierarchical")
    raft = parse_metastore_uri("raft://127.0.0.1:2281")
    assert (raft.backend, raft.root, raft.layout) == ("raft", "/ledgers", None)
    memory = parse_metastore_uri("memory://")
    assert (memory.backend, memory.name) == ("memory", "default")
    # raft+tls://: members that serve TLS; "tls" and a layout in either order.
    for text in ["raft+tls+flat://h:1/l", "raft+flat+tls://h:1/l"]:
        secured = parse_metastore_uri(text)
        assert (secured.backend, secured.is_tls, secured.layout, str(secured)) == ("raft", True, "flat",
                                                                                   "raft+tls+flat://h:1/l")
    assert not raft.is_tls
    for bad in ["127.0.0.1:2181", "etcd://x:1", "zk+tree://h:1", "zk://h", "zk://h:99999", "zk://h:1/a//b", "zk://a:1;;b:2",
                "zk+tls://h:1", "memory+tls://", "raft+tls+tls://h:1", "raft+flat+hierarchical://h:1"]:
        with pytest.raises(MetastoreUriError):
            parse_metastore_uri(bad)
