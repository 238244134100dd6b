"""The runtime contract: the same async scenarios give the same outcomes on trio
(bktransports.trio_runtime) and on the simulator's SimRuntime (bksim.tasks), so code written
against bkcore.runtime behaves alike in both worlds. Then what only the simulator has:
seeded interleavings, pauses, and crashes that close a process's coroutines."""

import random

import pytest
import trio
import trio.testing

from bksim.loop import EventLoop
from bksim.tasks import ProcessStopped, SimRuntime
from bktransports.trio_runtime import TrioRuntime


class MockClockTrioRuntime(TrioRuntime):
    """trio's runtime with trio's (mock) clock as the monotonic one, so scenarios can time
    themselves without waiting."""
    monotonic_s = staticmethod(trio.current_time)


def run_on_trio(scenario):
    outcome = {}

    async def main():
        outcome["value"] = await scenario(MockClockTrioRuntime())
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return outcome["value"]


def run_on_sim(scenario, seed=1):
    loop = EventLoop()
    rt = SimRuntime(loop=loop, rng=random.Random(seed), name="p")
    outcome = {}

    async def main():
        outcome["value"] = await scenario(rt)
    rt.spawn_system_task(main)
    loop.run_until_idle(1_000_000)
    assert "value" in outcome, "the scenario did not finish"
    return outcome["value"]


RUNNERS = {"trio": run_on_trio, "sim": run_on_sim}


@pytest.fixture(params=sorted(RUNNERS))
def run(request):
    return RUNNERS[request.param]


async def children_run_and_nursery_waits(rt):
    done = []
    async with rt.open_nursery() as nursery:
        for index in range(3):
            async def child(index=index):
                await rt.sleep(0.01 * (3 - index))
                done.append(index)
            nursery.start_soon(child)
    return done


def test_a_nursery_waits_for_its_children(run):
    assert run(children_run_and_nursery_waits) == [2, 1, 0]


async def failing_child_cancels_siblings(rt):
    log = []

    async def sibling():
        try:
            await rt.sleep(10)
        except rt.Cancelled:
            log.append("sibling cancelled")
            raise

    async def failing():
        await rt.sleep(0.5)
        raise ValueError("boom")
    started = rt.monotonic_s()
    try:
        async with rt.open_nursery() as nursery:
            nursery.start_soon(sibling)
            nursery.start_soon(failing)
    except BaseExceptionGroup as group:
        log.append([type(e).__name__ for e in group.exceptions])
    log.append(round(rt.monotonic_s() - started, 3))
    return log


def test_a_failing_child_cancels_its_siblings_and_raises_a_group(run):
    assert run(failing_child_cancels_siblings) == ["sibling cancelled", ["ValueError"], 0.5]


async def deadlines(rt):
    log = []
    start = rt.monotonic_s()
    with rt.move_on_after(1.5) as scope:
        await rt.sleep(5)
        log.append("not reached")
    log.append((scope.cancelled_caught, round(rt.monotonic_s() - start, 3)))
    try:
        with rt.fail_after(0.25):
            await rt.sleep(5)
    except rt.TooSlowError:
        log.append("too slow")
    with rt.move_on_after(2) as scope:
        await rt.sleep(1)
    log.append(scope.cancelled_caught)
    return log


def test_deadlines_cancel_or_raise(run):
    assert run(deadlines) == [(True, 1.5), "too slow", False]


async def shielded_work_finishes(rt):
    log = []
    with rt.move_on_after(1):
        with rt.CancelScope(shield=True):
            await rt.sleep(3)
            log.append("shielded done")
        await rt.sleep(1)          # the outer deadline passed meanwhile: cancelled here
        log.append("not reached")
    log.append(round(rt.monotonic_s(), 3))
    return log


def test_a_shield_keeps_cancellation_out(run):
    log = run(shielded_work_finishes)
    assert log[0] == "shielded done" and log[1] >= 3 and len(log) == 2


async def cancel_from_another_task(rt):
    log = []
    async with rt.open_nursery() as nursery:
        scope = rt.CancelScope()

        async def worker():
            with scope:
                await rt.sleep_forever()
            log.append(("worker out", scope.cancelled_caught))

        async def canceller():
            await rt.sleep(2)
            scope.cancel()
        nursery.start_soon(worker)
        nursery.start_soon(canceller)
    return log


