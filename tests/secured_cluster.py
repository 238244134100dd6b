"""A local cluster with every port secured, each server its own process: bklocal's standalone
cluster secured as `bk standalone --tls-dir D --auth-secret-file F` secures it
(StandaloneSecurity), with what the tests need beside: any number of stream storage servers.

    security = make_security(directory)
    cluster = secured_cluster(directory, security, stream_storage_servers=2)
    cluster.start(log=...)

Secured: the raft-lite members (TLS, and the secret asked of every connection: raft+tls://), the
bookies (TLS and the secret), their HTTP admin ports (HTTPS and the secret), the stream storage
gRPC endpoint and the channel between its servers (TLS and the secret). One CA (trustme) signed
the one certificate (127.0.0.1) every server shows; clients trust that CA.

Not secured, by design: the metrics ports of the metastore nodes and the stream storage servers
(plain HTTP, GET /metrics and /heartbeat only), which the cluster starts as `bk standalone` does.
"""

from __future__ import annotations

import os

import trustme

from bklocal.processes import free_ports
from bklocal.standalone import StandaloneCluster, StandaloneSecurity

SECRET = b"all-secured-secret"


def make_security(directory: str) -> StandaloneSecurity:
    """A new CA, a certificate it signed for 127.0.0.1, and the secret, written under
    `directory` as `bk standalone --tls-dir DIR/tls --auth-secret-file DIR/secret` reads them."""
    tls_dir = os.path.join(directory, "tls")
    os.makedirs(tls_dir, exist_ok=True)
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    ca.cert_pem.write_to_path(os.path.join(tls_dir, "ca.pem"))
    cert.private_key_and_cert_chain_pem.write_to_path(os.path.join(tls_dir, "cert.pem"))
    cert.private_key_pem.write_to_path(os.path.join(tls_dir, "key.pem"))
    secret_file = os.path.join(directory, "secret")
    with open(secret_file, "wb") as file:
        file.write(SECRET + b"\n")
    return StandaloneSecurity(tls_dir=tls_dir, auth_secret_file=secret_file, auth_secret=SECRET)


def secured_cluster(directory: str, security: StandaloneSecurity, *, bookie_count: int = 3,
                    stream_storage_servers: int = 0, metastore_count: int = 1,
                    bookie_extra: dict | None = None) -> StandaloneCluster:
    """The cluster, not started yet: every process started with `security`, and metrics ports
    on every metastore node and stream storage server, as `bk standalone` starts them."""
    server_count = max(1, stream_storage_servers)
    ports = iter(free_ports(2 * bookie_count + 2 * metastore_count + server_count + 1))    # (all distinct)

    def take(count: int) -> list[int]:
        return [next(ports) for _ in range(count)]
    return StandaloneCluster(
        os.path.join(directory, "cluster"), bookie_ports=take(bookie_count), http_ports=take(bookie_count),
        metastore_ports=take(metastore_count), metastore_http_ports=take(metastore_count),
        stream_storage_port=next(ports) if stream_storage_servers else 0, stream_storage_server_count=server_count,
        stream_storage_http_ports=take(server_count), bookie_extra=bookie_extra, security=security)


def ca_file(security: StandaloneSecurity) -> str:
    """The CA file clients trust (`--tls-ca`)."""
    return security.path("ca.pem")


def listening_ports(pid: int) -> set[tuple[str, int]]:
    """("tcp", port) for each TCP port process `pid` or a descendant listens on, ("udp", port)
    for each UDP port they have bound: their sockets' inodes (/proc/PID/fd) found in the tables
    of /proc/PID/net (Linux)."""
    inodes = set()
    for process in _process_tree(pid):
        fd_dir = f"/proc/{process}/fd"
        for fd in os.listdir(fd_dir):
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:             # (closed meanwhile)
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
    ports = set()
    for table in ("tcp", "tcp6", "udp", "udp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as file:
                rows = [line.split() for line in file.read().splitlines()[1:]]
        except FileNotFoundError:       # (no IPv6)
            continue
        protocol = table[:3]
        for row in rows:              # sl local_address rem_address st ... inode (the tenth)
            if row[9] in inodes and (protocol == "udp" or row[3] == "0A"):          # 0A: LISTEN
                ports.add((protocol, int(row[1].rsplit(":", 1)[1], 16)))
    return ports


def _process_tree(pid: int) -> list[int]:
    """`pid` and its descendants."""
    pids, index = [pid], 0
    while index < len(pids):
        task_dir = f"/proc/{pids[index]}/task"
        for task in os.listdir(task_dir):
            try:
                with open(os.path.join(task_dir, task, "children")) as file:
                    pids += [int(child) for child in file.read().split()]
            except OSError:             # (a thread that ended; a kernel without the children file)
                continue
        index += 1
    return pids
