"""A standalone cluster on 127.0.0.1: raft-lite metastore nodes and bookies, each a `bk` child
process with its data under one directory (kept across restarts), and optionally stream storage
servers. `bk standalone` runs one in the foreground; tests and benchmarks start one on free
ports with StandaloneCluster.on_free_ports.

Several stream storage servers share the tables (each range has one owner at a time): each
listens on a port of its own, which names it, and all of them on the stream storage port with
SO_REUSEPORT, so a client given that one address is spread over them. One server listens on the
stream storage port alone.

Every process can serve its Prometheus metrics over HTTP (docs/metrics.md): a bookie on its
HTTP admin port (http_ports), a metastore node and a stream storage server on a port of their
own (metastore_http_ports, stream_storage_http_ports); start() prints where.

Secured (StandaloneSecurity: `bk standalone --tls-dir D --auth-secret-file F`), every process
asks for what the cluster has: the raft-lite members serve TLS and ask every connection for the
secret (raft+tls://), the bookies too, their HTTP admin ports serve HTTPS, and the stream storage
endpoint serves gRPC over TLS and asks for the secret; each process's own clients of the cluster
show all of it. One certificate for 127.0.0.1 serves every process.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Iterator

from bklocal.processes import free_ports, spawn_bk, spawn_bookie


TLS_FILES = ("ca.pem", "cert.pem", "key.pem")


def raft_uri(ports, *, is_tls: bool = False) -> str:
    return ("raft+tls://" if is_tls else "raft://") + ",".join(f"127.0.0.1:{port}" for port in ports)


@dataclass(frozen=True)
class StandaloneSecurity:
    """What secures a standalone cluster: `tls_dir` holding TLS_FILES (the CA, and one
    certificate for 127.0.0.1 with its key) and the shared secret, with the file it was read
    from (the members and stream storage read the file; the bookies get the secret in their
    environment, BK_bookieAuthSecret). Either may be left out."""
    tls_dir: str | None = None
    auth_secret_file: str | None = None
    auth_secret: bytes = b""

    def __post_init__(self) -> None:
        if self.auth_secret_file and not self.auth_secret:
            raise ValueError("StandaloneSecurity: give the secret read from auth_secret_file")
        if self.tls_dir:
            missing = [name for name in TLS_FILES if not os.path.isfile(self.path(name))]
            if missing:
                raise ValueError(f"--tls-dir {self.tls_dir} holds no {' and no '.join(missing)}; it needs "
                                 f"{', '.join(TLS_FILES)} (a CA, and a certificate for 127.0.0.1 it signed: "
                                 f"docs/deploy.md says how to make them)")

    def path(self, name: str) -> str:
        return os.path.abspath(os.path.join(self.tls_dir, name))

    def _secret_args(self, *flags: str) -> list[str]:
        if not self.auth_secret_file:
            return []
        return [part for flag in flags for part in (flag, os.path.abspath(self.auth_secret_file))]

    def metastore_args(self) -> list[str]:
        tls = ["--tls-cert", self.path("cert.pem"), "--tls-key", self.path("key.pem"),
               "--tls-ca", self.path("ca.pem")] if self.tls_dir else []
        return tls + self._secret_args("--auth-secret-file")

    def bookie_config(self) -> dict:
        if not self.tls_dir:
            return {}
        return {"tlsCertificatePath": self.path("cert.pem"), "tlsKeyPath": self.path("key.pem"),
                "tlsTrustStore": self.path("ca.pem"), "httpServerTlsEnable": True}

    def bookie_env(self) -> dict:
        return {"BK_bookieAuthSecret": self.auth_secret.decode()} if self.auth_secret else {}

    def stream_storage_args(self) -> list[str]:
        tls = ["--tls-ca", self.path("ca.pem"), "--grpc-tls-cert", self.path("cert.pem"),
               "--grpc-tls-key", self.path("key.pem")] if self.tls_dir else []
        return tls + self._secret_args("--auth-secret-file", "--grpc-auth-secret-file")

    def client_args(self) -> list[str]:
        """What a `bk` client command is given to reach the cluster."""
        tls = ["--tls-ca", self.path("ca.pem")] if self.tls_dir else []
        return tls + self._secret_args("--auth-secret-file")

    def client_flags(self) -> str:
        """client_args as they are printed (each after a space: "" when there are none)."""
        return "".join(f" {part}" for part in self.client_args())


class StandaloneCluster:
    """The child processes of one standalone cluster (`bk standalone`, tests and benchmarks):
    raft-lite nodes on metastore_ports, one bookie per bookie_ports entry. HTTP ports (0 or
    None: none): the bookies' admin ports, the metastore nodes' and stream storage servers'
    metrics ports."""

    def __init__(self, data_dir: str, *, bookie_ports: list[int], metastore_ports: list[int],
                 http_ports: list[int] | None = None, bookie_extra: dict | None = None,
                 stream_storage_port: int = 0, stream_storage_server_count: int = 1,
                 metastore_http_ports: list[int] | None = None,
                 stream_storage_http_ports: list[int] | None = None,
                 security: StandaloneSecurity = StandaloneSecurity(),
                 stream_storage_extra: list[str] | None = None) -> None:
        """bookie_extra: more options of every bookie's config (TOML keys); stream_storage_extra:
        more arguments of every `bk stream-storage` (its credentials, say)."""
        self.data_dir = os.path.abspath(data_dir)
        self.metastore_ports = list(metastore_ports)
        self.bookie_ports = list(bookie_ports)
        self.http_ports = list(http_ports) if http_ports else [0] * len(self.bookie_ports)
        self.metastore_http_ports = list(metastore_http_ports) if metastore_http_ports else [0] * len(metastore_ports)
        self.security = security
        self.metastore_uri = raft_uri(self.metastore_ports, is_tls=bool(security.tls_dir))
        self.bookie_extra = {**security.bookie_config(), **(bookie_extra or {})}
        self.stream_storage_extra = list(stream_storage_extra or [])
        self.stream_storage_port = stream_storage_port
        self.stream_storage_server_count = stream_storage_server_count if stream_storage_port else 0
        self.stream_storage_http_ports = (list(stream_storage_http_ports) if stream_storage_http_ports
                                          else [0] * self.stream_storage_server_count)
        self.metastore_nodes = []
        self.bookies = []
        self.stream_storage_servers = []

    @classmethod
    def on_free_ports(cls, data_dir: str, *, bookie_count: int, metastore_count: int = 3,
                      with_stream_storage: bool = False, **options) -> "StandaloneCluster":
        """A cluster whose every port is a distinct free one (tests and benchmarks), none of them
        one of the HTTP ports given in `options` (chosen before, not listened on yet)."""
        chosen = [port for key in ("http_ports", "metastore_http_ports", "stream_storage_http_ports")
                  for port in options.get(key) or () if port]
        ports = free_ports(bookie_count + metastore_count + 1, excluding=chosen)
        return cls(data_dir, bookie_ports=ports[:bookie_count],
                   metastore_ports=ports[bookie_count:bookie_count + metastore_count],
                   stream_storage_port=ports[-1] if with_stream_storage else 0, **options)

    @contextlib.contextmanager
    def running(self, *, log=print) -> Iterator["StandaloneCluster"]:
        """start(), and stop() however the block ends (a start that fails half way included)."""
        try:
            self.start(log=log)
            yield self
        finally:
            self.stop()

    def start(self, *, log=print) -> None:
        os.makedirs(self.data_dir, exist_ok=True)
        peers = ",".join(f"{i + 1}=127.0.0.1:{port}" for i, port in enumerate(self.metastore_ports))
        for index, port in enumerate(self.metastore_ports):
            node_dir = os.path.join(self.data_dir, f"metastore{index + 1}")
            os.makedirs(node_dir, exist_ok=True)
            http_port = self.metastore_http_ports[index]
            self.metastore_nodes.append(spawn_bk(
                f"metastore node {index + 1}", ["metastore", "--node-id", str(index + 1), "--peers", peers,
                                                "--data-dir", node_dir, "--http-port", str(http_port),
                                                *self.security.metastore_args()],
                log_path=os.path.join(node_dir, "metastore.log"), port=port, ready_text="listening on"))
            log(f"  metastore node {index + 1}: 127.0.0.1:{port}{_metrics_at(http_port)}  (data {node_dir})")
        for index, port in enumerate(self.bookie_ports):
            self.start_bookie(index)
            scheme = "https" if self.bookie_extra.get("httpServerTlsEnable") else "http"   # (its admin port)
            log(f"  bookie {index + 1}: 127.0.0.1:{port}{_metrics_at(self.http_ports[index], scheme)}  "
                f"(data {self.bookie_dir(index)})")
        if self.stream_storage_server_count == 1:
            self.stream_storage_servers.append(self._spawn_stream_storage(0, self.stream_storage_port, []))
            log(f"  stream storage (tables, gRPC): 127.0.0.1:{self.stream_storage_port}"
                f"{_metrics_at(self.stream_storage_http_ports[0])}")
        elif self.stream_storage_server_count > 1:
            for index, port in enumerate(free_ports(self.stream_storage_server_count)):
                self.stream_storage_servers.append(self._spawn_stream_storage(
                    index + 1, port, ["--shared-port", str(self.stream_storage_port)]))
                log(f"  stream storage server {index + 1}: 127.0.0.1:{port}"
                    f"{_metrics_at(self.stream_storage_http_ports[index])}")
            log(f"  stream storage (tables, gRPC): 127.0.0.1:{self.stream_storage_port}, shared by "
                f"{self.stream_storage_server_count} servers")

    def _spawn_stream_storage(self, number: int, port: int, extra: list[str]):
        """Server `number` (1, 2, ...; 0 when it is the only one)."""
        name = f"stream-storage{number or ''}"
        http_port = self.stream_storage_http_ports[max(0, number - 1)]
        return spawn_bk(name.replace("-", " "), ["stream-storage", "--metastore", self.metastore_uri,
                                                 "--port", str(port), "--data-dir", os.path.join(self.data_dir, name),
                                                 "--http-port", str(http_port),
                                                 *self.security.stream_storage_args(), *extra,
                                                 *self.stream_storage_extra],
                        log_path=os.path.join(self.data_dir, f"{name}.log"), port=port,
                        ready_text="stream storage listening on")

    def bookie_dir(self, index: int) -> str:
        return os.path.join(self.data_dir, f"bookie{index + 1}")

    def start_bookie(self, index: int):
        extra = {**self.bookie_extra}
        if self.http_ports[index]:
            extra["httpServerPort"] = self.http_ports[index]
        bookie = spawn_bookie(data_dir=self.bookie_dir(index), metastore_uri=self.metastore_uri,
                              port=self.bookie_ports[index], extra=extra, env=self.security.bookie_env())
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


def _metrics_at(http_port: int, scheme: str = "http") -> str:
    return f", metrics {scheme}://127.0.0.1:{http_port}/metrics" if http_port else ""
