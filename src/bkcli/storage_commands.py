"""`bk stream-storage`: the stream storage server (streams and tables over gRPC, port 4181).

    bk stream-storage [--metastore URI] [--port 4181] [--shared-port P] [--data-dir D] [--http-port P]

With --http-port (BookKeeper's httpServerPort) it serves its Prometheus metrics at
http://HOST:P/metrics (docs/metrics.md).

Its clients are `bk namespace` and `bk stream` (bkcli.catalog_commands) and `bk table`
(bkcli.table_commands); what they share, `-s HOST:PORT` included, is bkcli.storage_cli.
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile

from bkcore.extras import require_extra
from bkcli.credentials import (
    CredentialsError, add_security_arguments, auth_secret, client_credentials, server_tls_context,
)
from bkcli.defaults import add_metastore_argument, metastore_uri


def add_parser(commands) -> None:
    server = commands.add_parser("stream-storage", help="serve streams and tables over gRPC (port 4181)")
    add_metastore_argument(server)
    server.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    server.add_argument("--port", type=int, default=4181,
                        help="this server's own gRPC port (4181); it names the server among the others")
    server.add_argument("--shared-port", type=int, default=None,
                        help="a port every stream storage server of the cluster also listens on (SO_REUSEPORT), "
                             "so clients given one address are spread over the servers")
    server.add_argument("--peer-port", type=int, default=0,
                        help="where the other stream storage servers send this one the table calls for the "
                             "ranges it owns (default: a free port, announced in the metastore)")
    add_security_arguments(server)
    server.add_argument("--grpc-tls-cert", metavar="PEM", help="serve gRPC over TLS with this certificate chain")
    server.add_argument("--grpc-tls-key", metavar="PEM", help="the private key of --grpc-tls-cert")
    server.add_argument("--grpc-auth-secret-file", metavar="FILE",
                        help="answer only gRPC clients that prove the secret in this file (the stock client cannot); "
                             "the other servers' table calls must prove it too")
    server.add_argument("--data-dir", default=None,
                        help="where the table indexes (lmdb) live; rebuilt from the range journals when "
                             "a range is opened (default: bk-stream-storage-PORT in the temp directory)")
    server.add_argument("--http-port", type=int, default=0,
                        help="serve Prometheus metrics at /metrics on this port, on --host (0: off)")
    server.set_defaults(run=cmd_stream_storage)


def cmd_stream_storage(args) -> int:
    require_extra("grpc", "serving streams and tables over gRPC")
    try:
        args.credentials = client_credentials(args)
        args.credentials["serve_tls"] = server_tls_context(args.grpc_tls_cert, args.grpc_tls_key)
        args.credentials["serve_auth_secret"] = auth_secret(args.grpc_auth_secret_file, {})
    except CredentialsError as exc:
        print(f"bk stream-storage: {exc}", file=sys.stderr)
        return 2
    from bkcli.signals import run_service
    return run_service("stream-storage", _serve, args)


async def _serve(args) -> int:
    import trio

    from bkcli.signals import cancel_on_stop_signal
    from streamstorage.server import run_stream_storage
    from bktransports.gc_tuning import tune_gc
    from bktransports.metrics import new_registry, start_metrics_port

    data_dir = args.data_dir or os.path.join(tempfile.gettempdir(), f"bk-stream-storage-{args.port}")
    registry = new_registry()
    async with trio.open_nursery() as nursery:
        metrics = await start_metrics_port(nursery, registry, host=args.host, port=args.http_port)
        gateway = await nursery.start(functools.partial(
            run_stream_storage, metastore_uri(args), host=args.host, port=args.port,
            index_dir=os.path.join(data_dir, "table-indexes"), shared_port=args.shared_port,
            peer_port=args.peer_port, registry=registry, **args.credentials))
        tune_gc()      # what startup made leaves the collector's sight, as in a bookie
        shared = f" (and the shared port {gateway.shared_port})" if gateway.shared_port else ""
        print(f"stream storage listening on {gateway.host}:{gateway.port}{shared}"
              + (f"; metrics: {metrics}" if metrics else ""), flush=True)
        await cancel_on_stop_signal(nursery)
    return 0
