"""/metrics of every kind of process, each a real `bk` process scraped over HTTP and read with
prometheus_client's parser: bookies (with their autorecovery daemons), a stream storage server,
a raft-lite metastore node and `bk autorecovery`. Every family has HELP, the process metrics
are there, BookKeeper's names are, and the numbers follow real work."""

import os
import shutil
import tempfile
import time
import urllib.request

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

import bkclient
from bklocal.processes import free_ports, spawn_bk
from bklocal.standalone import StandaloneCluster

pytest.importorskip("grpc")


class Processes:
    def __init__(self, cluster: StandaloneCluster, daemon, daemon_http_port: int, log_lines: list[str]) -> None:
        self.cluster, self.daemon, self.daemon_http_port, self.log_lines = cluster, daemon, daemon_http_port, log_lines

    @property
    def bookie_ports(self) -> list[int]:
        return self.cluster.http_ports

    @property
    def every_port(self) -> list[int]:
        return [*self.cluster.http_ports, *self.cluster.metastore_http_ports, *self.cluster.stream_storage_http_ports,
                self.daemon_http_port]


@pytest.fixture(scope="module")
def processes():
    root = tempfile.mkdtemp(prefix="metrics-processes-")
    http = free_ports(6)
    cluster = StandaloneCluster.on_free_ports(root, bookie_count=3, metastore_count=1, with_stream_storage=True,
                                              http_ports=http[:3], metastore_http_ports=http[3:4],
                                              stream_storage_http_ports=http[4:5],
                                              bookie_extra={"autoRecoveryDaemonEnabled": True})
    daemon = None
    log_lines: list[str] = []
    try:
        cluster.start(log=log_lines.append)
        daemon = spawn_bk("autorecovery", ["autorecovery", "--metastore", cluster.metastore_uri, "--name", "daemon-1",
                                           "--audit-interval", "1", "--http-port", str(http[5])],
                          log_path=os.path.join(root, "autorecovery.log"), port=0,
                          ready_text="autorecovery daemon-1 running")
        yield Processes(cluster, daemon, http[5], log_lines)
    finally:
        if daemon is not None:
            daemon.stop()
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def scrape(port: int) -> dict:
    """{family name: family} of http://127.0.0.1:port/metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def value(families: dict, sample: str, **labels) -> float:
    """The value of the one sample named `sample` whose labels include `labels` (0 if none)."""
    found = [s.value for family in families.values() for s in family.samples
             if s.name == sample and labels.items() <= s.labels.items()]
    assert len(found) <= 1, (sample, labels, found)
    return found[0] if found else 0.0


def wait_for(check, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while not (result := check()):
        assert time.monotonic() < deadline, "never came true"
        time.sleep(0.2)
    return result


def test_every_process_serves_help_for_every_family_and_its_process_metrics(processes):
    for port in processes.every_port:
        families = scrape(port)
        assert [name for name, family in families.items() if not family.documentation] == [], port
        assert value(families, "process_cpu_seconds_total") > 0
        assert value(families, "process_resident_memory_bytes") > 0
        assert families["python_info"].samples
    # Where each process's /metrics is: printed by start(), as `bk standalone` shows it.
    for port in processes.every_port[:-1]:
        assert sum(f"metrics http://127.0.0.1:{port}/metrics" in line for line in processes.log_lines) == 1, \
            processes.log_lines


def test_adds_through_a_client_move_the_bookies_bookkeeper_numbers(processes):
    before = [scrape(port) for port in processes.bookie_ports]

    async def write() -> None:
        async with bkclient.connect(processes.cluster.metastore_uri) as bk:
            ledger = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=3, password=b"pw")
            await ledger.add_many([b"m" * 100] * 20)
            await ledger.close()
    trio.run(write)
    after = [scrape(port) for port in processes.bookie_ports]
    for old, new in zip(before, after):
        added = "bookkeeper_server_ADD_ENTRY_REQUEST_count"
        assert value(new, added, success="true") - value(old, added, success="true") == 20
        assert value(new, "bookie_WRITE_BYTES") - value(old, "bookie_WRITE_BYTES") > 20 * 100
        journaled = "bookie_journal_JOURNAL_ADD_ENTRY_count"
        assert value(new, journaled, success="true", journalIndex="0") - value(old, journaled, success="true") == 20
        assert value(new, "bookie_SERVER_STATUS") == 1
        # The autorecovery daemon of the bookie's process publishes there, in BookKeeper's
        # replication_ scope.
        assert new["replication_auditor_AUDIT_BOOKIES_TIME"].type == "summary"
        assert value(new, "replication_auditor_election_attempts") >= 1


def test_table_calls_move_the_stream_storage_servers_grpc_numbers(processes):
    from bkclient.storage_client import StorageClient
    port = processes.cluster.stream_storage_http_ports[0]
    before = scrape(port)
    with StorageClient(f"127.0.0.1:{processes.cluster.stream_storage_port}") as storage:
        storage.create_stream("default", "metrics")
        table = storage.table("default", "metrics")
        for index in range(5):
            table.put(b"k%d" % index, b"v")
        assert table.get(b"k0").value == b"v"
    after = scrape(port)
    for name in ("grpc_services_Put_grpc_started", "grpc_services_Put_grpc_completed"):
        assert value(after, name) - value(before, name) == 5
    latency = "grpc_services_Put_grpc_latency_micros_count"
    assert value(after, latency, success="true") - value(before, latency, success="true") == 5
    assert after["grpc_services_Put_grpc_latency_micros"].type == "summary"
    assert value(after, "grpc_services_Range_grpc_completed") >= 1
    assert value(after, "stream_storage_ranges_owned") >= 1


def test_the_metastore_node_says_its_role_term_and_indexes_and_counts_requests(processes):
    port = processes.cluster.metastore_http_ports[0]
    before = scrape(port)
    assert value(before, "metastore_raft_role", role="leader") == 1      # (the only node)
    assert value(before, "metastore_raft_role", role="follower") == 0
    assert value(before, "metastore_raft_term") >= 1 and value(before, "metastore_raft_leader") == 1

    async def create_ledgers() -> None:
        async with bkclient.connect(processes.cluster.metastore_uri) as bk:
            for _ in range(3):
                await bk.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=b"pw")
    trio.run(create_ledgers)
    after = scrape(port)
    assert value(after, "metastore_raft_commit_index") > value(before, "metastore_raft_commit_index")
    assert value(after, "metastore_raft_last_applied") == value(after, "metastore_raft_commit_index")
    ops = "metastore_client_requests_total"
    assert value(after, ops, kind="op") - value(before, ops, kind="op") >= 3
    assert value(after, "metastore_ops_total") > value(before, "metastore_ops_total")
    assert value(after, "metastore_sessions") >= 4            # bookies, daemon, stream storage


def test_autorecovery_daemons_publish_their_audits(processes):
    # One daemon of the cluster (this one or a bookie's) is the auditor, and it audits.
    def auditor():
        found = [families for families in map(scrape, [*processes.bookie_ports, processes.daemon_http_port])
                 if value(families, "autorecovery_is_auditor") == 1]
        return found if len(found) == 1 and value(found[0], "autorecovery_audits_total") >= 1 else None
    wait_for(auditor)
    daemon = scrape(processes.daemon_http_port)
    # On its own, the daemon publishes under BookKeeper's AutoRecoveryMain names (no scope).
    assert value(daemon, "auditor_election_attempts") >= 1
    assert daemon["replication_worker_rereplicate"].type == "summary"
    assert "replication_worker_NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED" in daemon


def test_a_metrics_port_in_use_is_one_line_naming_it(processes, capsys, tmp_path):
    from bkcli.main import main
    busy = processes.daemon_http_port                   # (the daemon listens there)
    assert main(["autorecovery", "--metastore", processes.cluster.metastore_uri, "--http-port", str(busy)]) == 1
    message = f"cannot listen on 127.0.0.1:{busy} for HTTP: Address already in use (is another program there?)\n"
    assert capsys.readouterr().err == f"bk autorecovery: {message}"
    node_port = free_ports(1)[0]
    assert main(["metastore", "--node-id", "1", "--peers", f"1=127.0.0.1:{node_port}", "--data-dir",
                 str(tmp_path / "node"), "--http-port", str(busy)]) == 1
    assert capsys.readouterr().err == f"bk metastore: {message}"
    assert main(["stream-storage", "--metastore", processes.cluster.metastore_uri, "--port", str(node_port),
                 "--data-dir", str(tmp_path / "storage"), "--http-port", str(busy)]) == 1
    assert capsys.readouterr().err == f"bk stream-storage: {message}"
