"""ClientContext's request bookkeeping, stepped by hand: answers and timeouts each win at most
once, the next deadline is the oldest unanswered request's, and answered requests leave no
unbounded trail in the deadline FIFOs."""

import random

from bkcore.client.config import ClientConfig
from bkcore.client.context import DEADLINE_SLACK_COUNT, ClientContext
from bkcore.ledger.layout import LedgerLayout
from bkcore.wire import AddResponse, ReadRequest

TIMEOUT_NS = 1_000


def context() -> ClientContext:
    return ClientContext(client_id="c", config=ClientConfig(), rng=random.Random(1), layout=LedgerLayout())


def send(ctx: ClientContext, outcomes: dict, *, now_ns: int, timeout_ns: int = TIMEOUT_NS,
         destination: str = "b1") -> int:
    """Send a request; outcomes[request id] collects what its callback is given."""
    received = []
    request_id = ctx.send_request(destination, lambda rid: ReadRequest(rid, 1, 0),
                                  lambda message, at_ns: received.append(message),
                                  timeout_ns=timeout_ns, now_ns=now_ns)
    outcomes[request_id] = received
    return request_id


def answer(ctx: ClientContext, request_id: int, source: str = "b1") -> None:
    ctx.on_response(AddResponse(request_id, 0, 1, 0), source, 0)


def test_the_next_deadline_is_the_oldest_unanswered_request_in_any_bucket():
    ctx, outcomes = context(), {}
    first = send(ctx, outcomes, now_ns=0)
    second = send(ctx, outcomes, now_ns=10)
    send(ctx, outcomes, now_ns=20, timeout_ns=5_000)
    assert ctx.next_deadline_ns() == TIMEOUT_NS
    answer(ctx, first)
    assert ctx.next_deadline_ns() == 10 + TIMEOUT_NS
    ctx.forget_request(second)
    assert ctx.next_deadline_ns() == 20 + 5_000


def test_an_answer_and_a_timeout_each_win_at_most_once():
    ctx, outcomes = context(), {}
    answered, timed_out = send(ctx, outcomes, now_ns=0), send(ctx, outcomes, now_ns=0)
    answer(ctx, answered)
    ctx.on_timer(TIMEOUT_NS)
    answer(ctx, answered)                      # a duplicate: dropped
    answer(ctx, timed_out)                     # too late: dropped
    assert [type(m).__name__ for m in outcomes[answered]] == ["AddResponse"]
    assert outcomes[timed_out] == [None]
    assert ctx.statistics().responses_dropped_count == 2 and ctx.statistics().request_timeouts_count == 1
    assert ctx.next_deadline_ns() is None


def test_a_request_to_another_bookie_is_not_answered_by_this_one():
    ctx, outcomes = context(), {}
    request_id = send(ctx, outcomes, now_ns=0, destination="b2")
    answer(ctx, request_id, source="b1")
    assert outcomes[request_id] == [] and ctx.next_deadline_ns() == TIMEOUT_NS


def test_answered_requests_leave_a_bounded_trail_behind_one_that_waits():
    ctx, outcomes = context(), {}
    send(ctx, outcomes, now_ns=0)              # never answered: it holds the head of the FIFO
    for index in range(20 * DEADLINE_SLACK_COUNT):
        answer(ctx, send(ctx, outcomes, now_ns=index))
    fifo = ctx._request_deadlines[TIMEOUT_NS]
    assert len(fifo) <= 2 * 1 + DEADLINE_SLACK_COUNT + 1
    assert ctx.next_deadline_ns() == TIMEOUT_NS
    ctx.on_timer(TIMEOUT_NS)
    assert ctx.statistics().request_timeouts_count == 1 and ctx.next_deadline_ns() is None


def test_complete_each_completes_in_order_with_consecutive_results():
    from bkcore.effects import Completed
    ctx = context()
    ctx.complete(1, result="x")
    ctx.complete_each([7, 8, 9], 40)
    ctx.complete_each([], 50)
    assert ctx.take_effects() == [Completed(1, "x"), Completed(7, 40), Completed(8, 41), Completed(9, 42)]
