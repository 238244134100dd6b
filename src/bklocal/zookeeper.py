"""Real ZooKeeper servers on 127.0.0.1, for tests and the jepsen-like harness: a standalone
server or a 3-node ensemble started in the foreground from a directory of the caller's with free
ports, stopped (or killed) by pid.

Debian's `zookeeper` package provides the jars; without them the tests fail and say to install
it (CI's .ci/run does). Readiness is the `srvr` four-letter word reporting a Mode, not just ruok.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass

from bklocal.processes import free_port, free_ports  # noqa: F401  (free_port: tests import it here)

JARS = ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-simple.jar")
JAVA_DIR = "/usr/share/java"


def classpath() -> str:
    missing = [jar for jar in JARS if not os.path.exists(os.path.join(JAVA_DIR, jar))]
    if missing:
        raise RuntimeError(f"ZooKeeper jars {missing} are not in {JAVA_DIR}: "
                           f"apt-get install -y zookeeper (CI's .ci/run does this)")
    return ":".join(os.path.join(JAVA_DIR, jar) for jar in JARS)


def four_letter_word(port: int, word: bytes = b"srvr", timeout_s: float = 1.0) -> str:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
            sock.sendall(word)
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


def mode(port: int) -> str | None:
    for line in four_letter_word(port).splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


@dataclass
class ZkNode:
    node_id: int
    client_port: int
    directory: str
    process: subprocess.Popen | None = None

    def log_tail(self, count: int = 30) -> str:
        try:
            with open(os.path.join(self.directory, "server.log"), errors="replace") as file:
                return "".join(file.readlines()[-count:])
        except OSError:
            return ""


class ZkEnsemble:
    def __init__(self, root: str, node_count: int = 1, *, tick_ms: int = 200) -> None:
        self.root = root
        self.tick_ms = tick_ms
        ports = free_ports(3 * node_count)
        self.nodes = [ZkNode(i + 1, ports[i], os.path.join(root, f"zk{i + 1}")) for i in range(node_count)]
        self._quorum_ports = [(ports[node_count + 2 * i], ports[node_count + 2 * i + 1]) for i in range(node_count)]

    @property
    def hosts(self) -> str:
        return ",".join(f"127.0.0.1:{n.client_port}" for n in self.nodes)

    def _write_config(self, node: ZkNode) -> str:
        os.makedirs(os.path.join(node.directory, "data"), exist_ok=True)
        lines = [f"tickTime={self.tick_ms}", "initLimit=20", "syncLimit=10",
                 f"dataDir={node.directory}/data", f"clientPort={node.client_port}",
                 "clientPortAddress=127.0.0.1", "admin.enableServer=false",
                 "4lw.commands.whitelist=srvr,ruok,stat", "maxSessionTimeout=60000", "minSessionTimeout=400"]
        if len(self.nodes) > 1:
            with open(os.path.join(node.directory, "data", "myid"), "w") as file:
                file.write(str(node.node_id))
            for other, (peer_port, election_port) in zip(self.nodes, self._quorum_ports):
                lines.append(f"server.{other.node_id}=127.0.0.1:{peer_port}:{election_port}")
        path = os.path.join(node.directory, "zoo.cfg")
        with open(path, "w") as file:
            file.write("\n".join(lines) + "\n")
        return path

    def start_node(self, node: ZkNode) -> None:
        config = self._write_config(node)
        log = open(os.path.join(node.directory, "server.log"), "ab")
        node.process = subprocess.Popen(
            ["java", "-Xmx256m", "-cp", classpath(), "org.apache.zookeeper.server.quorum.QuorumPeerMain", config],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def start(self, timeout_s: float = 60.0) -> None:
        for node in self.nodes:
            self.start_node(node)
        self.wait_ready(self.nodes, timeout_s)

    def wait_ready(self, nodes: list[ZkNode], timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(mode(n.client_port) for n in nodes):
                return
            for node in nodes:
                if node.process.poll() is not None:
                    raise RuntimeError(f"ZooKeeper node {node.node_id} exited; its log:\n{node.log_tail()}")
            time.sleep(0.1)
        raise RuntimeError("ZooKeeper not ready: " + "; ".join(f"node {n.node_id}: {n.log_tail(5)}" for n in nodes))

    def leader(self) -> ZkNode:
        for node in self.nodes:
            if mode(node.client_port) in ("leader", "standalone"):
                return node
        raise RuntimeError("no ZooKeeper leader")

    def kill(self, node: ZkNode) -> None:
        if node.process is not None and node.process.poll() is None:
            node.process.send_signal(signal.SIGKILL)
            node.process.wait()

    def stop(self) -> None:
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                node.process.terminate()
        for node in self.nodes:
            if node.process is not None:
                try:
                    node.process.wait(10)
                except subprocess.TimeoutExpired:
                    self.kill(node)