def test_a_scope_cancelled_by_another_task(run):
    assert run(cancel_from_another_task) == [("worker out", True)]


async def nursery_cancel_scope_ends_children(rt):
    async with rt.open_nursery() as nursery:
        nursery.start_soon(rt.sleep_forever)
        nursery.start_soon(rt.sleep_forever)
        await rt.sleep(1)
        nursery.cancel_scope.cancel()
    return (nursery.cancel_scope.cancelled_caught, rt.monotonic_s())


def test_cancelling_a_nursery_ends_it(run):
    caught, now = run(nursery_cancel_scope_ends_children)
    assert caught and now == pytest.approx(1, abs=0.01)


async def outer_cancel_passes_through_inner_nursery(rt):
    log = []
    with rt.move_on_after(1) as outer:
        async with rt.open_nursery() as nursery:
            nursery.start_soon(rt.sleep_forever)
            await rt.sleep_forever()
        log.append("not reached")
    log.append(outer.cancelled_caught)
    return log


def test_an_outer_cancellation_goes_through_a_nursery(run):
    assert run(outer_cancel_passes_through_inner_nursery) == [True]


async def body_error_is_grouped(rt):
    try:
        async with rt.open_nursery() as nursery:
            nursery.start_soon(rt.sleep_forever)
            raise KeyError("body")
    except BaseExceptionGroup as group:
        return [type(e).__name__ for e in group.exceptions]


def test_an_error_in_the_body_cancels_children_and_is_grouped(run):
    assert run(body_error_is_grouped) == ["KeyError"]


async def start_waits_for_started(rt):
    log = []

    async def service(name, *, task_status=rt.TASK_STATUS_IGNORED):
        await rt.sleep(1)
        task_status.started(f"{name} ready")
        await rt.sleep(1)
        log.append(f"{name} ended")

    async def broken(*, task_status=rt.TASK_STATUS_IGNORED):
        await rt.sleep(1)
        raise OSError("cannot start")
    async with rt.open_nursery() as nursery:
        log.append(await nursery.start(service, "a"))
        log.append(round(rt.monotonic_s(), 3))
        try:
            await nursery.start(broken)
        except OSError as exc:
            log.append(str(exc))
    return log


def test_start_returns_what_started_gives_and_raises_early_errors(run):
    assert run(start_waits_for_started) == ["a ready", 1.0, "a ended", "cannot start"] or \
        run(start_waits_for_started) == ["a ready", 1.0, "cannot start", "a ended"]


async def events_wake_waiters(rt):
    event = rt.Event()
    log = []

    async def waiter(name):
        await event.wait()
        log.append(name)
    async with rt.open_nursery() as nursery:
        nursery.start_soon(waiter, "x")
        nursery.start_soon(waiter, "y")
        await rt.sleep(1)
        assert not event.is_set()
        event.set()
    await event.wait()              # already set: returns at once
    return sorted(log), event.is_set()


def test_an_event_wakes_every_waiter(run):
    assert run(events_wake_waiters) == (["x", "y"], True)


async def channels_are_bounded(rt):
    send, receive = rt.open_memory_channel(2)
    log = []
    send.send_nowait(1)
    send.send_nowait(2)
    try:
        send.send_nowait(3)
    except rt.WouldBlock:
        log.append("full")

    async def producer():
        async with send:
            for value in range(3, 6):
                await send.send(value)
                log.append(("sent", value, round(rt.monotonic_s(), 3)))
    async with rt.open_nursery() as nursery:
        nursery.start_soon(producer)
        await rt.sleep(1)
        async with receive:
            async for value in receive:
                log.append(value)
    return log


def test_a_channel_holds_its_buffer_then_blocks_the_sender(run):
    log = run(channels_are_bounded)
    assert log[0] == "full"
    assert [x for x in log if isinstance(x, int)] == [1, 2, 3, 4, 5]
    assert ("sent", 3, 1.0) in log


