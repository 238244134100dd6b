"""bkbench.grpc_bridge (the handoffs the table ceiling measures): calls from plain threads and
from an asyncio loop in another thread run in the trio loop; results and errors come back."""

import threading

import pytest
import trio

from bkbench.grpc_bridge import TrioBridge


def _in_threads(count: int, work) -> list:
    results: list = [None] * count

    def run(index: int) -> None:
        try:
            results[index] = work(index)
        except BaseException as exc:     # noqa: BLE001 - the test looks at it
            results[index] = exc
    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    return results


def test_calls_from_many_threads_run_in_the_loop_and_return_or_raise():
    loop_thread: list = []

    async def double(n: int) -> int:
        loop_thread.append(threading.get_ident())
        await trio.sleep(0.001)          # calls overlap: each runs as its own task
        if n == 3:
            raise ValueError("three")
        return 2 * n

    async def main():
        bridge = TrioBridge(trio.lowlevel.current_trio_token())
        results = await trio.to_thread.run_sync(
            lambda: _in_threads(16, lambda i: bridge.run(double, i) + bridge.run_sync(lambda: i)))
        assert set(loop_thread) == {threading.get_ident()}
        return results

    results = trio.run(main)
    assert [r for i, r in enumerate(results) if i != 3] == [3 * i for i in range(16) if i != 3]
    assert isinstance(results[3], ValueError)


def test_a_call_after_the_loop_ended_raises_run_finished():
    async def token():
        return trio.lowlevel.current_trio_token()
    bridge = TrioBridge(trio.run(token))

    async def never():
        raise AssertionError("not run")
    with pytest.raises(trio.RunFinishedError):
        bridge.run(never)
    with pytest.raises(trio.RunFinishedError):      # and the next one too (no drain left scheduled)
        bridge.run(never)


def test_coroutines_of_an_asyncio_loop_in_another_thread_run_in_trio_and_get_their_answers():
    """AsyncioBridge: many coroutines of an asyncio loop (in a thread of its own, as the
    grpc.aio server's) each run a function in the trio loop and get its result or exception;
    a call whose asyncio side was cancelled meanwhile is dropped quietly."""
    import asyncio

    from bkbench.grpc_bridge import AsyncioBridge
    ran_in: list = []

    async def double(n: int) -> int:
        ran_in.append(threading.get_ident())
        await trio.sleep(0.001)
        if n == 3:
            raise ValueError("three")
        return 2 * n

    async def main():
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, daemon=True).start()
        bridge = AsyncioBridge(TrioBridge(trio.lowlevel.current_trio_token()), loop)

        async def in_asyncio():
            cancelled = asyncio.ensure_future(bridge.call(trio.sleep, 0.05))
            await asyncio.sleep(0)
            cancelled.cancel()
            results = await asyncio.gather(*(bridge.call(double, i) for i in range(32)), return_exceptions=True)
            return results, threading.get_ident()
        future = asyncio.run_coroutine_threadsafe(in_asyncio(), loop)
        results, asyncio_thread = await trio.to_thread.run_sync(future.result)
        loop.call_soon_threadsafe(loop.stop)
        await trio.sleep(0.1)                # the cancelled call's answer arrives and is dropped
        assert set(ran_in) == {threading.get_ident()} and asyncio_thread != threading.get_ident()
        return results

    results = trio.run(main)
    assert [r for i, r in enumerate(results) if i != 3] == [2 * i for i in range(32) if i != 3]
    assert isinstance(results[3], ValueError)
