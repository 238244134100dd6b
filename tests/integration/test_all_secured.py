"""One cluster with every port secured at once (tests/secured_cluster.py: each server its own
process, secured as `bk standalone --tls-dir --auth-secret-file` secures it), checked port by
port (PORTS):

- metastore: the raft-lite member (TLS, and the secret asked of every connection);
- bookie: the bookies' protocol (TLS and the secret);
- grpc: the stream storage gRPC endpoint (TLS and the secret);
- http: the bookies' HTTP admin ports (HTTPS and the secret);
- peer: the channel between two stream storage servers (TLS and the secret);
- metrics: the metrics ports of the metastore node and the stream storage servers, which are not
  secured, by design (plain HTTP, no secret asked: a Prometheus scrapes them as it scrapes
  BookKeeper's): they serve GET /metrics and /heartbeat only, numbers without names, and
  refuse every other path and method, so a client there can read counters and change nothing.

For each secured port a client without the credentials, or with wrong ones, is refused with a
clear error, and nothing it asked for is done (looked at afterwards by an authenticated client);
an authenticated client is served (and so is the Spark source given the credentials: "spark").
No process of the cluster (the bookies run their autorecovery daemons, as `bk standalone`'s do)
listens on a port outside PORTS: test_every_port_the_cluster_listens_on_is_checked_here."""

import functools
import json
import os
import ssl
import subprocess
import sys

import pytest
import trio
import trustme

pytest.importorskip("bookkeeper", reason="the grpc extra (apache-bookkeeper-client) is not installed")

from bkclient import sync  # noqa: E402
from bkclient.storage_client import StorageClient  # noqa: E402
from bkcore.bookie.cookie import Cookie  # noqa: E402
from bkcore.client.config import ClientConfig  # noqa: E402
from bkcore.client.handles import BookKeeperClient  # noqa: E402
from bkcore.errors import BKException  # noqa: E402
from bkcore.table.commands import Put, fold_key  # noqa: E402
from bkcore.table.ownership import NotOwner, owner_of, peer_address_of  # noqa: E402
from bkcore.table.service import range_of  # noqa: E402
from bklocal.standalone import StandaloneSecurity  # noqa: E402
from bkmetastore.api import MetastoreRefused  # noqa: E402
from bkmetastore.layout_node import resolve_layout  # noqa: E402
from bkmetastore.raftlite.connection import open_connection  # noqa: E402
from bkmetastore.uri import open_metastore, parse_metastore_uri  # noqa: E402
from secured_cluster import SECRET, ca_file, listening_ports, make_security, secured_cluster  # noqa: E402
from bktransports.client_driver import ClientDriver  # noqa: E402
from bktransports.http_admin_client import admin_request  # noqa: E402
from bktransports.metrics import read_samples  # noqa: E402

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src")
ROOT = "/ledgers"
RANGES = 4                              # a table's ranges (StreamSettings' default)
NAMES = ("guarded", "unwanted", "wanted", "peers", "forwarded", "direct")    # (streams and keys made here)


@pytest.fixture(scope="module")
def security(tmp_path_factory):
    return make_security(str(tmp_path_factory.mktemp("security")))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, security):
    """The bookies run their autorecovery daemons, as `bk standalone`'s do."""
    cluster = secured_cluster(str(tmp_path_factory.mktemp("secured")), security, stream_storage_servers=2,
                              bookie_extra={"autoRecoveryDaemonEnabled": True})
    with cluster.running(log=lambda line: None):
        yield cluster


@pytest.fixture(scope="module")
def bk(cluster, security):
    """An authenticated client of the cluster, to look with."""
    with sync.connect(cluster.metastore_uri, tls=client_tls(security), auth_secret=security.auth_secret) as client:
        yield client


def client_tls(security: StandaloneSecurity) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=ca_file(security))


async def open_store(cluster, security: StandaloneSecurity):
    """An authenticated session of the cluster's metastore."""
    return await open_metastore(parse_metastore_uri(cluster.metastore_uri), session_timeout_s=10.0,
                                tls=client_tls(security), auth_secret=security.auth_secret)


def run_bk(*argv: str) -> tuple[int, str, str]:
    """`bk argv` as a user runs it: its exit status, stdout and stderr (no secret in its environment)."""
    environment = {key: value for key, value in os.environ.items() if key != "BK_AUTH_SECRET"}
    environment["PYTHONPATH"] = SRC
    done = subprocess.run([sys.executable, "-m", "bkcli.main", *argv], capture_output=True, text=True, timeout=120,
                          env=environment)
    return done.returncode, done.stdout, done.stderr


