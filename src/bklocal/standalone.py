"""A standalone cluster on 127.0.0.1: raft-lite metastore nodes and bookies, each a `bk` child
process with its data under one directory (kept across restarts), and optionally stream storage
servers. `bk standalone` runs one in the foreground; tests and benchmarks start one on free
ports with StandaloneCluster.on_free_ports.

Several stream storage servers share the tables (each range has one owner at a time): each
listens on a port of its own, which names it, and all of them on the stream storage port with
SO_REUSEPORT, so a client given that one address is spread over them. One server listens on the
stream storage port alone.
"""

from __future__ import annotations

import os

from bklocal.processes import free_ports, spawn_bk, spawn_bookie


def raft_uri(ports) -> str:
    return "raft://" + ",".join(f"127.0.0.1:{port}" for port in ports)


class StandaloneCluster:
    """The child processes of one standalone cluster (`bk standalone`, tests and benchmarks):
    raft-lite nodes on metastore_ports, one bookie per bookie_ports entry."""

    def __init__(self, data_dir: str, *, bookie_ports: list[int], metastore_ports: list[int],
                 http_ports: list[int] | None = None, bookie_extra: dict | None = None,
                 stream_storage_port: int = 0, stream_storage_server_count: int = 1,
                 stream_storage_extra: list[str] | None = None) -> None:
        """bookie_extra: more options of every bookie's config (TOML keys); stream_storage_extra:
        more arguments of every `bk stream-storage` (its credentials, say)."""
        self.data_dir = os.path.abspath(data_dir)
        self.metastore_ports = list(metastore_ports)
        self.bookie_ports = list(bookie_ports)
        self.http_ports = list(http_ports) if http_ports else [0] * len(self.bookie_ports)
        self.metastore_uri = raft_uri(self.metastore_ports)
        self.bookie_extra = bookie_extra or {}
        self.stream_storage_extra = list(stream_storage_extra or [])
        self.stream_storage_port = stream_storage_port
        self.stream_storage_server_count = stream_storage_server_count if stream_storage_port else 0
        self.metastore_nodes = []
        self.bookies = []
        self.stream_storage_servers = []

    @classmethod
    def on_free_ports(cls, data_dir: str, *, bookie_count: int, metastore_count: int = 3,
                      with_stream_storage: bool = False, **options) -> "StandaloneCluster":
        """A cluster whose every port is a distinct free one (tests and benchmarks)."""
        ports = free_ports(bookie_count + metastore_count + 1)
        return cls(data_dir, bookie_ports=ports[:bookie_count],
                   metastore_ports=ports[bookie_count:bookie_count + metastore_count],
                   stream_storage_port=ports[-1] if with_stream_storage else 0, **options)

    def start(self, *, log=print) -> None:
        os.makedirs(self.data_dir, exist_ok=True)
        peers = ",".join(f"{i + 1}=127.0.0.1:{port}" for i, port in enumerate(self.metastore_ports))
        for index, port in enumerate(self.metastore_ports):
            node_dir = os.path.join(self.data_dir, f"metastore{index + 1}")
            os.makedirs(node_dir, exist_ok=True)
            self.metastore_nodes.append(spawn_bk(
                f"metastore node {index + 1}", ["metastore", "--node-id", str(index + 1), "--peers", peers,
                                                "--data-dir", node_dir],
                log_path=os.path.join(node_dir, "metastore.log"), port=port, ready_text="listening on"))
            log(f"  metastore node {index + 1}: 127.0.0.1:{port}  (data {node_dir})")
        for index, port in enumerate(self.bookie_ports):
            self.start_bookie(index)
            scheme = "https" if self.bookie_extra.get("httpServerTlsEnable") else "http"
            http = f", {scheme}://127.0.0.1:{self.http_ports[index]}/metrics" if self.http_ports[index] else ""
            log(f"  bookie {index + 1}: 127.0.0.1:{port}{http}  (data {self.bookie_dir(index)})")
        if self.stream_storage_server_count == 1:
            self.stream_storage_servers.append(self._spawn_stream_storage("", self.stream_storage_port, []))
            log(f"  stream storage (tables, gRPC): 127.0.0.1:{self.stream_storage_port}")
        elif self.stream_storage_server_count > 1:
            for index, port in enumerate(free_ports(self.stream_storage_server_count)):
                self.stream_storage_servers.append(self._spawn_stream_storage(
                    str(index + 1), port, ["--shared-port", str(self.stream_storage_port)]))
                log(f"  stream storage server {index + 1}: 127.0.0.1:{port}")
            log(f"  stream storage (tables, gRPC): 127.0.0.1:{self.stream_storage_port}, shared by "
                f"{self.stream_storage_server_count} servers")

    def _spawn_stream_storage(self, suffix: str, port: int, extra: list[str]):
        name = f"stream-storage{suffix}"
        return spawn_bk(name.replace("-", " "), ["stream-storage", "--metastore", self.metastore_uri,
                                                 "--port", str(port), "--data-dir", os.path.join(self.data_dir, name),
                                                 *extra, *self.stream_storage_extra],
                        log_path=os.path.join(self.data_dir, f"{name}.log"), port=port,
                        ready_text="stream storage listening on")

    def bookie_dir(self, index: int) -> str:
        return os.path.join(self.data_dir, f"bookie{index + 1}")

    def start_bookie(self, index: int):
        extra = {**self.bookie_extra}
        if self.http_ports[index]:
            extra["httpServerPort"] = self.http_ports[index]
        bookie = spawn_bookie(data_dir=self.bookie_dir(index), metastore_uri=self.metastore_uri,
                              port=self.bookie_ports[index], extra=extra)
        if index < len(self.bookies):
            self.bookies[index] = bookie
        else:
            self.bookies.append(bookie)
        return bookie

    @property
    def children(self) -> list:
        return self.stream_storage_servers + self.bookies + self.metastore_nodes

    def stop(self) -> None:
        for child in self.children:
            child.stop()
