"""run_stream_storage: a stream storage server, as `bk stream-storage` and bookies with
streamStorageEnabled run it: its own client of the cluster, and the gRPC endpoint."""

from __future__ import annotations

import trio

from bkcore.client.handles import BookKeeperClient
from streamstorage.grpc_gateway import GrpcGateway
from transports.client_session import open_client


async def run_stream_storage(uri: str, *, host: str, port: int, index_dir: str | None,
                             task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve until cancelled; `task_status.started(gateway)` once it listens (the gateway
    knows the port it got)."""
    async with open_client(uri) as driver:
        bk = BookKeeperClient(driver)
        async with trio.open_nursery() as nursery:
            gateway = await nursery.start(GrpcGateway(bk, host=host, port=port, index_dir=index_dir).run)
            task_status.started(gateway)
