"""An asyncio loop in a thread of its own, driven from trio: where the grpc.aio server lives.

    loop_thread = AsyncioThread("grpc")
    await loop_thread.start()
    port = await loop_thread.run(start_server)      # a coroutine function, run in that loop
    ...
    await loop_thread.stop()                         # stops the loop and joins the thread

grpc.aio answers a call with far less CPU than grpc.server's thread pool (no thread per call
to wake, no lock handoff; see bkbench.table_ceiling), but it needs an asyncio loop, and the
table service lives in trio. The two loops share the process in two threads and exchange
calls through streamstorage.grpc_bridge.
"""

from __future__ import annotations

import asyncio
import threading

import trio


class AsyncioThread:
    def __init__(self, name: str) -> None:
        self._name = name
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    async def start(self) -> None:
        self.loop = asyncio.new_event_loop()
        running = threading.Event()
        self.loop.call_soon(running.set)
        self._thread = threading.Thread(target=self.loop.run_forever, name=self._name, daemon=True)
        self._thread.start()
        await trio.to_thread.run_sync(running.wait)

    async def run(self, afn, *args):
        """afn(*args) run to its end in the asyncio loop; its result or exception."""
        future = asyncio.run_coroutine_threadsafe(afn(*args), self.loop)
        return await trio.to_thread.run_sync(future.result)

    async def stop(self) -> None:
        """Stop the loop (what still runs in it is dropped) and wait for the thread to end."""
        if self._thread is None:
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        await trio.to_thread.run_sync(self._thread.join)
        self.loop.close()
        self._thread = None
