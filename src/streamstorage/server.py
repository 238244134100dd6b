"""run_stream_storage: a stream storage server, as `bk stream-storage` and bookies with
streamStorageEnabled run it: its own client of the cluster, the gRPC endpoint, and the port
where it takes table calls from the other servers (streamstorage.peer_calls), announced in its
registration node.

A metastore session that expires is gone for good, and with it this server's claims on its
ranges (another server may own them now). So once the session is lost the server starts over:
the endpoint closes (what it served is left to the ranges' next owners), and a new client, with
a new session, serves on the same port, as a bookie registers again after losing its session.

Its metrics (streamstorage.metrics) go to the registry it is given: its own process's (`bk
stream-storage`), or the bookie's it runs in.
"""

from __future__ import annotations

import logging

import trio

from bkcore.client.handles import BookKeeperClient
from streamstorage.grpc_gateway import GrpcGateway
from streamstorage.metrics import StreamStorageMetrics
from bktransports.metrics import publish
from bktransports.client_session import open_client

log = logging.getLogger("bk.stream-storage")
SESSION_CHECK_INTERVAL_S = 0.5


async def run_stream_storage(uri: str, *, host: str, port: int, index_dir: str | None,
                             shared_port: int | None = None, peer_port: int = 0, tls=None, auth_secret: bytes = b"",
                             serve_tls=None, serve_auth_secret: bytes = b"", registry=None,
                             task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve until cancelled; `task_status.started(gateway)` once it first listens (the
    gateway knows the port it got, which later sessions keep). peer_port: where other servers
    send table calls (0: a free port, kept by later sessions). tls, auth_secret: what its client
    shows the bookies of a secured cluster (bkclient.connect's). serve_tls: serve gRPC over TLS
    with this context (bktransports.grpc_trio.server_tls_context); serve_auth_secret: answer only
    gRPC clients that prove it. The other servers must show that secret too, and with serve_tls
    they are reached over TLS, verified with the CAs of `tls` (the system's without it).
    registry: the prometheus_client registry its metrics are published in (None: not
    published)."""
    metrics = StreamStorageMetrics()
    if registry is not None:
        publish(registry, metrics.families)
    is_first = True
    while True:
        async with open_client(uri, tls=tls, auth_secret=auth_secret) as driver:
            bk = BookKeeperClient(driver)
            async with trio.open_nursery() as nursery:
                gateway = await nursery.start(GrpcGateway(bk, host=host, port=port, index_dir=index_dir,
                                                          shared_port=shared_port, peer_port=peer_port,
                                                          tls=serve_tls, auth_secret=serve_auth_secret,
                                                          call_stats=metrics.calls, peer_tls=tls).run)
                metrics.gateway = gateway
                port, peer_port = gateway.port, gateway.peer_port
                if is_first:
                    is_first = False
                    task_status.started(gateway)
                while not driver.store.session_lost:
                    await trio.sleep(SESSION_CHECK_INTERVAL_S)
                log.warning("stream storage on %s:%d lost its metastore session; serving again with a new one",
                            host, port)
                gateway.tables.stop_all(ConnectionError("this server's metastore session ended; its ranges "
                                                        "may be served elsewhere now"))
                nursery.cancel_scope.cancel()
