"""CoreTimer: due no later than the earliest deadline it was given; later ones never re-arm it."""

import trio
import trio.testing

from bktransports.timer import CoreTimer, now_ns


async def test_an_earlier_deadline_re_arms_and_a_later_one_does_not(autojump_clock: trio.testing.MockClock) -> None:
    fired: list[int] = []
    timer = CoreTimer(fired.append)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(timer.run)
        start = now_ns()
        timer.set(start + 5_000_000_000)
        await trio.sleep(0)
        timer.set(start + 1_000_000_000)          # earlier: re-armed
        timer.set(start + 9_000_000_000)          # later: stays at 1 s
        timer.set(None)                           # none: stays at 1 s
        await trio.sleep(2)
        assert len(fired) == 1 and start + 1_000_000_000 <= fired[0] < start + 2_000_000_000
        # After firing it is disarmed until told again.
        await trio.sleep(10)
        assert len(fired) == 1
        timer.set(now_ns() + 500_000_000)
        await trio.sleep(1)
        assert len(fired) == 2
        nursery.cancel_scope.cancel()


async def test_a_deadline_in_the_past_fires_at_once(autojump_clock: trio.testing.MockClock) -> None:
    fired: list[int] = []
    timer = CoreTimer(fired.append)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(timer.run)
        timer.set(now_ns() - 1)
        await trio.sleep(0.001)
        assert len(fired) == 1
        nursery.cancel_scope.cancel()
