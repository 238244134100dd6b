"""`bk bench ledger --peers` against real NATS JetStream and etcd clusters, for a second each.

Opt-in (BK_BENCH_PEERS=1): they need nats-server and etcd on PATH and the bench extra
(nats-py, aetcd); without them each test skips and says what to install."""

import json
import os
import subprocess
import sys

import pytest

from bkbench import peers as bench_peers

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src")

pytestmark = pytest.mark.skipif(os.environ.get("BK_BENCH_PEERS") != "1",
                                reason="starts NATS and etcd clusters; set BK_BENCH_PEERS=1 to run")


def skip_unless_runnable(peer: bench_peers.Peer) -> None:
    reason = bench_peers.skip_reason(peer)
    if reason is not None:
        pytest.skip(reason)


def assert_measured(result: dict) -> None:
    assert "skipped" not in result and "error" not in result, result
    assert result["one_at_a_time"]["adds_per_second"] > 0
    assert result["one_at_a_time"]["add_latency_p50_ms"] > 0
    assert result["pipelined"]["adds_per_second"] > 0
    assert result["pipelined"]["errors"] == []


@pytest.mark.parametrize("peer", bench_peers.PEERS, ids=[peer.name for peer in bench_peers.PEERS])
def test_peer_cluster_takes_appends(peer, tmp_path):
    skip_unless_runnable(peer)
    result = bench_peers.run_peer(peer, seconds=1.0, payload=os.urandom(1024), directory=str(tmp_path))
    assert_measured(result)
    assert result["nodes"] == 3 and "acknowledged_when" in result
    assert list(tmp_path.iterdir()) == [], "a measured peer's temp dir is removed"


def test_bench_ledger_with_peers_reports_ratios(tmp_path):
    for peer in bench_peers.PEERS:
        skip_unless_runnable(peer)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]))
    answer = subprocess.run([sys.executable, "-m", "bkcli.main", "bench", "ledger", "--seconds", "1", "--peers",
                             "--dir", str(tmp_path)],
                            capture_output=True, text=True, env=env, timeout=300)
    assert answer.returncode == 0, answer.stderr
    report = json.loads(answer.stdout)
    assert report["pipelined"]["adds_per_second"] > 0
    assert set(report["peers"]) == {"nats_jetstream", "etcd"}
    for name, result in report["peers"].items():
        assert_measured(result)
        assert report["ratios"][f"bookkeeper_over_{name}"]["pipelined_adds_per_second"] > 0
        assert report["ratios"][f"bookkeeper_over_{name}"]["one_at_a_time_adds_per_second"] > 0
