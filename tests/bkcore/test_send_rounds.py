"""bkcore.stream.send_rounds: writers that share rounds send their entries together, a round at
a time; a failed writer does not hold a round up; a round held up too long is given up on.
Driven with stand-in writers (the stream writer's use of it: tests/bkclient/test_streams.py)."""

import trio

from bkcore.stream.send_rounds import SendRounds
from bktransports.trio_runtime import TRIO_RUNTIME


class Writer:
    """Sends an entry whenever asked (admitted, or when the round it waited for ends)."""

    def __init__(self, rounds: SendRounds, name: str, log: list) -> None:
        self.rounds, self.name, self.log = rounds, name, log
        self.ready = 0              # entries waiting to be sent

    def write(self) -> None:
        self.ready += 1
        if self.rounds.admit(self, self.send):
            self.send()

    def send(self) -> None:
        if self.ready:
            self.ready -= 1
            self.rounds.started(self)
            self.log.append(self.name)

    def acknowledged(self) -> None:
        self.rounds.finished(self, self.send if self.ready else None)


def rounds_and_writers(*names, spawned=None, **options):
    rounds = SendRounds(TRIO_RUNTIME, spawned.append if spawned is not None else (lambda task: None), **options)
    log: list[str] = []
    return rounds, log, [Writer(rounds, name, log) for name in names]


def test_a_writer_waits_for_the_round_in_flight_and_then_every_waiting_writer_sends_together():
    rounds, log, (a, b, c) = rounds_and_writers("a", "b", "c")
    a.write()
    assert log == ["a"] and rounds.rounds_count == 1        # no round in flight: a starts one
    b.write()
    c.write()
    a.write()                                                # others wait: so does a's next
    assert log == ["a"] and rounds.is_waiting(b) and rounds.is_waiting(c)
    a.acknowledged()                                         # the round ends: b, c and a go
    assert log == ["a", "b", "c", "a"] and rounds.rounds_count == 2
    b.acknowledged()
    c.write()                                                # the round still has c and a
    assert log == ["a", "b", "c", "a"]
    c.acknowledged()
    a.acknowledged()
    assert log == ["a", "b", "c", "a", "c"] and rounds.rounds_count == 3


def test_a_writer_alone_in_a_round_keeps_sending_and_one_with_nothing_queued_does_not_wait():
    rounds, log, (a, b) = rounds_and_writers("a", "b")
    a.write()
    a.write()                        # only a is in flight: it may pipeline its own entries
    assert log == ["a", "a"]
    a.acknowledged()
    a.acknowledged()
    assert not rounds.is_waiting(a)
    b.write()
    assert log == ["a", "a", "b"]


def test_a_writer_that_leaves_ends_the_round_it_held():
    rounds, log, (a, b) = rounds_and_writers("a", "b")
    a.write()
    b.write()
    assert log == ["a"]
    rounds.leave(a)                  # a failed: its entry in flight counts no more
    assert log == ["a", "b"]
    rounds.leave(b)
    rounds.leave(b)                  # (twice: a writer may fail, then be closed)
    a2 = Writer(rounds, "a2", log)
    a2.write()
    assert log == ["a", "b", "a2"]


async def test_a_round_held_up_too_long_is_given_up_and_its_late_entry_disturbs_nothing():
    async with trio.open_nursery() as nursery:
        rounds = SendRounds(TRIO_RUNTIME, nursery.start_soon, round_wait_max_s=0.05)
        log: list[str] = []
        slow, a, b = (Writer(rounds, name, log) for name in ("slow", "a", "b"))
        slow.write()
        a.write()
        started = trio.current_time()
        with trio.fail_after(5):
            while log != ["slow", "a"]:
                await trio.sleep(0.005)
        waited = trio.current_time() - started
        assert 0.05 <= waited < 0.5 and rounds.rounds_given_up_count == 1
        b.write()                    # the new round is a's alone: the stuck entry counts no more
        assert log == ["slow", "a"]
        a.acknowledged()
        assert log == ["slow", "a", "b"]
        slow.acknowledged()          # late: b's round goes on
        slow.write()
        assert log == ["slow", "a", "b"]
        b.acknowledged()
        assert log == ["slow", "a", "b", "slow"]
        with trio.fail_after(5):     # nobody waits: the watchdog ends
            while rounds._is_watching:
                await trio.sleep(0.01)


async def test_a_writer_whose_send_fails_leaves_those_after_it_to_the_watchdog():
    async with trio.open_nursery() as nursery:
        rounds = SendRounds(TRIO_RUNTIME, nursery.start_soon, round_wait_max_s=0.02)
        log: list[str] = []
        first, broken, last = (Writer(rounds, name, log) for name in ("first", "broken", "last"))

        def fail() -> None:
            raise RuntimeError("a bug in a writer")
        first.write()
        rounds.admit(broken, fail)
        last.write()
        try:
            first.acknowledged()         # the round ends; broken's send raises to the caller
        except RuntimeError:
            pass
        assert log == ["first"] and rounds.is_waiting(last)
        with trio.fail_after(5):         # no round is in flight: the watchdog lets last go
            while log != ["first", "last"]:
                await trio.sleep(0.005)
        last.acknowledged()
