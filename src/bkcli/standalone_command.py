"""`bk standalone`: a whole cluster on 127.0.0.1 — a 3-node raft-lite metastore and bookies,
each its own process, data kept under --data-dir across restarts. Ctrl-C stops it cleanly
(stream storage, then bookies, so final checkpoints still reach a live metastore). With
--stream-storage-port (4181 by default) it also serves streams and tables over gRPC.

With the default ports, every client command (`bk shell listbookies`, `bk shell simpletest`)
finds it without flags.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from bkcli.defaults import STANDALONE_BOOKIE_PORT_BASE, STANDALONE_DATA_DIR, STANDALONE_RAFT_PORTS


def add_parser(commands) -> None:
    standalone = commands.add_parser("standalone", help="run a local cluster: raft-lite metastore + bookies")
    standalone.add_argument("--data-dir", default=STANDALONE_DATA_DIR, help=f"where data lives ({STANDALONE_DATA_DIR})")
    standalone.add_argument("--bookies", type=int, default=3, help="number of bookies (3)")
    standalone.add_argument("--metastore-nodes", type=int, choices=(1, 3), default=3,
                            help="raft-lite nodes: 3 (default) or 1")
    standalone.add_argument("--bookie-port", type=int, default=STANDALONE_BOOKIE_PORT_BASE,
                            help=f"first bookie port ({STANDALONE_BOOKIE_PORT_BASE}); bookie i listens on it + i")
    standalone.add_argument("--metastore-port", type=int, default=STANDALONE_RAFT_PORTS[0],
                            help=f"first raft-lite port ({STANDALONE_RAFT_PORTS[0]}); node i listens on it + i")
    standalone.add_argument("--http-port", type=int, default=8000,
                            help="first bookie HTTP admin port (8000); 0 turns it off")
    standalone.add_argument("--stream-storage-port", type=int, default=4181,
                            help="stream storage (tables, gRPC) port (4181); 0 turns it off")
    standalone.set_defaults(run=cmd_standalone)


def raft_uri(ports) -> str:
    return "raft://" + ",".join(f"127.0.0.1:{port}" for port in ports)


class StandaloneCluster:
    """The child processes of one standalone cluster (also used by tests and benchmarks):
    raft-lite nodes on metastore_ports, one bookie per bookie_ports entry."""

    def __init__(self, data_dir: str, *, bookie_ports: list[int], metastore_ports: list[int],
                 http_ports: list[int] | None = None, bookie_extra: dict | None = None,
                 stream_storage_port: int = 0) -> None:
        self.data_dir = os.path.abspath(data_dir)
        self.metastore_ports = list(metastore_ports)
        self.bookie_ports = list(bookie_ports)
        self.http_ports = list(http_ports) if http_ports else [0] * len(self.bookie_ports)
        self.metastore_uri = raft_uri(self.metastore_ports)
        self.bookie_extra = bookie_extra or {}
        self.stream_storage_port = stream_storage_port
        self.metastore_nodes = []
        self.bookies = []
        self.stream_storage = None

    @classmethod
    def on_free_ports(cls, data_dir: str, *, bookie_count: int, metastore_count: int = 3,
                      with_stream_storage: bool = False, **options) -> "StandaloneCluster":
        """A cluster whose every port is a distinct free one (tests and benchmarks)."""
        from bkcli.local_processes import free_ports
        ports = free_ports(bookie_count + metastore_count + 1)
        return cls(data_dir, bookie_ports=ports[:bookie_count],
                   metastore_ports=ports[bookie_count:bookie_count + metastore_count],
                   stream_storage_port=ports[-1] if with_stream_storage else 0, **options)

    def start(self, *, log=print) -> None:
        from bkcli.local_processes import spawn_bk
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
            http = f", http://127.0.0.1:{self.http_ports[index]}/metrics" if self.http_ports[index] else ""
            log(f"  bookie {index + 1}: 127.0.0.1:{port}{http}  (data {self.bookie_dir(index)})")
        if self.stream_storage_port:
            self.stream_storage = spawn_bk(
                "stream storage", ["stream-storage", "--metastore", self.metastore_uri,
                                   "--port", str(self.stream_storage_port),
                                   "--data-dir", os.path.join(self.data_dir, "stream-storage")],
                log_path=os.path.join(self.data_dir, "stream-storage.log"), port=self.stream_storage_port,
                ready_text="stream storage listening on")
            log(f"  stream storage (tables, gRPC): 127.0.0.1:{self.stream_storage_port}")

    def bookie_dir(self, index: int) -> str:
        return os.path.join(self.data_dir, f"bookie{index + 1}")

    def start_bookie(self, index: int):
        from bkcli.local_processes import spawn_bookie
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
        return ([self.stream_storage] if self.stream_storage else []) + self.bookies + self.metastore_nodes

    def stop(self) -> None:
        for child in self.children:
            child.stop()


def cmd_standalone(args) -> int:
    cluster = StandaloneCluster(
        args.data_dir, bookie_ports=[args.bookie_port + i for i in range(args.bookies)],
        metastore_ports=[args.metastore_port + i for i in range(args.metastore_nodes)],
        http_ports=[args.http_port + i for i in range(args.bookies)] if args.http_port else None,
        bookie_extra={"autoRecoveryDaemonEnabled": True}, stream_storage_port=args.stream_storage_port)
    print(f"bk standalone: starting {args.metastore_nodes} raft-lite node(s) and {args.bookies} bookies "
          f"under {cluster.data_dir}", flush=True)
    try:
        cluster.start(log=lambda line: print(line, flush=True))
    except RuntimeError as exc:
        cluster.stop()
        print(f"bk standalone: {exc}", file=sys.stderr)
        return 1
    print(f"\nready. metastore: {cluster.metastore_uri}\n"
          f"try: bk shell listbookies    bk shell simpletest    bk stream create --stream demo\n"
          f"     bk table incr -t demo -k counter -a 1    (Ctrl-C stops the cluster)", flush=True)
    stop = []
    # SIGINT too, explicitly: a shell starts a background job with SIGINT ignored, and then
    # Python raises no KeyboardInterrupt for it (a script's `kill -INT` would do nothing).
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    try:
        while not stop:
            for child in cluster.children:
                if not child.is_running():
                    print(f"bk standalone: {child.name} exited ({child.process.returncode}); its log ends:\n"
                          f"{child.log_tail()}", file=sys.stderr)
                    stop.append(1)
                    break
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    # A second Ctrl-C must not leave orphans behind: stopping cleanly takes a few seconds.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    print("bk standalone: stopping stream storage and bookies, then the metastore", flush=True)
    cluster.stop()
    return 0