def refused_in_one_line(argv: list[str], reason: str) -> None:
    status, out, err = run_bk(*argv)
    assert (status, out, err.count("\n")) == (1, "", 1) and reason in err, (argv, err)


def wrong_secret_file(security: StandaloneSecurity) -> str:
    path = os.path.join(os.path.dirname(security.auth_secret_file), "wrong-secret")
    with open(path, "w") as file:
        file.write("not-the-secret\n")
    return path


def other_ca_file(security: StandaloneSecurity) -> str:
    """A CA that signed none of the cluster's certificates."""
    path = os.path.join(os.path.dirname(security.auth_secret_file), "other-ca.pem")
    trustme.CA().cert_pem.write_to_path(path)
    return path


# -- the raft-lite metastore ----------------------------------------------------------------------

UNWANTED_BOOKIE, WANTED_BOOKIE = "127.0.0.1:1", "127.0.0.1:2"      # (cookies made here; no bookie is there)


def cookie_file(security: StandaloneSecurity, bookie: str) -> str:
    """A file holding a cookie of `bookie`, as `bk shell cookie_create -cf` reads it."""
    path = os.path.join(os.path.dirname(security.auth_secret_file), f"cookie-{bookie.replace(':', '-')}")
    with open(path, "w") as file:
        file.write(Cookie(bookie_id=bookie, instance_id="all-secured", journal_dir="journal",
                          ledger_dirs=("ledgers",)).to_text())
    return path


def cookies(cluster, security) -> list[str]:
    """The bookies with a registered cookie, as an authenticated `bk shell cookie_list` sees them."""
    status, out, err = run_bk("shell", "cookie_list", "--json", "--metastore", cluster.metastore_uri,
                              *security.client_args())
    assert status == 0, err
    return json.loads(out)


def metastore_refused(cluster, security, bk) -> None:
    """`bk shell cookie_create` (a node in the metastore) with the URI in the clear, without the
    secret, with a wrong one, and trusting another CA: each refused in one line saying why, and
    no such cookie afterwards; a member dialling it as a member with a wrong secret is refused."""
    before = cookies(cluster, security)
    member = cluster.metastore_uri.split("://")[1].split(",")[0]
    ca = ["--tls-ca", ca_file(security)]
    cases = [(cluster.metastore_uri.replace("raft+tls://", "raft://"), [], "it serves TLS only; use a raft+tls:// "
                                                                          "metastore URI (and --tls-ca with its CA)"),
             (cluster.metastore_uri, ca, "no auth secret; pass --auth-secret-file or set BK_AUTH_SECRET"),
             (cluster.metastore_uri, [*ca, "--auth-secret-file", wrong_secret_file(security)],
              "wrong auth secret; pass the cluster's secret with --auth-secret-file"),
             (cluster.metastore_uri, ["--tls-ca", other_ca_file(security), "--auth-secret-file",
                                      security.auth_secret_file], "its certificate is not trusted (")]
    for uri, credentials, why in cases:
        refused_in_one_line(["shell", "cookie_create", UNWANTED_BOOKIE, "-cf", cookie_file(security, UNWANTED_BOOKIE),
                             "--metastore", uri, *credentials],
                            f"bk shell cookie_create: raft-lite metastore {member} refused the connection: {why}")
    with pytest.raises(MetastoreRefused, match="refused the connection: wrong auth secret"):
        trio.run(functools.partial(open_connection, member, hello=["peer", 2], tls=client_tls(security),
                                   auth_secret=b"wrong", timeout_s=10.0))
    assert cookies(cluster, security) == before and UNWANTED_BOOKIE not in before


def metastore_served(cluster, security, bk) -> None:
    """`bk shell cookie_create` and `cookie_delete` with the credentials: done."""
    created = run_bk("shell", "cookie_create", WANTED_BOOKIE, "-cf", cookie_file(security, WANTED_BOOKIE),
                     "--metastore", cluster.metastore_uri, *security.client_args())
    assert created[0] == 0 and WANTED_BOOKIE in cookies(cluster, security), created
    deleted = run_bk("shell", "cookie_delete", WANTED_BOOKIE, "-f", "--metastore", cluster.metastore_uri,
                     *security.client_args())
    assert deleted[0] == 0 and WANTED_BOOKIE not in cookies(cluster, security), deleted


# -- the bookies' protocol ------------------------------------------------------------------------

