"""EventLoop: order by time then insertion, lazy cancellation, limits, virtual clock; TraceHasher:
canonical encoding, determinism across processes."""

import enum
import os
import subprocess
import sys

import pytest

from bksim.loop import EventLoop, EventLoopFull, TraceHasher

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src")


def test_events_run_by_time_then_insertion_order():
    loop = EventLoop()
    seen = []
    loop.call_at(20, seen.append, "late")
    loop.call_at(10, seen.append, "first")
    loop.post_at(10, seen.append, "second")
    loop.call_at(10, seen.append, "third")
    loop.call_at(5, seen.append, "earliest")
    assert loop.run_until(100) == 5
    assert seen == ["earliest", "first", "second", "third", "late"]


def test_run_until_stops_at_end_and_sets_the_clock():
    loop = EventLoop()
    times = []
    loop.call_at(10, lambda: times.append(loop.now_ns))
    loop.call_at(30, lambda: times.append(loop.now_ns))
    assert loop.run_until(20) == 1
    assert times == [10] and loop.now_ns == 20
    assert loop.run_until(30) == 1            # an event exactly at end_ns runs
    assert times == [10, 30] and loop.now_ns == 30
    assert loop.run_until(50) == 0 and loop.now_ns == 50
    assert loop.events_run_count == 2


def test_events_scheduled_by_callbacks_run_in_the_same_call_when_due():
    loop = EventLoop()
    seen = []

    def first():
        seen.append(("first", loop.now_ns))
        loop.call_later(5, lambda: seen.append(("chained", loop.now_ns)))
        loop.call_later(0, lambda: seen.append(("now", loop.now_ns)))
        loop.call_later(500, lambda: seen.append(("too late", loop.now_ns)))

    loop.call_at(10, first)
    assert loop.run_until(100) == 3
    assert seen == [("first", 10), ("now", 10), ("chained", 15)]
    assert loop.pending_count == 1


def test_cancellation_is_lazy_and_idempotent():
    loop = EventLoop()
    seen = []
    handle = loop.call_at(15, seen.append, "cancelled")
    loop.call_at(16, seen.append, "kept")
    assert loop.pending_count == 2
    loop.cancel(handle)
    loop.cancel(handle)
    assert loop.pending_count == 1
    assert loop.next_event_at_ns() == 16
    assert loop.run_until(100) == 1
    assert seen == ["kept"]
    assert loop.statistics().cancelled_count == 1
    loop.invariants()


def test_cancel_after_running_does_nothing():
    loop = EventLoop()
    handle = loop.call_at(1, lambda: None)
    loop.run_until(5)
    loop.cancel(handle)
    assert loop.statistics().cancelled_count == 0 and loop.pending_count == 0
    loop.invariants()


def test_a_callback_may_cancel_a_later_event_at_the_same_time():
    loop = EventLoop()
    seen = []
    victim = loop.call_at(10, seen.append, "victim")
    # Scheduled after the victim, so it runs after it: cancelling then is a no-op.
    loop.call_at(10, loop.cancel, victim)
    other = loop.call_at(20, seen.append, "other")
    loop.call_at(10, loop.cancel, other)
    loop.run_until(30)
    assert seen == ["victim"]
    loop.invariants()


def test_run_until_idle_respects_its_limit():
    loop = EventLoop()
    seen = []

    def again(count):
        seen.append(count)
        loop.call_later(7, again, count + 1)

    loop.call_at(0, again, 0)
    assert loop.run_until_idle(10) == 10
    assert seen == list(range(10)) and loop.now_ns == 63
    assert loop.pending_count == 1
    quiet = EventLoop()
    quiet.call_at(3, seen.append, "x")
    assert quiet.run_until_idle(event_count_max=100) == 1 and quiet.now_ns == 3 and quiet.pending_count == 0


def test_compaction_keeps_order_and_drops_cancelled():
    loop = EventLoop()
    seen = []
    handles = [loop.call_at(i, seen.append, i) for i in range(10_000)]
    for handle in handles[::2] + handles[1::4]:
        loop.cancel(handle)
    assert loop.statistics().compaction_count >= 1
    loop.invariants()
    loop.run_until(10_000)
    assert seen == list(range(3, 10_000, 4))


def test_pending_limit_rejects_after_compacting():
    loop = EventLoop(pending_count_max=3)
    first = loop.call_at(1, lambda: None)
    loop.call_at(2, lambda: None)
    loop.post_at(3, lambda: None)
    loop.cancel(first)
    loop.call_at(4, lambda: None)       # fits once the cancelled event is dropped
    with pytest.raises(EventLoopFull):
        loop.post_at(5, lambda: None)
    assert loop.pending_count == 3 and loop.statistics().pending_count_peak == 3
    loop.invariants()


def test_scheduling_in_the_past_is_a_bug():
    loop = EventLoop()
    loop.run_until(100)
    with pytest.raises(AssertionError):
        loop.call_at(99, lambda: None)
    with pytest.raises(AssertionError):
        loop.call_later(-1, lambda: None)
    with pytest.raises(AssertionError):
        loop.run_until(50)


def test_events_run_count_survives_a_raising_callback():
    loop = EventLoop()
    loop.call_at(1, lambda: None)
    loop.call_at(2, lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        loop.run_until(10)
    assert loop.events_run_count == 2 and loop.now_ns == 2


def _digest(*records) -> str:
    trace = TraceHasher()
    for record in records:
        trace.record(*record)
    return trace.hexdigest()


def test_trace_hash_depends_on_content_order_and_boundaries():
    assert _digest((1, "a"), (2, "b")) == _digest((1, "a"), (2, "b"))
    assert _digest((1, "a"), (2, "b")) != _digest((2, "b"), (1, "a"))
    # Field and record boundaries and types are part of the encoding.
    assert _digest(("ab",)) != _digest(("a", "b"))
    assert _digest(("a",), ("b",)) != _digest(("a", "b"))
    assert _digest((1,)) != _digest(("1",)) != _digest((b"1",))
    assert _digest((12, 3)) != _digest((1, 23))
    assert _digest(("a;b",)) != _digest(("a", "b"))
    assert _digest((None,)) != _digest(())


def test_trace_hash_is_independent_of_flush_points():
    records = [(i, f"event-{i}", bytes([i % 256]) * (i % 50)) for i in range(20_000)]
    whole = _digest(*records)
    trace = TraceHasher()
    for index, record in enumerate(records):
        trace.record(*record)
        if index % 777 == 0:
            trace.hexdigest()        # an intermediate digest changes nothing
    assert trace.hexdigest() == whole and trace.record_count == len(records)


def test_trace_accepts_int_enums_by_value_and_refuses_other_objects():
    class Code(enum.IntEnum):
        OK = 0

    assert _digest((Code.OK,)) == _digest((0,))
    with pytest.raises(TypeError):
        TraceHasher().record(object())
    with pytest.raises(TypeError):
        TraceHasher().record(1.5)


PROGRAM = """
from bksim.loop import EventLoop, TraceHasher
loop, trace = EventLoop(), TraceHasher()
names = {"bookie-%d" % i for i in range(20)}
for index, name in enumerate(sorted(names)):
    loop.call_at(index % 3, trace.record, loop.now_ns, name, name.encode(), index)
loop.run_until(10)
print(trace.hexdigest())
"""


def test_same_history_same_digest_across_hash_seeds():
    digests = set()
    for hash_seed in ("0", "1", "4242"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed, PYTHONPATH=SRC)
        completed = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True,
                                   env=env, timeout=60, check=True)
        digests.add(completed.stdout.strip())
    assert len(digests) == 1
