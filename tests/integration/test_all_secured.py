"""One cluster with every port secured at once (tests/secured_cluster.py: each server its own
process), checked port by port: the bookies' protocol (TLS and the secret), the stream storage
gRPC endpoint, the bookies' HTTP admin ports (HTTPS), and the channel between two stream storage
servers. For each port a client without the credentials, or with wrong ones, is refused with a
clear error, and nothing it asked for is done (looked at afterwards by an authenticated client);
an authenticated client is served. The raft-lite metastore's port joins PORTS once it is secured
(its entry is marked METASTORE, as is secured_cluster.secure_metastore)."""

import functools
import json
import os
import ssl
import subprocess
import sys

import pytest
import trio

pytest.importorskip("bookkeeper", reason="the grpc extra (apache-bookkeeper-client) is not installed")

from bkclient import sync  # noqa: E402
from bkclient.storage_client import StorageClient  # noqa: E402
from bkcore.errors import BKException  # noqa: E402
from bkcore.table.commands import Put, fold_key  # noqa: E402
from bkcore.table.ownership import NotOwner, owner_of  # noqa: E402
from bkcore.table.service import range_of  # noqa: E402
from secured_cluster import Security, secured_cluster  # noqa: E402
from transports.http_admin_client import admin_request  # noqa: E402

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src")
ROOT = "/ledgers"
RANGES = 4                              # a table's ranges (StreamSettings' default)


@pytest.fixture(scope="module")
def security(tmp_path_factory):
    return Security.make(str(tmp_path_factory.mktemp("security")))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, security):
    cluster = secured_cluster(str(tmp_path_factory.mktemp("secured")), security, stream_storage_servers=2)
    try:
        cluster.start(log=lambda line: None)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def bk(cluster, security):
    """An authenticated client of the bookies, to look with."""
    with sync.connect(cluster.metastore_uri, tls=client_tls(security), auth_secret=security.secret) as client:
        yield client


def client_tls(security: Security) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=security.ca_file)


def run_bk(*argv: str) -> tuple[int, str, str]:
    """`bk argv` as a user runs it: its exit status, stdout and stderr (no secret in its environment)."""
    environment = {key: value for key, value in os.environ.items() if key != "BK_AUTH_SECRET"}
    environment["PYTHONPATH"] = SRC
    done = subprocess.run([sys.executable, "-m", "bkcli.main", *argv], capture_output=True, text=True, timeout=120,
                          env=environment)
    return done.returncode, done.stdout, done.stderr


def wrong_secret_file(security: Security) -> str:
    path = os.path.join(os.path.dirname(security.secret_file), "wrong-secret")
    with open(path, "w") as file:
        file.write("not-the-secret\n")
    return path


# -- the bookies' protocol ------------------------------------------------------------------------

def bookie_refused(cluster, security, bk) -> None:
    """`bk shell simpletest` without TLS, without the secret, with a wrong one: each fails in one
    line naming the refusal, and no bookie took an entry of theirs (the ledgers they made in
    the metastore, which is not secured yet, recover empty)."""
    before = set(bk.list_ledgers())
    cases = [([], "closed the connection unanswered (does it speak TLS? then pass --tls-ca)"),
             (["--tls-ca", security.ca_file], "asked for the cluster's auth secret, which this client lacks"),
             (["--tls-ca", security.ca_file, "--auth-secret-file", wrong_secret_file(security)],
              "refused this client's auth secret")]
    for credentials, reason in cases:
        status, out, err = run_bk("shell", "simpletest", "--metastore", cluster.metastore_uri, *credentials)
        assert (status, out, err.count("\n")) == (1, "", 1), err
        assert reason in err, err
    for ledger_id in set(bk.list_ledgers()) - before:
        assert bk.open_ledger(ledger_id, password=b"simpletest", recovery=True).last_add_confirmed == -1
        bk.delete_ledger(ledger_id)


def bookie_served(cluster, security, bk) -> None:
    status, out, err = run_bk("shell", "simpletest", "--metastore", cluster.metastore_uri, "--json",
                              *security.client_arguments())
    assert status == 0 and json.loads(out)["entries"] > 0, err


def spark_clients_get_the_credentials(cluster, security, bk) -> None:
    """The Spark source's clients (bkspark.cluster) show the bookies what its options name."""
    pytest.importorskip("pyarrow")
    from bkspark import cluster as spark_cluster
    from bkspark.options import Credentials, SourceOptions
    ledger = bk.create_ledger(password=b"pw")
    ledger.add_many([b"a", b"b", b"c"])
    ledger.close()
    secured = SourceOptions(metastore=cluster.metastore_uri,
                            credentials=Credentials(tls_ca=security.ca_file, auth_secret_file=security.secret_file))
    try:
        assert spark_cluster.client(secured).run(spark_cluster.ledger_extents, (ledger.ledger_id,), b"pw") == \
            [(ledger.ledger_id, 2)]
        with pytest.raises(BKException, match="asked for the cluster's auth secret"):
            spark_cluster.client(SourceOptions(metastore=cluster.metastore_uri, credentials=Credentials(
                tls_ca=security.ca_file))).run(read_all, ledger.ledger_id)
    finally:
        spark_cluster.close_clients()