async def closed_receiver_breaks_sender(rt):
    send, receive = rt.open_memory_channel(0)
    log = []

    async def producer():
        try:
            await send.send("x")
        except rt.BrokenResourceError:
            log.append("broken")
    async with rt.open_nursery() as nursery:
        nursery.start_soon(producer)
        await rt.sleep(1)
        await receive.aclose()
    return log


def test_closing_the_receiver_breaks_a_waiting_sender(run):
    assert run(closed_receiver_breaks_sender) == ["broken"]


async def locks_exclude(rt):
    lock = rt.Lock()
    inside = []
    log = []

    async def worker(name):
        async with lock:
            inside.append(name)
            assert len(inside) == 1
            await rt.sleep(1)
            inside.remove(name)
            log.append(name)
    async with rt.open_nursery() as nursery:
        for name in "abc":
            nursery.start_soon(worker, name)
    return sorted(log), round(rt.monotonic_s(), 3), lock.locked()


def test_a_lock_lets_one_task_in_at_a_time(run):
    assert run(locks_exclude) == (["a", "b", "c"], 3.0, False)


async def cancelled_receive(rt):
    send, receive = rt.open_memory_channel(1)
    with rt.move_on_after(1) as scope:
        await receive.receive()
    send.send_nowait("later")
    return scope.cancelled_caught, await receive.receive()


def test_a_cancelled_receive_takes_nothing(run):
    assert run(cancelled_receive) == (True, "later")


# -- what only the simulator has -------------------------------------------------------------

async def interleaving(rt):
    order = []
    async with rt.open_nursery() as nursery:
        for index in range(8):
            async def child(index=index):
                await rt.sleep(1)
                order.append(index)
            nursery.start_soon(child)
    return order


def test_the_seed_draws_the_order_of_tasks_woken_together():
    assert run_on_sim(interleaving, seed=7) == run_on_sim(interleaving, seed=7)
    orders = {tuple(run_on_sim(interleaving, seed=seed)) for seed in range(10)}
    assert len(orders) > 1
    assert all(sorted(order) == list(range(8)) for order in orders)


def test_a_paused_process_runs_nothing_until_it_resumes():
    loop = EventLoop()
    rt = SimRuntime(loop=loop, rng=random.Random(1), name="p")
    times = []

    async def ticker():
        for _ in range(3):
            await rt.sleep(1)
            times.append(loop.now_ns / 1e9)
    rt.spawn_system_task(ticker)
    loop.run_until(int(1.5e9))
    rt.paused_until_ns = int(4e9)
    loop.run_until_idle(1000)
    assert times == [1.0, 4.0, 5.0]


def test_stopping_a_process_closes_its_coroutines_and_their_awaits_fail():
    loop = EventLoop()
    rt = SimRuntime(loop=loop, rng=random.Random(1), name="p")
    log = []

    async def worker(name):
        try:
            await rt.sleep_forever()
        finally:
            log.append(f"{name} closing")
            try:
                await rt.sleep(1)
            except ProcessStopped:
                log.append(f"{name} cannot wait")

    async def main():
        async with rt.open_nursery() as nursery:
            nursery.start_soon(worker, "a")
            nursery.start_soon(worker, "b")
    rt.spawn_system_task(main)
    loop.run_until(int(1e9))
    assert rt.task_count == 3
    rt.stop()
    assert log == ["a closing", "a cannot wait", "b closing", "b cannot wait"] or \
        sorted(log) == sorted(["a closing", "a cannot wait", "b closing", "b cannot wait"])
    assert rt.task_count == 0
    loop.run_until_idle(1000)
    with pytest.raises(ProcessStopped):
        rt.spawn_system_task(main)


def test_an_error_escaping_a_system_task_fails_the_run():
    loop = EventLoop()
    rt = SimRuntime(loop=loop, rng=random.Random(1), name="p")

    async def buggy():
        await rt.sleep(1)
        raise ZeroDivisionError("bug")
    rt.spawn_system_task(buggy)
    with pytest.raises(ZeroDivisionError):
        loop.run_until_idle(1000)


def test_wall_clocks_can_be_skewed():
    loop = EventLoop()
    rt = SimRuntime(loop=loop, rng=random.Random(1), name="p", clock_offset_ns=-250_000_000)
    loop.run_until(int(10e9))
    assert rt.monotonic_s() == 10.0 and rt.wall_time_s() == 9.75
