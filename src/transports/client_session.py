"""open_client: a running ClientDriver for a metastore URI, the connection to a cluster that a
library user (bkclient.connect), a stream storage server or a tool makes.

    async with open_client("raft://127.0.0.1:2281") as driver:
        bk = BookKeeperClient(driver)          # bkcore.client.handles: ledgers and streams

The metastore session is opened first and closed last (its ephemeral nodes vanish with it);
the driver's tasks run in a nursery of their own until the block has ended, its cleanup after
a cancellation from outside included (bktransports.service_nursery).
"""

from __future__ import annotations

import contextlib
import ssl
from typing import AsyncIterator

import trio

from bkcore.client.config import ClientConfig
from bkmetastore.layout_node import resolve_layout
from bkmetastore.renewing import RenewingStore
from bkmetastore.uri import open_metastore, parse_metastore_uri
from bktransports.client_driver import ClientDriver
from bktransports.service_nursery import open_service_nursery


@contextlib.asynccontextmanager
async def open_client(uri: str, *, config: ClientConfig = ClientConfig(), session_timeout_s: float = 10.0,
                      tls: ssl.SSLContext | None = None, auth_secret: bytes = b"",
                      renew_session: bool = False) -> AsyncIterator[ClientDriver]:
    """A driver of the cluster whose metastore `uri` names (memory://, raft://, zk://). With
    `tls` bookie connections use TLS (the context verifies the bookies' certificates), and so
    does a raft+tls:// metastore's; with `auth_secret` each bookie connection, and each
    connection to a raft-lite member, first proves the cluster's shared secret. With
    `renew_session` an expired metastore session is replaced by a new one (bkmetastore.renewing:
    for clients that own nothing through their session)."""
    parsed = parse_metastore_uri(uri)
    def open_store():
        return open_metastore(parsed, session_timeout_s=session_timeout_s, tls=tls, auth_secret=auth_secret)
    store = await open_store()
    if renew_session:
        store = RenewingStore(store, open_store)
    try:
        layout = await resolve_layout(store, parsed)
        driver = ClientDriver(store=store, layout=layout, config=config, tls=tls, auth_secret=auth_secret)
        try:
            # The driver serves the block until it has ended: code cancelled from outside may
            # still need it in its cleanup (a stream storage server seals its ranges' journals).
            async with open_service_nursery() as nursery:
                await nursery.start(driver.run)
                try:
                    yield driver
                finally:
                    driver.close()
        except BaseExceptionGroup as group:
            # The nursery only runs the driver; an error from the caller's block comes out
            # as itself, so `except LedgerFenced:` around `async with connect()` works.
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()