async def read_all(client, ledger_id: int) -> list[bytes]:
    handle = await client.open_ledger(ledger_id, password=b"pw", recovery=False)
    return await handle.read(0, 2)


# -- the stream storage gRPC endpoint -------------------------------------------------------------

def grpc_refused(cluster, security, bk) -> None:
    """`bk stream create` and `bk table put` in the clear and without the secret: one line each,
    and neither the stream nor the key is there afterwards."""
    address = f"127.0.0.1:{cluster.stream_storage_port}"
    with storage(cluster, security) as client:
        client.create_stream("default", "guarded")
    cases = [([], "did not answer"), (["--tls-ca", security.ca_file], "asks for the cluster's secret"),
             (["--tls-ca", security.ca_file, "--auth-secret-file", wrong_secret_file(security)],
              "asks for the cluster's secret")]
    for credentials, reason in cases:
        for argv in (["stream", "create", "--stream", "unwanted"],
                     ["table", "put", "-t", "guarded", "-k", "unwanted", "-v", "x"]):
            status, out, err = run_bk(*argv, "-s", address, *credentials)
            assert (status, out, err.count("\n")) == (1, "", 1) and reason in err, (argv, credentials, err)
    with storage(cluster, security) as client:
        assert "unwanted" not in client.list_streams("default")
        assert client.table("default", "guarded").get(b"unwanted") is None


def grpc_served(cluster, security, bk) -> None:
    address = f"127.0.0.1:{cluster.stream_storage_port}"
    status, _, err = run_bk("stream", "create", "--stream", "wanted", "-s", address, *security.client_arguments())
    assert status == 0, err
    status, _, err = run_bk("table", "put", "-t", "wanted", "-k", "k", "-v", "v", "-s", address,
                            *security.client_arguments())
    assert status == 0, err
    with storage(cluster, security) as client:
        assert client.table("default", "wanted").get(b"k").value == b"v"


def storage(cluster, security, *, port: int | None = None) -> StorageClient:
    return StorageClient(f"127.0.0.1:{port or cluster.stream_storage_port}", tls_ca=security.ca_file,
                         auth_secret=security.secret)


# -- the bookies' HTTP admin ports ----------------------------------------------------------------

def http_refused(cluster, security, bk) -> None:
    """Without the token, with a wrong one: 401 and one line, the bookie left writable and the
    ledger not deleted; plain HTTP to the HTTPS port gets no answer."""
    ledger = bk.create_ledger(password=b"pw")
    ledger.close()
    for port in cluster.http_ports:
        base = f"https://127.0.0.1:{port}"
        for secret in (b"", b"wrong"):
            for method, path, body in [("PUT", "/api/v1/bookie/state/readonly", {"readOnly": True}),
                                       ("DELETE", f"/api/v1/ledger/delete?ledger_id={ledger.ledger_id}", None),
                                       ("GET", "/metrics", None)]:
                status, text = admin_request(base + path, method=method, body=body, auth_secret=secret,
                                             tls_ca=security.ca_file)
                assert status == 401 and text.count("\n") == 1 and "secret" in text, (method, path, text)
        with pytest.raises(OSError):
            admin_request(f"http://127.0.0.1:{port}/heartbeat", auth_secret=security.secret)
        assert admin_request(base + "/api/v1/bookie/state/readonly", auth_secret=security.secret,
                             tls_ca=security.ca_file) == (200, '{"readOnly": false}\n')
    assert ledger.ledger_id in bk.list_ledgers()
    bk.delete_ledger(ledger.ledger_id)


def http_served(cluster, security, bk) -> None:
    ledger = bk.create_ledger(password=b"pw")
    ledger.close()
    base = f"https://127.0.0.1:{cluster.http_ports[0]}"
    status, text = admin_request(base + "/metrics", auth_secret=security.secret, tls_ca=security.ca_file)
    assert status == 200 and "# TYPE" in text
    assert admin_request(f"{base}/api/v1/ledger/delete?ledger_id={ledger.ledger_id}", method="DELETE",
                         auth_secret=security.secret, tls_ca=security.ca_file)[0] == 200
    assert ledger.ledger_id not in bk.list_ledgers()


# -- the channel between stream storage servers ---------------------------------------------------

async def with_peer_client(cluster, work, **credentials):
    """await work(peers, server_ids) with a PeerClient of this process (as a server would
    have one), on the cluster's metastore."""
    from metastore.uri import open_metastore, parse_metastore_uri
    from streamstorage.peer_calls import PeerClient
    store = await open_metastore(parse_metastore_uri(cluster.metastore_uri), session_timeout_s=10.0)
    try:
        async with trio.open_nursery() as nursery:
            peers = PeerClient(store=store, root=ROOT, nursery=nursery, timeout_s=20.0, **credentials)
            with trio.fail_after(60):
                result = await work(peers, [f"127.0.0.1:{server.port}" for server in cluster.stream_storage_servers])
            nursery.cancel_scope.cancel()
    finally:
        await store.aclose()
    return result


