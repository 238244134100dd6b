"""A secured cluster as a user starts it (StandaloneCluster with StandaloneSecurity, what
`bk standalone --tls-dir D --auth-secret-file F` runs): three `bk metastore` processes serving
TLS and asking for the secret elect a leader among themselves; `bk bookie`s configured with the
credentials register through them, and their own clients (autorecovery) reach the cluster, as
does `bk stream-storage` (serving gRPC over TLS, asking for the secret); `bk` commands with the
flags are served, and without them are refused in one line that names what is missing, writing
nothing. The credentials are made as tests/secured_cluster.py makes them."""

import json
import os
import subprocess
import sys
import time

import pytest

from bklocal.processes import spawn_bookie
from bklocal.standalone import StandaloneCluster
from secured_cluster import make_security


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    pytest.importorskip("grpc")
    root = tmp_path_factory.mktemp("secured")
    security = make_security(str(root))
    cluster = StandaloneCluster.on_free_ports(str(root / "cluster"), bookie_count=3, metastore_count=3,
                                              with_stream_storage=True, security=security,
                                              bookie_extra={"autoRecoveryDaemonEnabled": True})
    with cluster.running(log=lambda line: None):
        yield cluster


def bk(*argv, env=None) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k not in ("BK_AUTH_SECRET", "BK_METASTORE")}
    return subprocess.run([sys.executable, "-m", "bkcli.main", *argv], capture_output=True, text=True, timeout=120,
                          env={**environment, **(env or {})})


def flags(cluster) -> list[str]:
    return cluster.security.client_args()


def test_the_uri_names_tls_and_the_members_elected_a_leader(secured):
    cluster = secured
    assert cluster.metastore_uri.startswith("raft+tls://127.0.0.1:")
    logs = [open(node.log_path).read() for node in cluster.metastore_nodes]
    assert all("listening on" in log and "(TLS, auth secret)" in log for log in logs)


def test_a_client_with_the_credentials_sees_the_bookies_and_their_auditor(secured):
    cluster = secured
    bookies = [f"127.0.0.1:{port}" for port in cluster.bookie_ports]
    listed = bk("shell", "listbookies", "--metastore", cluster.metastore_uri, *flags(cluster), "--json")
    assert listed.returncode == 0 and sorted(json.loads(listed.stdout)) == sorted(bookies), listed.stderr
    deadline = time.monotonic() + 60
    while True:                               # (the bookies' autorecovery daemons elect one)
        auditor = bk("shell", "whoisauditor", "--metastore", cluster.metastore_uri, *flags(cluster))
        if auditor.stdout.strip() in bookies or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert auditor.returncode == 0 and auditor.stdout.strip() in bookies, auditor.stderr


def test_a_bookie_without_the_secret_stops_at_once_saying_why(secured, tmp_path):
    cluster = secured
    with pytest.raises(RuntimeError) as failed:
        spawn_bookie(data_dir=str(tmp_path / "bookie"), metastore_uri=cluster.metastore_uri,
                     extra=cluster.security.bookie_config())
    first_member = cluster.metastore_uri.split("://")[1].split(",")[0]
    assert "exited with status 1" in str(failed.value)
    assert (f"bk bookie: raft-lite metastore {first_member} refused the connection: no auth secret; pass "
            f"--auth-secret-file or set BK_AUTH_SECRET (a bookie: bookieAuthSecret)\n") in str(failed.value)


def test_stream_storage_serves_through_the_secured_metastore(secured):
    cluster = secured
    server = ["-s", f"127.0.0.1:{cluster.stream_storage_port}", *flags(cluster)]
    created = bk("stream", "create", "--stream", "secured", *server)
    assert created.returncode == 0, created.stderr
    put = bk("table", "put", "-t", "secured", "-k", "k", "-v", "v", *server)
    assert put.returncode == 0, put.stderr


@pytest.mark.parametrize("uri_scheme, extra, env, why", [
    ("raft+tls", ["--tls-ca"], {}, "no auth secret; pass --auth-secret-file or set BK_AUTH_SECRET "
                                   "(a bookie: bookieAuthSecret)"),
    ("raft+tls", ["--tls-ca"], {"BK_AUTH_SECRET": "wrong"}, "wrong auth secret; pass the cluster's secret with "
                                                            "--auth-secret-file or BK_AUTH_SECRET (a bookie: "
                                                            "bookieAuthSecret)"),
    ("raft", ["--tls-ca", "--auth-secret-file"], {}, "it serves TLS only; use a raft+tls:// metastore URI (and "
                                                     "--tls-ca with its CA)"),
])
def test_a_client_lacking_a_credential_is_refused_in_one_line_and_writes_nothing(secured, uri_scheme, extra, env,
                                                                                 why):
    cluster = secured
    given = [part for flag, path in zip(flags(cluster)[::2], flags(cluster)[1::2]) if flag in extra
             for part in (flag, path)]
    uri = cluster.metastore_uri.replace("raft+tls://", f"{uri_scheme}://")
    first_member = uri.split("://")[1].split(",")[0]

    def ledgers() -> list[int]:
        listed = bk("shell", "listledgers", "--metastore", cluster.metastore_uri, *flags(cluster), "--json")
        assert listed.returncode == 0, listed.stderr
        return json.loads(listed.stdout)
    before = ledgers()
    for _ in range(2):
        refused = bk("shell", "simpletest", "--metastore", uri, *given, env=env)
        assert (refused.returncode, refused.stdout) == (1, "")
        assert refused.stderr == f"bk shell simpletest: raft-lite metastore {first_member} refused the connection: " \
                                 f"{why}\n"
    assert ledgers() == before                  # simpletest's ledger was never created
    # The member logged the refusal once (not the second time), and serves on.
    log = open(cluster.metastore_nodes[0].log_path).read()
    reason = {"it serves TLS only": "no TLS handshake; this member serves TLS only"}.get(why.split(";")[0],
                                                                                     why.split(";")[0])
    assert log.count("refused a connection from 127.0.0.1:") >= 1 and log.count(f": {reason}\n") == 1, log
    assert cluster.metastore_nodes[0].is_running()


def test_simpletest_with_the_credentials_writes_and_reads(secured):
    cluster = secured
    done = bk("shell", "simpletest", "--num-entries", "5", "--json", "--metastore", cluster.metastore_uri,
              *flags(cluster))
    assert done.returncode == 0 and json.loads(done.stdout)["entries"] == 5, done.stderr


def test_bk_standalone_names_a_tls_dir_that_lacks_a_file(tmp_path):
    (tmp_path / "ca.pem").write_text("")
    refused = bk("standalone", "--tls-dir", str(tmp_path), "--data-dir", str(tmp_path / "data"))
    assert refused.returncode == 2 and refused.stderr == (
        f"bk standalone: --tls-dir {tmp_path} holds no cert.pem and no key.pem; it needs ca.pem, cert.pem, key.pem "
        f"(a CA, and a certificate for 127.0.0.1 it signed: docs/deploy.md says how to make them)\n")
