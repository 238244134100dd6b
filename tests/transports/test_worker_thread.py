"""WorkerThread: calls run in one thread, in order; results and exceptions come back; a
cancelled caller waits for its call to finish (and is cancelled at its next checkpoint)."""

import threading
import time

import pytest
import trio

from transports.worker_thread import WorkerThread


async def test_calls_run_in_one_other_thread_in_order_and_return_their_results():
    worker = WorkerThread("test-worker")
    seen = []

    def call(n):
        seen.append((n, threading.current_thread().name))
        return n * 10

    try:
        results = [await worker.run(call, n) for n in range(5)]
    finally:
        worker.close()
    assert results == [0, 10, 20, 30, 40]
    assert seen == [(n, "test-worker") for n in range(5)]
    assert worker.call_count == 5


async def test_an_exception_in_the_call_is_raised_in_the_caller():
    worker = WorkerThread("test-worker")

    def fail():
        raise OSError("disk on fire")

    try:
        with pytest.raises(OSError, match="disk on fire"):
            await worker.run(fail)
        assert await worker.run(lambda: "still working") == "still working"
    finally:
        worker.close()


async def test_a_cancelled_caller_waits_for_its_call():
    worker = WorkerThread("test-worker")
    finished = []

    def slow():
        time.sleep(0.05)
        finished.append(True)

    try:
        with trio.move_on_after(0.01) as scope:
            await worker.run(slow)
            assert finished == [True]               # the call was not abandoned
            await trio.sleep(1)                     # the cancellation comes at the next checkpoint
        assert scope.cancelled_caught
        with trio.CancelScope() as cancelled:
            cancelled.cancel()
            await worker.run(finished.append, "never")   # already cancelled: never starts
        assert finished == [True]
    finally:
        worker.close()


def test_close_ends_the_thread():
    worker = WorkerThread("test-worker-close")

    async def main():
        await worker.run(lambda: None)

    trio.run(main)
    worker.close()
    deadline = time.monotonic() + 5
    while any(t.name == "test-worker-close" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(t.name == "test-worker-close" for t in threading.enumerate())