def bookie_refused(cluster, security, bk) -> None:
    """`bk shell simpletest` without TLS, without the secret, with a wrong one: each fails in one
    line, and no ledger exists afterwards (the metastore, which asks for the same credentials,
    turns it away before it makes one). The bookies' own refusal, seen by a client that holds
    the metastore's credentials and shows the bookies no TLS, no secret or a wrong one: its add
    fails with the bookie's reason, and its ledger recovers empty (no bookie took the entry)."""
    before = set(bk.list_ledgers())
    for credentials, reason in [([], "its certificate is not trusted"),
                                (["--tls-ca", ca_file(security)], "refused the connection: no auth secret"),
                                (["--tls-ca", ca_file(security), "--auth-secret-file", wrong_secret_file(security)],
                                 "refused the connection: wrong auth secret")]:
        refused_in_one_line(["shell", "simpletest", "--metastore", cluster.metastore_uri, *credentials], reason)
    assert set(bk.list_ledgers()) == before
    for tls, secret, reason in [(None, b"", "closed the connection unanswered (does it speak TLS? then pass --tls-ca)"),
                                (client_tls(security), b"", "asked for the cluster's auth secret, which this client "
                                                            "lacks"),
                                (client_tls(security), b"wrong", "refused this client's auth secret")]:
        ledger_id, error = trio.run(functools.partial(add_showing_the_bookies, cluster, security, tls=tls,
                                                      auth_secret=secret))
        assert reason in error, error
        assert bk.open_ledger(ledger_id, password=b"pw", recovery=True).last_add_confirmed == -1
        bk.delete_ledger(ledger_id)
    assert set(bk.list_ledgers()) == before


async def add_showing_the_bookies(cluster, security, *, tls, auth_secret: bytes) -> tuple[int, str]:
    """A ledger created, and an entry added to it, by a client whose metastore session shows the
    cluster's credentials and whose bookie connections show `tls` and `auth_secret`: the
    ledger's id and the add's error."""
    store = await open_store(cluster, security)
    try:
        layout = await resolve_layout(store, parse_metastore_uri(cluster.metastore_uri))
        driver = ClientDriver(store=store, layout=layout, config=ClientConfig(), tls=tls, auth_secret=auth_secret)
        async with trio.open_nursery() as nursery:
            await nursery.start(driver.run)
            try:
                with trio.fail_after(60):
                    ledger = await BookKeeperClient(driver).create_ledger(password=b"pw")
                    with pytest.raises(BKException) as failed:
                        await ledger.add(b"refused")
                return ledger.ledger_id, str(failed.value)
            finally:
                driver.close()
    finally:
        await store.aclose()


def bookie_served(cluster, security, bk) -> None:
    status, out, err = run_bk("shell", "simpletest", "--metastore", cluster.metastore_uri, "--json",
                              *security.client_args())
    assert status == 0 and json.loads(out)["entries"] > 0, err


def spark_clients_get_the_credentials(cluster, security, bk) -> None:
    """The Spark source's clients (bkspark.cluster) show the metastore and the bookies what its
    options name: without the secret, the metastore turns them away."""
    pytest.importorskip("pyarrow")
    from bkspark import cluster as spark_cluster
    from bkspark.options import Credentials, SourceOptions
    ledger = bk.create_ledger(password=b"pw")
    ledger.add_many([b"a", b"b", b"c"])
    ledger.close()
    still_open = bk.create_ledger(password=b"pw")
    still_open.add_many([b"xyz", b"xyz"])
    secured = SourceOptions(metastore=cluster.metastore_uri,
                            credentials=Credentials(tls_ca=ca_file(security),
                                                    auth_secret_file=security.auth_secret_file))
    try:
        # (ledger, last readable entry, average entry size: from the metadata of a closed ledger,
        # from the entry at the LAC of an open one, whose LAC may or may not cover its last add yet)
        closed, opened = spark_cluster.client(secured).run(spark_cluster.ledger_extents,
                                                           (ledger.ledger_id, still_open.ledger_id), b"pw")
        assert closed == (ledger.ledger_id, 2, 1)
        assert opened[0] == still_open.ledger_id and opened[1] in (0, 1) and opened[2] == 3
        with pytest.raises(MetastoreRefused, match="refused the connection: no auth secret"):
            spark_cluster.client(SourceOptions(metastore=cluster.metastore_uri, credentials=Credentials(
                tls_ca=ca_file(security)))).run(read_all, ledger.ledger_id)
    finally:
        spark_cluster.close_clients()


async def read_all(client, ledger_id: int) -> list[bytes]:
    handle = await client.open_ledger(ledger_id, password=b"pw", recovery=False)
    return await handle.read(0, 2)


