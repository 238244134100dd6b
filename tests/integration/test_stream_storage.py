"""Stream storage as real processes (raft-lite metastore, bookies, the gRPC server), driven by
the `bk` CLI exactly as the seed's examples read: a distributed counter and a key/value store
with a watch. Then the server is SIGKILLed under load, restarted, and every acknowledged
increment is there."""

import os
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("bookkeeper", reason="the grpc extra (apache-bookkeeper-client) is not installed")

from bklocal.processes import free_port, spawn_bk  # noqa: E402
from bklocal.standalone import StandaloneCluster  # noqa: E402
from bkclient.storage_client import StorageClient  # noqa: E402

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src")


@pytest.fixture
def cluster(tmp_path):
    cluster = StandaloneCluster.on_free_ports(str(tmp_path / "cluster"), bookie_count=3, metastore_count=1,
                                              with_stream_storage=True)
    try:
        cluster.start(log=lambda line: None)
        yield cluster
    finally:
        cluster.stop()


def bk(cluster, *argv: str) -> str:
    """Run `bk -s HOST:PORT <argv>` as users do; returns its output (fails on a non-zero exit)."""
    environment = {**os.environ, "PYTHONPATH": SRC}
    done = subprocess.run([sys.executable, "-m", "bkcli.main", "-s", f"127.0.0.1:{cluster.stream_storage_port}",
                           *argv], capture_output=True, text=True, env=environment, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def watch_lines(cluster, table: str, key: str, lines: list[str]) -> subprocess.Popen:
    environment = {**os.environ, "PYTHONPATH": SRC}
    process = subprocess.Popen([sys.executable, "-m", "bkcli.main", "-s", f"127.0.0.1:{cluster.stream_storage_port}",
                                "table", "get", "-t", table, "-k", key, "--watch"],
                               stdout=subprocess.PIPE, text=True, env=environment)
    threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")), daemon=True).start()
    return process


def wait_for(condition, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_the_seed_examples_a_distributed_counter_and_a_watched_key(cluster):
    assert "created stream default/test_dist_counter" in bk(cluster, "stream", "create", "--stream", "test_dist_counter")
    lines: list[str] = []
    watcher = watch_lines(cluster, "test_dist_counter", "counter-1", lines)
    try:
        wait_for(lambda: lines)                          # "(no such key)" first
        assert "no such key" in lines[0]
        assert bk(cluster, "table", "incr", "-t", "test_dist_counter", "-k", "counter-1", "-a", "100").strip() == \
            "counter-1 = 100"
        bk(cluster, "table", "incr", "-t", "test_dist_counter", "-k", "counter-1", "-a", "100")
        wait_for(lambda: len(lines) >= 3)
        assert lines[1].startswith("counter-1 = 100 ") and lines[2].startswith("counter-1 = 200 ")
    finally:
        watcher.terminate()
        watcher.wait(10)

    bk(cluster, "stream", "create", "--stream", "test_kv_store")
    bk(cluster, "table", "put", "-t", "test_kv_store", "-k", "test-key", "-v", "test-value-1")
    lines = []
    watcher = watch_lines(cluster, "test_kv_store", "test-key", lines)
    try:
        wait_for(lambda: lines)
        assert lines[0].startswith("test-key = test-value-1 ")
        bk(cluster, "table", "put", "-t", "test_kv_store", "-k", "test-key", "-v", "test-value-2")
        bk(cluster, "table", "delete", "-t", "test_kv_store", "-k", "test-key")
        wait_for(lambda: len(lines) >= 3)
        assert lines[1].startswith("test-key = test-value-2 (version 2") or "test-value-2" in lines[1]
        assert "deleted" in lines[2]
    finally:
        watcher.terminate()
        watcher.wait(10)
    assert "STREAM_NOT_FOUND" in subprocess.run(
        [sys.executable, "-m", "bkcli.main", "-s", f"127.0.0.1:{cluster.stream_storage_port}", "table", "get",
         "-t", "missing", "-k", "k"], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC}).stderr


def test_a_stream_created_with_its_number_of_ranges_keeps_it_and_serves_a_table_over_them(cluster):
    with StorageClient(f"127.0.0.1:{cluster.stream_storage_port}") as client:
        client.create_stream("default", "wide", ranges=6)
        client.create_stream("default", "narrow")
        conf = client.get_stream("default", "wide").stream_conf
        assert (conf.initial_num_ranges, conf.min_num_ranges) == (6, 6)
        assert client.get_stream("default", "narrow").stream_conf.initial_num_ranges == 4     # the default
        table = client.table("default", "wide")
        for index in range(60):
            table.put(b"key-%d" % index, b"value-%d" % index)
        assert [table.get(b"key-%d" % index).value for index in range(60)] == [b"value-%d" % i for i in range(60)]


def test_a_killed_server_restarts_with_every_acknowledged_increment(cluster):
    address = f"127.0.0.1:{cluster.stream_storage_port}"
    with StorageClient(address) as client:
        client.create_stream("default", "hits")
    acknowledged = [0]
    stop = threading.Event()

    def increment_until_stopped():
        with StorageClient(address) as client:
            table = client.table("default", "hits")
            while not stop.is_set():
                try:
                    table.increment(b"total", 1)
                except Exception:        # the server is gone: not acknowledged
                    return
                acknowledged[0] += 1

    workers = [threading.Thread(target=increment_until_stopped) for _ in range(4)]
    for worker in workers:
        worker.start()
    wait_for(lambda: acknowledged[0] >= 200)
    cluster.stream_storage_servers[0].kill()
    stop.set()
    for worker in workers:
        worker.join(60)
    cluster.stream_storage_servers[0] = spawn_bk(
        "stream storage", ["stream-storage", "--metastore", cluster.metastore_uri,
                           "--port", str(cluster.stream_storage_port)],
        log_path=os.path.join(cluster.data_dir, "stream-storage-restarted.log"), port=cluster.stream_storage_port,
        ready_text="stream storage listening on")
    with StorageClient(address) as client:
        total = client.table("default", "hits").get(b"total")
    # Every acknowledged increment survived; at most the ones in flight at the kill may also have.
    assert acknowledged[0] <= total.number_value <= acknowledged[0] + len(workers)


def test_a_bookie_can_serve_stream_storage_itself(tmp_path):
    """streamStorageEnabled in a bookie's config runs the gRPC endpoint in the bookie process."""
    from bklocal.processes import spawn_bookie
    cluster = StandaloneCluster.on_free_ports(str(tmp_path / "cluster"), bookie_count=3, metastore_count=1)
    port = free_port()
    extra_bookie = None
    try:
        cluster.start(log=lambda line: None)
        extra_bookie = spawn_bookie(data_dir=str(tmp_path / "bookie-with-storage"), metastore_uri=cluster.metastore_uri,
                                    extra={"streamStorageEnabled": True, "streamStoragePort": port})
        wait_for(lambda: "stream storage listening" in extra_bookie.log_tail(50))
        with StorageClient(f"127.0.0.1:{port}") as client:
            client.create_stream("default", "inside")
            table = client.table("default", "inside")
            assert table.increment(b"n", 5) == 5 and table.get(b"n").number_value == 5
    finally:
        if extra_bookie is not None:
            extra_bookie.stop()
        cluster.stop()
