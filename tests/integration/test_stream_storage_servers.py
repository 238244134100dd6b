"""Several stream storage servers sharing the tables behind one address (SO_REUSEPORT), as
`bk standalone --stream-storage-servers N` runs them: the stock client and the library reach
every range through any server, and a killed server's ranges are served by the others."""

import threading
import time

import pytest
import trio

pytest.importorskip("bookkeeper", reason="the grpc extra (apache-bookkeeper-client) is not installed")

from bkbench.cpu_usage import process_cpu_s  # noqa: E402
from bklocal.processes import free_port  # noqa: E402
from bklocal.standalone import StandaloneCluster  # noqa: E402
from bkclient.storage_client import StorageClient, StorageError  # noqa: E402

SERVERS = 3


@pytest.fixture
def cluster(tmp_path):
    cluster = StandaloneCluster.on_free_ports(str(tmp_path / "cluster"), bookie_count=3, metastore_count=1,
                                              with_stream_storage=True, stream_storage_server_count=SERVERS)
    try:
        cluster.start(log=lambda line: None)
        yield cluster
    finally:
        cluster.stop()


def test_clients_of_the_shared_address_reach_every_server_and_every_range(cluster):
    address = f"127.0.0.1:{cluster.stream_storage_port}"
    with StorageClient(address) as client:
        client.create_stream("default", "shared")
    cpu_before = [process_cpu_s(server.process.pid) for server in cluster.stream_storage_servers]

    def client_work(index: int) -> None:
        with StorageClient(address) as client:       # a connection of its own: spread by the kernel
            table = client.table("default", "shared")
            for n in range(40):
                table.put(b"key-%d-%d" % (index, n), b"v")

    workers = [threading.Thread(target=client_work, args=(i,)) for i in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    with StorageClient(address) as client:
        table = client.table("default", "shared")
        assert all(table.get(b"key-%d-%d" % (i, n)).value == b"v" for i in range(8) for n in range(40))
    busy = [process_cpu_s(server.process.pid) - before
            for server, before in zip(cluster.stream_storage_servers, cpu_before)]
    assert sum(1 for cpu_s in busy if cpu_s > 0.05) >= 2, f"one server did all the work: {busy}"


def test_a_killed_servers_ranges_are_served_by_the_others(cluster):
    address = f"127.0.0.1:{cluster.stream_storage_port}"
    with StorageClient(address) as client:
        client.create_stream("default", "moving")
        table = client.table("default", "moving")
        for n in range(64):                          # every range claimed by some server
            table.increment(b"counter-%d" % n, 1)
    owners = trio.run(range_owners, cluster.metastore_uri, "moving")
    victim = next(server for server in cluster.stream_storage_servers if f"127.0.0.1:{server.port}" in owners)
    victim.kill()
    with StorageClient(address) as client:
        table = client.table("default", "moving")
        # The dead server's claims go with its metastore session; until then its ranges answer
        # BookKeeper's transient INTERNAL_SERVER_ERROR, which clients retry (a put, so that a
        # retry cannot count twice).
        for n in range(64):
            put_with_retries(table, b"after-%d" % n, b"moved")
        assert [table.get(b"after-%d" % n).value for n in range(64)] == [b"moved"] * 64
        assert [table.get(b"counter-%d" % n).number_value for n in range(64)] == [1] * 64
    assert f"127.0.0.1:{victim.port}" not in trio.run(range_owners, cluster.metastore_uri, "moving")


def put_with_retries(table, key: bytes, value: bytes, deadline_s: float = 60.0) -> None:
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            table.put(key, value)
            return
        except StorageError as exc:
            if exc.status_name != "INTERNAL_SERVER_ERROR" or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


async def range_owners(uri: str, stream: str) -> set[str]:
    """The servers named by the claim nodes of the table's ranges (bkcore.table.ownership)."""
    from bkcore.table.ownership import owner_of
    from bkmetastore.uri import open_metastore, parse_metastore_uri
    store = await open_metastore(parse_metastore_uri(uri), session_timeout_s=10.0)
    try:
        owners = {await owner_of(store, "/ledgers", ("default", stream, range_id)) for range_id in range(16)}
    finally:
        await store.aclose()
    return owners - {None}


def test_a_second_server_on_a_servers_own_port_is_refused(cluster, tmp_path):
    from bklocal.processes import spawn_bk
    taken = cluster.stream_storage_servers[1].port
    with pytest.raises(RuntimeError):
        spawn_bk("intruder", ["stream-storage", "--metastore", cluster.metastore_uri, "--port", str(taken),
                              "--data-dir", str(tmp_path / "intruder")],
                 log_path=str(tmp_path / "intruder.log"), port=free_port(), ready_text="stream storage listening on",
                 timeout_s=30)
