"""`bk standalone`: a whole cluster on 127.0.0.1 — a 3-node raft-lite metastore and bookies,
each its own process, data kept under --data-dir across restarts. Ctrl-C stops it cleanly
(stream storage, then bookies, so final checkpoints still reach a live metastore). With
--stream-storage-port (4181 by default) it also serves streams and tables over gRPC.

With the default ports, every client command (`bk shell listbookies`, `bk shell simpletest`)
finds it without flags. Secured (--tls-dir D with ca.pem, cert.pem and key.pem, and/or
--auth-secret-file F), every process asks for TLS and the secret, and the client commands need
--metastore raft+tls://... --tls-ca D/ca.pem --auth-secret-file F (it prints them).
"""

from __future__ import annotations

import os
import signal
import sys
import time

from bkcli.logs import LEVEL_ENV, rotate_log
from bkcore.extras import MissingExtra, require_extra
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
                            help="first HTTP port (8000): bookie i's admin port (with /metrics) is it + i; the "
                                 "metastore nodes' and then the stream storage servers' /metrics ports follow; "
                                 "0 turns them off")
    standalone.add_argument("--stream-storage-port", type=int, default=4181,
                            help="stream storage (tables, gRPC) port (4181); 0 turns it off")
    standalone.add_argument("--stream-storage-servers", type=int, default=default_stream_storage_servers(),
                            help="stream storage servers sharing the tables and that port (one per two cores: "
                                 f"{default_stream_storage_servers()} here); ranges move to the others when one dies")
    standalone.add_argument("--tls-dir", metavar="DIR",
                            help="secure every process with TLS: DIR holds ca.pem, cert.pem (for 127.0.0.1, signed "
                                 "by ca.pem) and key.pem; the metastore URI becomes raft+tls://")
    standalone.add_argument("--auth-secret-file", metavar="FILE",
                            help="every process (metastore members, bookies, stream storage) asks every connection "
                                 "for the secret on this file's first line")
    standalone.set_defaults(run=cmd_standalone)


def default_stream_storage_servers() -> int:
    """One stream storage server per two cores (each is one Python process: one core's worth)."""
    return max(1, (os.cpu_count() or 2) // 2)


class _StopAsked(Exception):
    """SIGINT or SIGTERM arrived (raised from the signal handler, wherever the main thread is)."""


def _ask_stop(*_) -> None:
    raise _StopAsked()


def standalone_security(args):
    """The StandaloneSecurity --tls-dir and --auth-secret-file ask for (ValueError or
    CredentialsError saying what will not do)."""
    from bkcli.credentials import auth_secret
    from bklocal.standalone import StandaloneSecurity
    secret = auth_secret(args.auth_secret_file, {}) if args.auth_secret_file else b""
    return StandaloneSecurity(tls_dir=args.tls_dir, auth_secret_file=args.auth_secret_file, auth_secret=secret)


def cmd_standalone(args) -> int:
    from bkcli.credentials import CredentialsError
    from bklocal.standalone import StandaloneCluster

    try:
        security = standalone_security(args)
    except (ValueError, CredentialsError) as exc:
        print(f"bk standalone: {exc}", file=sys.stderr)
        return 2
    if args.log_level:
        os.environ[LEVEL_ENV] = args.log_level      # (the processes it starts log at it too)
    if args.stream_storage_port:
        try:
            require_extra("grpc", "stream storage")
        except MissingExtra as exc:
            print(f"bk standalone: starting without stream storage: {exc}", flush=True)
            args.stream_storage_port = 0
    servers = max(1, args.stream_storage_servers) if args.stream_storage_port else 0
    http_ports = [args.http_port + i for i in range(args.bookies + args.metastore_nodes + servers)] \
        if args.http_port else []
    cluster = StandaloneCluster(
        args.data_dir, bookie_ports=[args.bookie_port + i for i in range(args.bookies)],
        metastore_ports=[args.metastore_port + i for i in range(args.metastore_nodes)],
        http_ports=http_ports[:args.bookies], metastore_http_ports=http_ports[args.bookies:][:args.metastore_nodes],
        stream_storage_http_ports=http_ports[args.bookies + args.metastore_nodes:],
        bookie_extra={"autoRecoveryDaemonEnabled": True}, stream_storage_port=args.stream_storage_port,
        stream_storage_server_count=max(1, args.stream_storage_servers), security=security)
    print(f"bk standalone: starting {args.metastore_nodes} raft-lite node(s) and {args.bookies} bookies "
          f"under {cluster.data_dir}", flush=True)
    # From the start, not once ready: a stop asked for while the processes start is honoured
    # (the child being started is stopped by spawn_bk, the others below). SIGINT too,
    # explicitly: a shell starts a background job with SIGINT ignored, and then Python raises
    # no KeyboardInterrupt for it (a script's `kill -INT` would do nothing).
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, _ask_stop)
    status = 0
    try:
        try:
            cluster.start(log=lambda line: print(line, flush=True))
        except RuntimeError as exc:
            print(f"bk standalone: {exc}", file=sys.stderr)
            status = 1
        else:
            print(ready_text(cluster), flush=True)
            _wait_while_all_run(cluster)
    except (_StopAsked, KeyboardInterrupt):
        pass
    # Another signal must not cut the stop short and leave orphans: it takes a few seconds.
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, signal.SIG_IGN)
    print("bk standalone: stopping stream storage and bookies, then the metastore", flush=True)
    cluster.stop()
    return status


def ready_text(cluster) -> str:
    """What to try once the cluster runs (with the flags a secured one asks of clients)."""
    flags = cluster.security.client_flags()
    if not flags:
        return (f"\nready. metastore: {cluster.metastore_uri}\n"
                f"try: bk shell listbookies    bk shell simpletest    bk stream create --stream demo\n"
                f"     bk table incr -t demo -k counter -a 1    (Ctrl-C stops the cluster)")
    return (f"\nready. metastore: {cluster.metastore_uri} (secured: clients need{flags})\n"
            f"try: export BK_METASTORE={cluster.metastore_uri}\n"
            f"     bk shell listbookies{flags}\n"
            f"     bk shell simpletest{flags}\n"
            f"     bk stream create --stream demo{flags}    (Ctrl-C stops the cluster)")


def _wait_while_all_run(cluster) -> None:
    """Until a process of the cluster exits (then its log's end is shown); meanwhile their log
    files are kept under LOG_SIZE_MAX each (bkcli.logs.rotate_log)."""
    while True:
        for child in cluster.children:
            if not child.is_running():
                print(f"bk standalone: {child.name} exited ({child.process.returncode}); its log ends:\n"
                      f"{child.log_tail()}", file=sys.stderr)
                return
            rotate_log(child.log_path)
        time.sleep(0.5)
