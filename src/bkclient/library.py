"""The async embedded library: `async with connect(uri) as bk:` and ledger handles.

    async with connect("raft://127.0.0.1:2281") as bk:
        ledger = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"pw")
        entry_id = await ledger.add(b"hello")           # one at a time
        ids = await ledger.add_many([b"a", b"b", b"c"])   # pipelined, acknowledged in order
        await ledger.close()
        reader = await bk.open_ledger(ledger.ledger_id, password=b"pw")
        assert await reader.read(0, 0) == [b"hello"]
        async for entry_id, payload in reader.tail():   # follows an open ledger as it grows
            ...

Errors are the typed exceptions of bkcore.errors (LedgerFenced, NoSuchLedger, NotEnoughBookies,
Unauthorized, ...). The handles are bkcore.client.handles', the same the simulator's processes
use; here they run the bkcore Client through bktransports.client_driver.
"""

from __future__ import annotations

import contextlib
import ssl
from typing import AsyncIterator

from bkcore.client.config import ClientConfig
from bkcore.client.handles import DIGESTS, BookKeeperClient, ReadHandle, WriteHandle
from bkmetastore.api import MetadataStore
from bktransports.client_driver import ClientDriver
from bktransports.client_session import open_client
from bktransports.metadata_walk import ledger_ids_in_metadata

__all__ = ["BookKeeper", "ReadHandle", "WriteHandle", "DIGESTS", "connect"]


class BookKeeper(BookKeeperClient):
    """A connected client: ledgers and streams (bkcore.client.handles), tables, bookies, the
    metastore it uses."""

    def __init__(self, driver: ClientDriver, store: MetadataStore) -> None:
        assert driver.store is store
        super().__init__(driver)

    @property
    def stalls(self):
        """What held this process's trio loop up, and its garbage collections: the longest of
        each since a time, and the events (bktransports.stall_recorder.StallRecorder)."""
        return self._driver.stalls

    async def open_table(self, name: str):
        """The table (or PTable) of stream NAME or NAMESPACE/NAME, served by stream storage
        (bkclient.table_client.AsyncTable)."""
        from bkclient.table_client import open_table
        return await open_table(self, name)

    async def list_ledgers(self) -> list[int]:
        return await ledger_ids_in_metadata(self.store, self.layout)

    async def bookie_info(self, bookie_id: str) -> dict:
        """A bookie's disk space, state and ledger count, asked over its own connection."""
        info = await self._driver.bookie_info(bookie_id)
        return {"bookie": bookie_id, "free_disk_space": info.free_disk_space,
                "total_disk_space": info.total_disk_space, "readonly": info.is_readonly,
                "ledgers": info.ledger_count}


@contextlib.asynccontextmanager
async def connect(uri: str, *, config: ClientConfig = ClientConfig(), session_timeout_s: float = 10.0,
                  tls: ssl.SSLContext | None = None, auth_secret: bytes = b"",
                  renew_session: bool = True) -> AsyncIterator[BookKeeper]:
    """Connect to the cluster whose metastore `uri` names (memory://, raft://, zk://). With
    `tls` bookie connections use TLS (the context verifies the bookies' certificates); with
    `auth_secret` each bookie connection first proves the cluster's shared secret. A metastore
    session that expires is replaced by a new one, as BookKeeper's client does (renew_session=
    False for a process that owns something through its session's ephemeral nodes: it must
    learn that the session ended)."""
    async with open_client(uri, config=config, session_timeout_s=session_timeout_s, tls=tls,
                           auth_secret=auth_secret, renew_session=renew_session) as driver:
        yield BookKeeper(driver, driver.store)
