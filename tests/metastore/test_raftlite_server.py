"""raft-lite over real TCP: a 3-node cluster in this process keeps the store contract, and
survives its leader being stopped; a 1-node cluster works too."""


import trio

from bklocal.processes import free_port
from bkcore.metaops import Create, Get, MetaCode
from bkmetastore.raftlite.core import MS, RaftConfig
from bktransports.raftlite_server import RaftServer
from bkmetastore.uri import open_metastore
from store_contract import check_store_contract

# The default election timeouts: a leader deposed by a slow fsync (its heartbeats wait behind
# it) while a write is pending answers that write CONNECTION_LOSS, which the contract cannot
# expect; with 150 ms timeouts a CI machine's disk did that once.
CONFIG = RaftConfig(session_timeout_ns=2_000 * MS)


async def start_cluster(nursery, tmp_path, count: int) -> tuple[str, dict]:
    """(uri, {node id: (server, cancel scope)})"""
    peers = {i: ("127.0.0.1", free_port()) for i in range(1, count + 1)}
    nodes = {}
    for node_id, (host, port) in peers.items():
        server = RaftServer(node_id=node_id, addresses=peers, data_dir=str(tmp_path / f"n{node_id}"), config=CONFIG)
        scope = trio.CancelScope()
        nodes[node_id] = (server, scope)

        async def run(server=server, scope=scope, host=host, port=port, task_status=trio.TASK_STATUS_IGNORED):
            with scope:
                await server.serve(host, port, task_status=task_status)

        await nursery.start(run)
    return "raft://" + ",".join(f"{h}:{p}" for h, p in peers.values()), nodes


async def test_three_nodes_keep_the_store_contract(nursery, tmp_path):
    uri, _ = await start_cluster(nursery, tmp_path, 3)
    await check_store_contract(lambda: open_metastore(uri, session_timeout_s=2.0))


async def test_one_node_cluster(nursery, tmp_path):
    uri, _ = await start_cluster(nursery, tmp_path, 1)
    async with await open_metastore(uri) as store:
        assert (await store.execute(Create("/solo", b"1"))).code is MetaCode.OK
        assert (await store.execute(Get("/solo"))).data == b"1"


async def test_the_cluster_survives_its_leader_stopping(nursery, tmp_path):
    uri, scopes = await start_cluster(nursery, tmp_path, 3)
    async with await open_metastore(uri, session_timeout_s=3.0) as store:
        assert (await store.execute(Create("/before", b"x"))).code is MetaCode.OK
        await store.execute(Create("/eph", b"", is_ephemeral=True))
        (leader,) = [(server, scope) for server, scope in scopes.values() if server.core.is_leader]
        leader[1].cancel()
        with trio.fail_after(20):
            while True:
                result = await store.execute(Create("/after", b"y"))
                if result.code in (MetaCode.OK, MetaCode.NODE_EXISTS):
                    break
                await trio.sleep(0.05)
        assert (await store.execute(Get("/before"))).data == b"x"
        assert (await store.execute(Get("/eph"))).code is MetaCode.OK    # the session lived on
        assert not store.session_lost


async def test_the_session_lease_is_renewed_by_pings_and_runs_out_without_them(nursery, tmp_path):
    """A client's read lease: positive while its pings are answered, never longer than 0.8 of
    the cluster's session timeout (2 s here), and gone within that long once the cluster is
    silent, before the cluster could expire the session (a timeout after the last ping)."""
    uri, nodes = await start_cluster(nursery, tmp_path, 1)
    async with await open_metastore(uri, session_timeout_s=2.0) as store:
        for _ in range(15):                   # two seconds: pings every 2/3 s keep it up
            assert 0 < store.session_lease_s() <= 1.6
            await trio.sleep(0.15)
        ((_, scope),) = nodes.values()
        scope.cancel()
        stopped_at = trio.current_time()
        with trio.fail_after(3):
            while store.session_lease_s() > 0:
                await trio.sleep(0.02)
        assert trio.current_time() - stopped_at <= 1.6 + 0.05
