"""The cluster under test: real `bk` (and ZooKeeper) processes on 127.0.0.1, each with its own
data dir, wired to each other through the harness's proxies (bkjepsen.proxy).

Process names: m1..m3 (raft-lite metastore) or z1..z3 (ZooKeeper), b1..bN (bookies), ss (stream
storage), and "c" for the harness's own clients. Links:
  - raft-lite peers: m_i -> m_j for every pair (each node's --peers names its own link ports);
  - metastore clients: c, ss and every bookie -> every metastore node (their URIs list links);
  - bookies: c -> b_k, the port each bookie advertises, so every client (the harness, stream
    storage) dials the bookie through it. ZooKeeper's quorum traffic is not proxied.
A bookie's ledger directory can be a small tmpfs (root only) that the disk-full nemesis fills.

Starting and stopping block (they wait for log lines), so they run in worker threads while the
proxies keep serving in the trio loop. stop() is synchronous and safe to call twice; it ends
every process (SIGCONT first, so paused ones can die) and unmounts every tmpfs.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass, field
from typing import Callable

import trio

from bklocal.processes import free_port, free_ports, spawn_bk, write_toml
from bkjepsen.proxy import Proxies

TMPFS_SIZE_MB = 64
METASTORE_SESSION_TIMEOUT_MS = 4000
STOP_WAIT_S = 5.0


@dataclass(frozen=True)
class ClusterSpec:
    metastore: str = "raft"          # raft | zk
    bookie_count: int = 4
    stream_storage_count: int = 0   # stream storage servers ss1..ssN (they share the tables)
    tmpfs_ledger_dirs: bool = False  # a small tmpfs per bookie ledger dir (for the disk-full nemesis)


@dataclass
class Service:
    """One OS process the harness may kill, pause and restart."""
    name: str
    kind: str                                   # metastore | bookie | stream-storage
    port: int
    data_dir: str
    launch: Callable[[int], subprocess.Popen]   # incarnation -> a started, ready process
    process: subprocess.Popen | None = None
    incarnation: int = 0
    is_paused: bool = False
    exits: list[str] = field(default_factory=list)   # unexpected exits seen (status, log tail)

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        assert not self.is_running(), self.name
        self.incarnation += 1
        self.is_paused = False
        self.process = self.launch(self.incarnation)

    def signal(self, signum: int) -> None:
        if self.is_running():
            os.kill(self.process.pid, signum)

    def kill(self) -> None:
        if self.process is not None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGKILL)
            self.process.wait()
        self.is_paused = False

    def stop(self) -> None:
        if self.process is None:
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.process.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self.kill()


class Cluster:
    def __init__(self, spec: ClusterSpec, root: str) -> None:
        self.spec = spec
        self.root = os.path.abspath(root)
        self.proxies = Proxies()
        self.services: dict[str, Service] = {}
        self.tmpfs_mounts: list[str] = []
        self.zk = None
        prefix = "m" if spec.metastore == "raft" else "z"
        self.metastore_names = [f"{prefix}{i + 1}" for i in range(3)]
        self.bookie_names = [f"b{i + 1}" for i in range(spec.bookie_count)]

    # -- wiring ---------------------------------------------------------------------------------

    def metastore_uri(self, source: str) -> str:
        """The URI `source` uses: every metastore node through source's own links."""
        hosts = ",".join(f"127.0.0.1:{self.proxies.port(source, m)}" for m in self.metastore_names)
        return f"raft://{hosts}" if self.spec.metastore == "raft" else f"zk://{hosts}/ledgers"

    @property
    def client_uri(self) -> str:
        return self.metastore_uri("c")

    def bookie_address(self, name: str) -> str:
        """The bookie id clients see: its advertised link port."""
        return f"127.0.0.1:{self.proxies.port('c', name)}"

    def bookie_of_address(self, address: str) -> str | None:
        for name in self.bookie_names:
            if self.bookie_address(name) == address:
                return name
        return None

    @property
    def stream_storage_names(self) -> list[str]:
        return [f"ss{i + 1}" for i in range(self.spec.stream_storage_count)]

    @property
    def stream_storage_addresses(self) -> list[str]:
        return [f"127.0.0.1:{self.services[name].port}" for name in self.stream_storage_names]

    # -- starting -------------------------------------------------------------------------------

    async def start(self, nursery: trio.Nursery) -> None:
        os.makedirs(self.root, exist_ok=True)
        metastore_ports = await self._start_metastore(nursery)
        clients = ["c", *self.bookie_names, *self.stream_storage_names]
        for source in clients:
            for name, port in zip(self.metastore_names, metastore_ports):
                await self.proxies.add(nursery, source=source, target=name, target_port=port)
        for name in self.bookie_names:
            port = free_port()
            await self.proxies.add(nursery, source="c", target=name, target_port=port)
            self.services[name] = self._bookie_service(name, port)
        await self._start_all(self.bookie_names)
        for name in self.stream_storage_names:
            self.services[name] = self._stream_storage_service(name, free_port())
        await self._start_all(self.stream_storage_names)

    async def _start_all(self, names: list[str]) -> None:
        async with trio.open_nursery() as starting:
            for name in names:
                starting.start_soon(lambda n=name: trio.to_thread.run_sync(self.services[n].start))

    async def _start_metastore(self, nursery: trio.Nursery) -> list[int]:
        if self.spec.metastore == "zk":
            from bklocal.zookeeper import ZkEnsemble
            self.zk = ZkEnsemble(os.path.join(self.root, "zk"), 3)
            for name, node in zip(self.metastore_names, self.zk.nodes):
                self.services[name] = Service(name, "metastore", node.client_port, node.directory,
                                              lambda _i, node=node: self._launch_zk_node(node))
            await self._start_all(self.metastore_names)
            return [node.client_port for node in self.zk.nodes]
        ports = free_ports(len(self.metastore_names))
        for source in self.metastore_names:
            for target, port in zip(self.metastore_names, ports):
                if source != target:
                    await self.proxies.add(nursery, source=source, target=target, target_port=port)
        for index, name in enumerate(self.metastore_names):
            peers = ",".join(f"{j + 1}=127.0.0.1:{port if j == index else self.proxies.port(name, other)}"
                             for j, (other, port) in enumerate(zip(self.metastore_names, ports)))
            data_dir = os.path.join(self.root, name)
            argv = ["metastore", "--node-id", str(index + 1), "--peers", peers, "--data-dir", data_dir,
                    "--session-timeout-ms", str(METASTORE_SESSION_TIMEOUT_MS)]
            self.services[name] = Service(name, "metastore", ports[index], data_dir,
                                          lambda i, n=name, a=argv, d=data_dir, p=ports[index]: self._launch(n, a, d, p, i))
        await self._start_all(self.metastore_names)
        return ports

    def _launch(self, name: str, argv: list[str], data_dir: str, port: int, incarnation: int) -> subprocess.Popen:
        os.makedirs(data_dir, exist_ok=True)
        child = spawn_bk(name, argv, log_path=os.path.join(data_dir, f"{name}.{incarnation}.log"), port=port,
                         ready_text="listening on", timeout_s=60.0)
        return child.process

    def _launch_zk_node(self, node) -> subprocess.Popen:
        self.zk.start_node(node)
        self.zk.wait_ready([node])
        return node.process

    def _bookie_service(self, name: str, port: int) -> Service:
        data_dir = os.path.join(self.root, name)
        os.makedirs(data_dir, exist_ok=True)
        if self.spec.tmpfs_ledger_dirs:
            self._mount_tmpfs(os.path.join(data_dir, "ledgers"))
        config_path = os.path.join(data_dir, "bookie.toml")
        write_toml(config_path, {
            "metadataServiceUri": self.metastore_uri(name), "dataDir": data_dir, "bookiePort": port,
            "advertisedAddress": self.bookie_address(name), "flushInterval": 500, "diskCheckInterval": 500,
            "logSizeLimit": 4 * 1024 * 1024, "journalMaxSizeMB": 16, "gcWaitTime": 5000})
        return Service(name, "bookie", port, data_dir,
                       lambda i: self._launch(name, ["bookie", "--config", config_path], data_dir, port, i))

    def _stream_storage_service(self, name: str, port: int) -> Service:
        data_dir = os.path.join(self.root, name)
        argv = ["stream-storage", "--metastore", self.metastore_uri(name), "--port", str(port),
                "--data-dir", data_dir]
        return Service(name, "stream-storage", port, data_dir,
                       lambda i: self._launch(name, argv, data_dir, port, i))

    def _mount_tmpfs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE_MB}m", "tmpfs", path], check=True,
                       capture_output=True, timeout=10)
        self.tmpfs_mounts.append(path)

    # -- faults and questions -------------------------------------------------------------------

    async def metastore_leader(self) -> str | None:
        if self.spec.metastore == "zk":
            from bklocal.zookeeper import mode
            for name in self.metastore_names:
                service = self.services[name]
                if service.is_running() and not service.is_paused and \
                        await trio.to_thread.run_sync(mode, service.port) == "leader":
                    return name
            return None
        from bkmetastore.raftlite.client import member_status
        for name in self.metastore_names:
            service = self.services[name]
            if not service.is_running() or service.is_paused:
                continue
            try:
                status = await member_status(f"127.0.0.1:{service.port}", timeout_s=1.0)
            except (OSError, trio.TooSlowError, ConnectionError):
                continue
            if status.get("role") == "leader":
                return name
        return None

    def unexpected_exits(self) -> dict[str, str]:
        """Services that should be running but are not: name -> status and log tail."""
        found = {}
        for name, service in self.services.items():
            if service.process is not None and not service.is_running():
                found[name] = f"exit status {service.process.returncode}"
        return found

    def stop(self) -> None:
        for service in reversed(list(self.services.values())):
            try:
                service.stop()
            except OSError:
                pass
        for path in reversed(self.tmpfs_mounts):
            subprocess.run(["umount", "-l", path], capture_output=True, timeout=10)
        self.tmpfs_mounts.clear()
