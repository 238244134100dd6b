"""zk:// against real ZooKeeper servers: the store contract, session expiry, an ensemble that
loses its leader, and the whole ledger path (bookies + client) on ZooKeeper."""

import pytest
import trio

from bkcore.metaops import Children, Create, Get, MetaCode, SetData
from bkmetastore.uri import open_metastore
from store_contract import check_store_contract

from zk_cluster import ZkEnsemble


@pytest.fixture(scope="module")
def zk_server(tmp_path_factory):
    ensemble = ZkEnsemble(str(tmp_path_factory.mktemp("zk")), 1)
    ensemble.start()
    yield ensemble
    ensemble.stop()


async def test_zookeeper_keeps_the_store_contract(zk_server):
    await check_store_contract(lambda: open_metastore(f"zk://{zk_server.hosts}/ledgers", session_timeout_s=4.0))


async def test_oversized_value_is_an_unknown_outcome_not_a_hang(zk_server):
    async with await open_metastore(f"zk://{zk_server.hosts}/ledgers", session_timeout_s=4.0) as store:
        with trio.fail_after(30):
            result = await store.execute(Create("/big", b"x" * (2 * 1024 * 1024)))
        assert result.code is MetaCode.CONNECTION_LOSS
        with trio.fail_after(30):
            while (await store.execute(Get("/big"))).code is MetaCode.CONNECTION_LOSS:
                await trio.sleep(0.1)
        assert (await store.execute(Get("/big"))).code is MetaCode.NO_NODE


async def test_session_expiry_removes_ephemerals_and_fires_watches(zk_server):
    uri = f"zk://{zk_server.hosts}/ledgers"
    async with await open_metastore(uri, session_timeout_s=4.0) as observer:
        store = await open_metastore(uri, session_timeout_s=1.0)
        await store.execute(Create("/expiring/node", b"", is_ephemeral=True))
        _, watch = await observer.execute_watch(Children("/expiring"))
        # Expire the session the way ZooKeeper's tests do: a second client joins the same
        # session (same id and password) and closes it.
        from kazoo.client import KazooClient
        session_id, password = store._client.client_id
        twin = KazooClient(hosts=zk_server.hosts, client_id=(session_id, password))
        await trio.to_thread.run_sync(twin.start)
        await trio.to_thread.run_sync(twin.stop)
        with trio.fail_after(20):
            await watch.wait()
            while not store.session_lost:
                await trio.sleep(0.05)
        assert (await observer.execute(Children("/expiring"))).children == ()
        assert (await store.execute(Get("/expiring"))).code is MetaCode.SESSION_EXPIRED
        await store.aclose()


async def test_an_ensemble_keeps_serving_after_its_leader_is_killed(tmp_path):
    ensemble = ZkEnsemble(str(tmp_path / "zk3"), 3)
    await trio.to_thread.run_sync(ensemble.start)
    try:
        uri = f"zk://{ensemble.hosts}/ledgers"
        async with await open_metastore(uri, session_timeout_s=10.0) as store:
            assert (await store.execute(Create("/kept", b"1"))).code is MetaCode.OK
            await store.execute(Create("/eph", b"", is_ephemeral=True))
            leader = await trio.to_thread.run_sync(ensemble.leader)
            ensemble.kill(leader)
            with trio.fail_after(60):
                while True:
                    result = await store.execute(SetData("/kept", b"2", -1))
                    if result.code is MetaCode.OK:
                        break
                    await trio.sleep(0.2)
            assert (await store.execute(Get("/kept"))).data == b"2"
            assert (await store.execute(Get("/eph"))).code is MetaCode.OK      # the session survived
            assert not store.session_lost
    finally:
        ensemble.stop()
