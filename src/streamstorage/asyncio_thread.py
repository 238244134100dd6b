"""The asyncio loop of this process, in a thread of its own, driven from trio: where the
grpc.aio servers and channels live.

    loop_thread = await AsyncioThread.of_process()
    port = await loop_thread.run(start_server)      # a coroutine function, run in that loop

grpc.aio answers a call with far less CPU than grpc.server's thread pool (no thread per call
to wake, no lock handoff; see bkbench.table_ceiling), but it needs an asyncio loop, and the
table service lives in trio. The two loops share the process in two threads and exchange
calls through streamstorage.grpc_bridge.

One loop per process, started on first use and never stopped (its thread is a daemon): grpc.aio
binds its completion queue poller to the loop of the first aio object made, until every aio
object is gone, which only the garbage collector knows. A server started on a second loop while
objects of the first remain (a server serving again after losing its session, tests that start
several) would never see a call.
"""

from __future__ import annotations

import asyncio
import threading

import trio


class AsyncioThread:
    _of_process: AsyncioThread | None = None
    _of_process_lock = threading.Lock()

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._running = threading.Event()
        self.loop.call_soon(self._running.set)
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    @classmethod
    async def of_process(cls) -> AsyncioThread:
        """This process's asyncio thread, running."""
        with cls._of_process_lock:
            if cls._of_process is None:
                cls._of_process = cls("asyncio (grpc.aio)")
            loop_thread = cls._of_process
        await trio.to_thread.run_sync(loop_thread._running.wait)
        return loop_thread

    async def run(self, afn, *args):
        """afn(*args) run to its end in the asyncio loop; its result or exception."""
        future = asyncio.run_coroutine_threadsafe(afn(*args), self.loop)
        return await trio.to_thread.run_sync(future.result)