# -- the stream storage gRPC endpoint -------------------------------------------------------------

def grpc_refused(cluster, security, bk) -> None:
    """`bk stream create` and `bk table put` in the clear (told the endpoint speaks TLS), without
    the secret and with a wrong one: one line each, and neither the stream nor the key is there
    afterwards."""
    address = f"127.0.0.1:{cluster.stream_storage_port}"
    with storage(cluster, security) as client:
        client.create_stream("default", "guarded")
    cases = [([], f"stream storage at {address} speaks TLS and this client does not: pass the CA that signed its "
                  f"certificate with --tls-ca"),
             (["--tls-ca", ca_file(security)], "asks for the cluster's secret"),
             (["--tls-ca", ca_file(security), "--auth-secret-file", wrong_secret_file(security)],
              "asks for the cluster's secret")]
    for credentials, reason in cases:
        for argv in (["stream", "create", "--stream", "unwanted"],
                     ["table", "put", "-t", "guarded", "-k", "unwanted", "-v", "x"]):
            refused_in_one_line([*argv, "-s", address, *credentials], reason)
    with storage(cluster, security) as client:
        assert "unwanted" not in client.list_streams("default")
        assert client.table("default", "guarded").get(b"unwanted") is None


def grpc_served(cluster, security, bk) -> None:
    address = f"127.0.0.1:{cluster.stream_storage_port}"
    status, _, err = run_bk("stream", "create", "--stream", "wanted", "-s", address, *security.client_args())
    assert status == 0, err
    status, _, err = run_bk("table", "put", "-t", "wanted", "-k", "k", "-v", "v", "-s", address,
                            *security.client_args())
    assert status == 0, err
    with storage(cluster, security) as client:
        assert client.table("default", "wanted").get(b"k").value == b"v"


def storage(cluster, security, *, port: int | None = None) -> StorageClient:
    return StorageClient(f"127.0.0.1:{port or cluster.stream_storage_port}", tls_ca=ca_file(security),
                         auth_secret=security.auth_secret)


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
                                             tls_ca=ca_file(security))
                assert status == 401 and text.count("\n") == 1 and "secret" in text, (method, path, text)
        with pytest.raises(OSError):
            admin_request(f"http://127.0.0.1:{port}/heartbeat", auth_secret=security.auth_secret)
        assert admin_request(base + "/api/v1/bookie/state/readonly", auth_secret=security.auth_secret,
                             tls_ca=ca_file(security)) == (200, '{"readOnly": false}\n')
    assert ledger.ledger_id in bk.list_ledgers()
    bk.delete_ledger(ledger.ledger_id)


def http_served(cluster, security, bk) -> None:
    ledger = bk.create_ledger(password=b"pw")
    ledger.close()
    base = f"https://127.0.0.1:{cluster.http_ports[0]}"
    status, text = admin_request(base + "/metrics", auth_secret=security.auth_secret, tls_ca=ca_file(security))
    assert status == 200 and "# TYPE" in text
    assert admin_request(f"{base}/api/v1/ledger/delete?ledger_id={ledger.ledger_id}", method="DELETE",
                         auth_secret=security.auth_secret, tls_ca=ca_file(security))[0] == 200
    assert ledger.ledger_id not in bk.list_ledgers()


# -- the channel between stream storage servers ---------------------------------------------------

async def with_peer_client(cluster, security, work, **credentials):
    """await work(peers, server_ids) with a PeerClient of this process (as a server would
    have one: `credentials` are what it shows the servers), on an authenticated session of the
    cluster's metastore."""
    from streamstorage.peer_calls import PeerClient
    store = await open_store(cluster, security)
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
        errors = trio.run(functools.partial(with_peer_client, cluster, security, put, **credentials))
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
    owners = trio.run(range_owners, cluster, security, "forwarded")
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
    trio.run(functools.partial(with_peer_client, cluster, security, put_at_the_owner, tls=client_tls(security),
                               auth_secret=security.auth_secret))
    with storage(cluster, security) as client:
        assert client.table("default", "forwarded").get(b"direct").value == b"by a peer"


def table_key(key: bytes) -> bytes:
    """The key a table keeps for `key` put by a gRPC client (its pkey the key itself)."""
    return fold_key(key, key)


async def range_owners(cluster, security, stream: str) -> dict[int, str]:
    store = await open_store(cluster, security)
    try:
        owners = {range_id: await owner_of(store, ROOT, ("default", stream, range_id)) for range_id in range(RANGES)}
    finally:
        await store.aclose()
    return {range_id: owner for range_id, owner in owners.items() if owner is not None}


