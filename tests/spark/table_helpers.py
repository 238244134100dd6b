"""Writing tables for the Spark tests through the library's table service (bkcore.table.service,
no gRPC server), as an application embedding it would: a short-lived owner that writes and
closes its ranges, or a live owner that keeps them open (journals in progress) while Spark reads."""

from __future__ import annotations

import threading

import trio

from bkcore.table.service import Tables


class LiveTables:
    """A Tables service running on the test client's trio thread until close(): every call
    blocks until done. Its ranges stay open, so their journals' last segments are in progress."""

    def __init__(self, bk, *, checkpoint_every: int | None = None) -> None:
        self._bk = bk
        self._ready = threading.Event()
        self._thread = threading.Thread(target=bk.run, args=(self._serve, checkpoint_every), daemon=True,
                                        name="live-tables")
        self._thread.start()
        assert self._ready.wait(30), "the table service did not start"

    async def _serve(self, client, checkpoint_every) -> None:
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            self.tables = Tables(client, nursery, checkpoint_every=checkpoint_every)
            self._ready.set()
            await self._stop.wait()
            await self.tables.close()
            nursery.cancel_scope.cancel()

    def call(self, method: str, table: str, *args, **kwargs):
        """tables.<method>(namespace, name, *args, **kwargs), e.g. call("put", t, pkey, lkey, value)."""
        namespace, name = table.split("/")

        async def run(_client):
            return await getattr(self.tables, method)(namespace, name, *args, **kwargs)
        return self._bk.run(run)

    def put(self, table: str, key: bytes, value: bytes, *, pkey: bytes | None = None, **kwargs):
        return self.call("put", table, pkey or key, key, value, **kwargs)

    def delete(self, table: str, key: bytes, *, pkey: bytes | None = None):
        return self.call("delete", table, pkey or key, key)

    def increment(self, table: str, key: bytes, amount: int):
        return self.call("increment", table, key, key, amount)

    def increment_concurrently(self, table: str, key: bytes, count: int) -> None:
        """`count` increments by 1 all at once, so that the journal batches them into entries."""
        namespace, name = table.split("/")

        async def run(_client):
            async with trio.open_nursery() as nursery:
                for _ in range(count):
                    nursery.start_soon(self.tables.increment, namespace, name, key, key, 1)
        self._bk.run(run)

    def close(self) -> None:
        """Close every range (sealing its journal) and stop the service."""
        async def stop(_client):
            self._stop.set()
        self._bk.run(stop)
        self._thread.join(60)

    def __enter__(self) -> LiveTables:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
