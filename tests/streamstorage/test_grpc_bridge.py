"""TrioBridge: calls from plain threads run in the trio loop, results and errors come back."""

import threading

import pytest
import trio

from streamstorage.grpc_bridge import TrioBridge


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

    from streamstorage.asyncio_thread import AsyncioThread
    from streamstorage.grpc_bridge import AsyncioBridge
    ran_in: list = []

    async def double(n: int) -> int:
        ran_in.append(threading.get_ident())
        await trio.sleep(0.001)
        if n == 3:
            raise ValueError("three")
        return 2 * n

    async def main():
        loop_thread = await AsyncioThread.of_process()
        bridge = AsyncioBridge(TrioBridge(trio.lowlevel.current_trio_token()), loop_thread.loop)

        async def in_asyncio():
            cancelled = asyncio.ensure_future(bridge.call(trio.sleep, 0.05))
            await asyncio.sleep(0)
            cancelled.cancel()
            results = await asyncio.gather(*(bridge.call(double, i) for i in range(32)), return_exceptions=True)
            return results, threading.get_ident()
        results, asyncio_thread = await loop_thread.run(in_asyncio)
        await trio.sleep(0.1)                # the cancelled call's answer arrives and is dropped
        assert set(ran_in) == {threading.get_ident()} and asyncio_thread != threading.get_ident()
        return results

    results = trio.run(main)
    assert [r for i, r in enumerate(results) if i != 3] == [2 * i for i in range(32) if i != 3]
    assert isinstance(results[3], ValueError)


def test_a_call_taken_at_once_is_answered_by_callback_and_the_rest_run_as_tasks():
    """AsyncioBridge.call_fast: try_now takes a call (it answers later, through the callback,
    with a result or an error), raises (the call's error), or leaves it to the task."""
    from streamstorage.asyncio_thread import AsyncioThread
    from streamstorage.grpc_bridge import AsyncioBridge
    taken: dict[int, object] = {}
    ran_as_task: list[int] = []

    def try_now(n: int, on_done) -> bool:
        if n == 5:
            raise KeyError("five")
        if n % 2:
            return False
        taken[n] = on_done
        return True

    async def as_task(n: int) -> int:
        ran_as_task.append(n)
        await trio.sleep(0)
        return -n

    async def main():
        loop_thread = await AsyncioThread.of_process()
        bridge = AsyncioBridge(TrioBridge(trio.lowlevel.current_trio_token()), loop_thread.loop)

        async def in_asyncio():
            import asyncio
            return await asyncio.gather(*(bridge.call_fast(try_now, as_task, n) for n in range(10)),
                                        return_exceptions=True)

        async with trio.open_nursery() as nursery:
            async def answer_the_taken():
                while len(taken) < 5:
                    await trio.sleep(0.001)
                for n, on_done in taken.items():
                    on_done(None, ValueError("four")) if n == 4 else on_done(n * 10, None)
            nursery.start_soon(answer_the_taken)
            return await loop_thread.run(in_asyncio)

    results = trio.run(main)
    assert results[0:4] == [0, -1, 20, -3] and results[6:] == [60, -7, 80, -9]
    assert isinstance(results[4], ValueError) and isinstance(results[5], KeyError)
    assert sorted(ran_as_task) == [1, 3, 7, 9]


def test_the_answers_of_one_round_of_the_trio_loop_wake_the_asyncio_loop_once():
    from streamstorage.asyncio_thread import AsyncioThread
    from streamstorage.grpc_bridge import AsyncioBridge
    taken: list = []

    def try_now(n: int, on_done) -> bool:
        taken.append((n, on_done))
        return True

    async def main():
        loop_thread = await AsyncioThread.of_process()
        bridge = AsyncioBridge(TrioBridge(trio.lowlevel.current_trio_token()), loop_thread.loop)

        async def in_asyncio():
            import asyncio
            return await asyncio.gather(*(bridge.call_fast(try_now, None, n) for n in range(16)))

        async with trio.open_nursery() as nursery:
            async def answer_all_at_once():
                while len(taken) < 16:
                    await trio.sleep(0.001)
                before = bridge.drain_count
                for n, on_done in taken:
                    on_done(n + 100, None)
                return before
            drains_before: list = []
            nursery.start_soon(lambda: _append(drains_before, answer_all_at_once()))
            results = await loop_thread.run(in_asyncio)
        return results, bridge.drain_count - drains_before[0]

    results, drains = trio.run(main)
    assert results == [n + 100 for n in range(16)]
    assert drains == 1


async def _append(to: list, awaitable) -> None:
    to.append(await awaitable)