def peer_refused(cluster, security, bk) -> None:
    """A table call from a 'server' in the clear, one without the secret and one with a wrong
    secret, to each server: refused (why, in the error), and the key is not there afterwards."""
    with storage(cluster, security) as client:
        client.create_stream("default", "peers")

    async def put(peers, server_ids):
        errors = []
        for server_id in server_ids:
            try:
                await peers.execute(server_id, "default", "peers", b"unwanted", Put(table_key(b"unwanted"), b"x"))
            except ConnectionError as exc:
                errors.append(str(exc))
        return errors
    for credentials, reason in [({}, "ended"), ({"tls": client_tls(security)}, "without the cluster's secret"),
                                ({"tls": client_tls(security), "auth_secret": b"wrong"}, "sent a wrong secret")]:
        errors = trio.run(functools.partial(with_peer_client, cluster, put, **credentials))
        assert len(errors) == 2 and all(reason in error for error in errors), (credentials, errors)
    with storage(cluster, security) as client:
        assert client.table("default", "peers").get(b"unwanted") is None


def peer_served(cluster, security, bk) -> None:
    """A put forwarded from one server to the owner of its range, over the secured channel: a
    key of a range owned by one server, put through the other's own port; and a table call of
    an authenticated PeerClient, read back through the gRPC endpoint."""
    with storage(cluster, security) as client:
        client.create_stream("default", "forwarded")
        table = client.table("default", "forwarded")
        for index in range(RANGES * 8):                  # every range claimed by some server
            table.put(b"warm-%d" % index, b"w")
    owners = trio.run(range_owners, cluster, "forwarded")
    ports = {f"127.0.0.1:{server.port}": server.port for server in cluster.stream_storage_servers}
    range_id, owner = next(iter(owners.items()))
    key = next(b"moved-%d" % n for n in range(1000) if range_of(b"moved-%d" % n, RANGES) == range_id)
    other = next(port for server_id, port in ports.items() if server_id != owner)
    with storage(cluster, security, port=other) as client:
        client.table("default", "forwarded").put(key, b"forwarded")
    with storage(cluster, security, port=ports[owner]) as client:
        assert client.table("default", "forwarded").get(key).value == b"forwarded"

    async def put_at_the_owner(peers, server_ids):
        try:
            return await peers.execute(server_ids[0], "default", "forwarded", b"direct", put)
        except NotOwner as exc:
            return await peers.execute(exc.owner, "default", "forwarded", b"direct", put)
    put = Put(table_key(b"direct"), b"by a peer")
    trio.run(functools.partial(with_peer_client, cluster, put_at_the_owner, tls=client_tls(security),
                               auth_secret=security.secret))
    with storage(cluster, security) as client:
        assert client.table("default", "forwarded").get(b"direct").value == b"by a peer"


def table_key(key: bytes) -> bytes:
    """The key a table keeps for `key` put by a gRPC client (its pkey the key itself)."""
    return fold_key(key, key)


async def range_owners(cluster, stream: str) -> dict[int, str]:
    from metastore.uri import open_metastore, parse_metastore_uri
    store = await open_metastore(parse_metastore_uri(cluster.metastore_uri), session_timeout_s=10.0)
    try:
        owners = {range_id: await owner_of(store, ROOT, ("default", stream, range_id)) for range_id in range(RANGES)}
    finally:
        await store.aclose()
    return {range_id: owner for range_id, owner in owners.items() if owner is not None}


# -- the suite ------------------------------------------------------------------------------------

CHECKS = {
    "bookie": (bookie_refused, bookie_served),
    "spark": (None, spark_clients_get_the_credentials),
    "grpc": (grpc_refused, grpc_served),
    "http": (http_refused, http_served),
    "peer": (peer_refused, peer_served),
}
PORTS = [
    "bookie", "grpc", "http", "peer",
    # METASTORE: the raft-lite metastore's port, secured on branch h-rlsec. Once merged, start it
    # secured in secured_cluster.secure_metastore, add its checks to CHECKS and drop this skip.
    pytest.param("metastore", marks=pytest.mark.skip(reason="the raft-lite metastore is not secured on this branch")),
]


@pytest.mark.parametrize("port", PORTS)
def test_a_client_without_the_credentials_is_refused_and_changes_nothing(cluster, security, bk, port):
    refused, _ = CHECKS[port]
    refused(cluster, security, bk)


@pytest.mark.parametrize("port", [*PORTS, "spark"])
def test_a_client_with_the_credentials_is_served(cluster, security, bk, port):
    _, served = CHECKS[port]
    served(cluster, security, bk)
