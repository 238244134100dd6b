"""WorkerThread: calls run in one thread, in order; results and exceptions come back; a
cancelled caller waits for its call to finish (and is cancelled at its next checkpoint).
Submitted items are handled in batches of what queued up meanwhile, in order with the calls,
and reported back to the trio thread."""

import threading
import time

import pytest
import trio

from bktransports.worker_thread import WorkerThread


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


class _Batches:
    """handle_batch and on_batch_done for a WorkerThread, recording what each saw."""

    def __init__(self, *, hold: threading.Event | None = None, fail_on: object = None) -> None:
        self.handled: list[list] = []
        self.done: list[tuple[list, BaseException | None]] = []
        self.reported = trio.Event()
        self.entered = threading.Event()       # handle() has begun a batch
        self._hold, self._fail_on = hold, fail_on

    def handle(self, items: list) -> None:
        self.entered.set()
        if self._hold is not None:
            self._hold.wait(5)
        self.handled.append(list(items))
        if self._fail_on in items:
            raise OSError(f"cannot write {self._fail_on}")

    def on_done(self, items: list, started: float, error: BaseException | None) -> None:
        assert threading.current_thread() is threading.main_thread()     # the trio thread
        self.done.append((items, error))
        self.reported.set()


async def _until_reported(batches: _Batches, worker: WorkerThread) -> None:
    with trio.fail_after(5):
        while worker.outstanding:
            batches.reported = trio.Event()
            await batches.reported.wait()


async def test_items_queued_behind_a_busy_thread_are_handled_as_one_batch_in_order():
    release = threading.Event()
    batches = _Batches(hold=release)
    worker = WorkerThread("test-worker-batch", handle_batch=batches.handle, on_batch_done=batches.on_done)
    try:
        worker.submit("a")                   # the thread takes it and waits in handle()
        await trio.to_thread.run_sync(batches.entered.wait, 5)
        for item in "bcd":
            worker.submit(item)              # these queue up meanwhile
        assert worker.outstanding == 4
        release.set()
        await _until_reported(batches, worker)
    finally:
        worker.close()
    assert batches.handled == [["a"], ["b", "c", "d"]]
    assert [items for items, _ in batches.done] == [["a"], ["b", "c", "d"]]
    assert worker.batch_count == 2 and worker.outstanding == 0


async def test_a_call_keeps_its_place_between_items():
    release = threading.Event()
    order = []
    batches = _Batches(hold=release)
    worker = WorkerThread("test-worker-order", handle_batch=lambda items: (batches.handle(items), order.extend(items)),
                          on_batch_done=batches.on_done)
    try:
        worker.submit(1)
        await trio.to_thread.run_sync(batches.entered.wait, 5)
        worker.submit(2)

        async def call_between() -> None:
            await worker.run(order.append, "call")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call_between)
            await trio.sleep(0.05)           # the call is queued behind 2
            worker.submit(3)
            worker.submit(4)
            release.set()
        await _until_reported(batches, worker)
    finally:
        worker.close()
    assert order == [1, 2, "call", 3, 4]
    assert batches.handled == [[1], [2], [3, 4]]


async def test_a_failed_batch_reports_its_error_and_the_thread_goes_on():
    batches = _Batches(fail_on="bad")
    worker = WorkerThread("test-worker-fail", handle_batch=batches.handle, on_batch_done=batches.on_done)
    try:
        worker.submit("bad")
        await _until_reported(batches, worker)
        worker.submit("good")
        await _until_reported(batches, worker)
    finally:
        worker.close()
    (first, error), (second, no_error) = batches.done
    assert first == ["bad"] and isinstance(error, OSError) and "cannot write bad" in str(error)
    assert second == ["good"] and no_error is None
