"""Child processes of the local cluster: readiness is judged on the run's own log lines."""

import os
import signal
import sys

import pytest

from bklocal import processes
from bklocal.processes import spawn_bk


def test_a_reused_log_from_an_earlier_run_does_not_make_a_new_run_ready(tmp_path):
    log_path = tmp_path / "child.log"
    log_path.write_text("... listening on 127.0.0.1:1234\n")         # what the last run printed
    with pytest.raises(RuntimeError, match="exited with status 0 before it was ready"):
        spawn_bk("help", ["--help"], log_path=str(log_path), port=0, ready_text="listening on", timeout_s=30)
    assert log_path.read_text().startswith("... listening on"), "the earlier run's lines are kept"


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range():
    """A server restarted on its port must find it free: ports inside the ephemeral range can be
    taken meanwhile as the source port of any outgoing connection."""
    import socket

    from bklocal.processes import _ephemeral_port_low, free_ports
    ports = free_ports(20)
    assert len(set(ports)) == 20
    assert all(port < _ephemeral_port_low() for port in ports)
    for port in ports:
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", port))


def test_free_ports_leave_out_the_ports_chosen_before(monkeypatch):
    """A cluster's HTTP ports are chosen before its servers' ports, and nothing listens on them
    until the servers start: a second choice must not hand them out again (a bench's bookie once
    found its HTTP port taken by another server of its own cluster)."""
    import random

    from bklocal import processes
    from bklocal.standalone import StandaloneCluster
    # A chooser with only a few ports to draw from makes a clash certain without `excluding`
    # (then what it cannot find there, the kernel picks).
    few = [20_001, 20_002, 20_003, 20_004, 20_005, 20_006]     # five of six hold two of any three
    monkeypatch.setattr(random.Random, "randrange", lambda self, low, high: self.choice(few))
    http = processes.free_ports(3)
    assert len(set(http)) == 3
    assert set(processes.free_ports(5, excluding=http)).isdisjoint(http)
    cluster = StandaloneCluster.on_free_ports("/nonexistent", bookie_count=3, metastore_count=1,
                                              with_stream_storage=True, http_ports=http)
    servers = {*cluster.bookie_ports, *cluster.metastore_ports, cluster.stream_storage_port}
    assert len(servers) == 5 and servers.isdisjoint(http)


def test_a_stop_signal_while_a_child_starts_stops_that_child(tmp_path, monkeypatch):
    # SIGINT lands just as Popen returns (the race `bk standalone`'s Ctrl-C test met now and
    # then): the child must not be left running, and the interruption still reaches the caller.
    started = []
    real_popen = processes.subprocess.Popen

    def popen_then_interrupted(argv, **kwargs):
        child = real_popen([sys.executable, "-c", "import time; time.sleep(60)"], **kwargs)
        started.append(child)
        os.kill(os.getpid(), signal.SIGINT)
        return child
    monkeypatch.setattr(processes.subprocess, "Popen", popen_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        processes.spawn_bk("sleeper", [], log_path=str(tmp_path / "log"), port=0, ready_text="never")
    assert started and started[0].poll() is not None, "the child started is stopped"
