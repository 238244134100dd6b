"""Tables for trio code: `await bk.open_table("ns/name")` on a connected client.

    table = await bk.open_table("default/counters")
    await table.increment(b"visits", 1)
    kv = await table.get(b"visits")                 # kv.number == 1
    ptable = await bk.open_table("default/users")
    await ptable.put(b"name", b"ada", pkey=b"user-17")
    rows = await ptable.range(b"", pkey=b"user-17")  # every lkey of the pkey
    async for event in table.watch(b"visits"):      # dicts, in revision order
        ...

A thick client: each call goes straight to the server that owns the key's range (found in the
metastore, as the servers announce themselves there), or to the range's preferred live server
when it has no owner yet, which then claims it (bkcore.table.routing, which the simulator's
clients use too). A server that does not own the range answers NotOwner naming the owner
(bkcore.table.watch_rpc.OWNER_ONLY_HEADER) instead of forwarding the call, so when a range moves
the client learns where to and sends there from then on. Calls run on gRPC's blocking stubs in
worker threads. Keys without a pkey use the key as pkey (BookKeeper's Table); with one they are
PTable lkeys.
"""

from __future__ import annotations

import contextlib
import threading
from typing import AsyncIterator

import trio

from bkcore.stream.errors import StreamNotFound
from bkcore.table.routing import Routes
from bkcore.table.service import range_of
from bkclient.storage_client import StorageClient, TableClient

WATCH_BUFFER_EVENTS = 1000


class AsyncTable:
    def __init__(self, bk, namespace: str, stream: str, table_ranges: int) -> None:
        self._bk = bk
        self.namespace, self.stream = namespace, stream
        self._table_ranges = table_ranges
        self._clients: dict[str, StorageClient] = {}
        self._routes = Routes(bk.store, bk.layout.root)

    def _index(self, pkey: bytes) -> tuple[str, str, int]:
        return self.namespace, self.stream, range_of(pkey, self._table_ranges)

    def _table_at(self, address: str) -> TableClient:
        client = self._clients.get(address)
        if client is None:
            client = self._clients[address] = StorageClient(address)
        return client.table(self.namespace, self.stream, owner_only=True)

    async def _table_for(self, pkey: bytes) -> TableClient:
        return self._table_at(await self._routes.server_for(self._index(pkey)))

    async def _call(self, method: str, key: bytes, *args, pkey: bytes | None = None, **kwargs):
        async def send(address: str):
            table = self._table_at(address)
            return await trio.to_thread.run_sync(lambda: getattr(table, method)(key, *args, pkey=pkey, **kwargs))
        return await self._routes.call(self._index(pkey or key), send)

    async def put(self, key: bytes, value: bytes, *, pkey: bytes | None = None):
        """Set the value; returns the previous KeyValue (or None)."""
        return await self._call("put", key, value, pkey=pkey)

    async def get(self, key: bytes, *, pkey: bytes | None = None):
        return await self._call("get", key, pkey=pkey)

    async def increment(self, key: bytes, amount: int, *, pkey: bytes | None = None) -> int:
        return await self._call("increment", key, amount, pkey=pkey)

    async def delete(self, key: bytes, *, pkey: bytes | None = None) -> int:
        return await self._call("delete", key, pkey=pkey)

    async def range(self, start: bytes, end: bytes = b"", *, pkey: bytes, limit: int = 0) -> list:
        """KeyValues of `pkey` from `start` up to and including `end` (b"": to the end of the
        pkey); versions count from 0, as BookKeeper's do."""
        return await self._call("range", start, end, pkey=pkey, limit=limit)

    async def watch(self, key: bytes, *, pkey: bytes | None = None, start_revision: int = 0) -> AsyncIterator[dict]:
        """Changes of the key as they happen (from `start_revision` if given)."""
        table = await self._table_for(pkey or key)
        send, receive = trio.open_memory_channel(WATCH_BUFFER_EVENTS)
        token = trio.lowlevel.current_trio_token()
        events = table.watch(key, pkey=pkey, start_revision=start_revision)

        def pump() -> None:
            # A plain thread, not a task: an async generator must not hold a nursery open
            # across its yields (its consumer may stop iterating at any point).
            try:
                for event in events:
                    trio.from_thread.run(send.send, event, trio_token=token)
                trio.from_thread.run_sync(send.close, trio_token=token)
            except trio.RunFinishedError:
                pass
            except Exception as exc:     # noqa: BLE001 - handed to the reader below
                with contextlib.suppress(trio.RunFinishedError, trio.BrokenResourceError, trio.ClosedResourceError):
                    trio.from_thread.run(send.send, exc, trio_token=token)

        threading.Thread(target=pump, name=f"watch {key!r:.40}", daemon=True).start()
        try:
            async for item in receive:
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            events.cancel()
            receive.close()

    def close(self) -> None:
        for client in self._clients.values():
            client.close()


async def open_table(bk, name: str) -> AsyncTable:
    """The table of stream NAME or NAMESPACE/NAME (the stream must exist)."""
    namespace, _, stream = name.rpartition("/")
    namespace = namespace or "default"
    try:
        settings = (await bk.streams.catalog.get_stream(namespace, stream)).settings
    except StreamNotFound:
        raise StreamNotFound(f"no stream {namespace}/{stream}: create it first (bk stream create)") from None
    return AsyncTable(bk, namespace, stream, settings.table_ranges)