# -- the metrics ports (not secured, by design) --------------------------------------------------

def metrics_ports(cluster) -> list[int]:
    return [*cluster.metastore_http_ports, *cluster.stream_storage_http_ports]


def metrics_refused(cluster, security, bk) -> None:
    """They ask for no credentials (by design), and change nothing: the bookies' admin actions
    sent there are 404 (no such endpoint) and every method but GET is 405; the bookies stay
    writable and the ledger stays."""
    ledger = bk.create_ledger(password=b"pw")
    ledger.close()
    for port in metrics_ports(cluster):
        base = f"http://127.0.0.1:{port}"
        for method, path, body, expected in [
                ("PUT", "/api/v1/bookie/state/readonly", {"readOnly": True}, 404),
                ("DELETE", f"/api/v1/ledger/delete?ledger_id={ledger.ledger_id}", None, 404),
                ("POST", "/metrics", {}, 405), ("DELETE", "/metrics", None, 405), ("PUT", "/heartbeat", {}, 405)]:
            status, text = admin_request(base + path, method=method, body=body)
            assert status == expected and text.count("\n") == 1, (port, method, path, status, text)
    assert sorted(bk.list_bookies()) == sorted(f"127.0.0.1:{port}" for port in cluster.bookie_ports)
    assert ledger.ledger_id in bk.list_ledgers()
    bk.delete_ledger(ledger.ledger_id)


def metrics_served(cluster, security, bk) -> None:
    """GET /metrics without credentials: numbers, labelled with none of the names of the
    streams and keys made here, nor the secret."""
    for port in metrics_ports(cluster):
        status, text = admin_request(f"http://127.0.0.1:{port}/metrics")
        samples = read_samples(text)
        assert status == 200 and samples and all(isinstance(sample.value, float) for sample in samples)
        labels = {value for sample in samples for value in sample.labels.values()}
        assert not [value for value in labels for name in (*NAMES, SECRET.decode()) if name in value], labels


# -- every port -----------------------------------------------------------------------------------

def checked_ports(cluster, security) -> dict[int, str]:
    """Every port the suite checks: the entry of PORTS that checks it."""
    servers = [f"127.0.0.1:{server.port}" for server in cluster.stream_storage_servers]
    grpc_ports = [cluster.stream_storage_port, *(server.port for server in cluster.stream_storage_servers)]

    async def peer_ports() -> list[int]:
        store = await open_store(cluster, security)
        try:
            return [int((await peer_address_of(store, ROOT, server)).rsplit(":", 1)[1]) for server in servers]
        finally:
            await store.aclose()
    return {**{port: "metastore" for port in cluster.metastore_ports},
            **{port: "bookie" for port in cluster.bookie_ports}, **{port: "http" for port in cluster.http_ports},
            **{port: "grpc" for port in grpc_ports},
            **{port: "peer" for port in trio.run(peer_ports)}, **{port: "metrics" for port in metrics_ports(cluster)}}


# -- the suite ------------------------------------------------------------------------------------

CHECKS = {
    "metastore": (metastore_refused, metastore_served),
    "bookie": (bookie_refused, bookie_served),
    "spark": (None, spark_clients_get_the_credentials),
    "grpc": (grpc_refused, grpc_served),
    "http": (http_refused, http_served),
    "peer": (peer_refused, peer_served),
    "metrics": (metrics_refused, metrics_served),
}
PORTS = ["metastore", "bookie", "grpc", "http", "peer", "metrics"]


@pytest.mark.parametrize("port", PORTS)
def test_a_client_without_the_credentials_is_refused_and_changes_nothing(cluster, security, bk, port):
    refused, _ = CHECKS[port]
    refused(cluster, security, bk)


@pytest.mark.parametrize("port", [*PORTS, "spark"])
def test_a_client_with_the_credentials_is_served(cluster, security, bk, port):
    _, served = CHECKS[port]
    served(cluster, security, bk)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads the processes' sockets from /proc (Linux)")
def test_every_port_the_cluster_listens_on_is_checked_here(cluster, security):
    """Each process's listening TCP ports and bound UDP ports (its children's too) are ports
    PORTS checks, and each port checked is one of theirs."""
    checked = checked_ports(cluster, security)
    assert set(checked.values()) == set(PORTS)
    listening = {child.name: listening_ports(child.process.pid) for child in cluster.children}
    assert {name: ports - {("tcp", port) for port in checked} for name, ports in listening.items()} == \
        {name: set() for name in listening}
    assert set().union(*listening.values()) == {("tcp", port) for port in checked}
