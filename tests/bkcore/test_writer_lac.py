"""When an idle writer pushes its LAC, stepped by hand: once the effects of the input that
completed its adds are taken (held for its bookies like an add, it leaves when they are pulled), unless its application adds again right after going idle (then on a timer
explicit_lac_hold_ns later, cancelled by its next add), and never twice within explicit_lac_interval_ns."""

import random

from bkcore.client.config import ClientConfig
from bkcore.client.context import ClientContext
from bkcore.client.writer import LedgerWriter
from bkcore.digest import DigestType, master_key
from bkcore.effects import Send
from bkcore.errors import Code
from bkcore.ledger.layout import LedgerLayout
from bkcore.ledger.metadata import LedgerMetadata, password_hash
from bkcore.wire import AddRequest, AddResponse, WriteLacRequest
from tests.bkcore.test_writer_batches import take

INTERVAL_NS = 1_000
HOLD_NS = 7_000


def writer() -> LedgerWriter:
    ctx = ClientContext(client_id="c", config=ClientConfig(explicit_lac_interval_ns=INTERVAL_NS,
                                                                   explicit_lac_hold_ns=HOLD_NS),
                        rng=random.Random(1), layout=LedgerLayout())
    metadata = LedgerMetadata(ledger_id=7, ensemble_size=3, write_quorum_size=3, ack_quorum_size=2,
                              ensembles=((0, ("b0", "b1", "b2")),), digest_type=DigestType.CRC32C,
                              password_hash=password_hash(b"pw"), master_key=master_key(b"pw"))
    return LedgerWriter(ctx=ctx, metadata=metadata, password=b"pw")


def add_and_ack(w: LedgerWriter, op_id: int, *, at_ns: int, acked_at_ns: int) -> list:
    """One add, acknowledged by two bookies at acked_at_ns; returns the effects of that input."""
    w.add(op_id, b"x", now_ns=at_ns)
    requests = [e for e in take(w) if type(e) is Send and type(e.message) is AddRequest]
    for send in requests[:2]:
        w.ctx.on_response(AddResponse(send.message.request_id, Code.OK, 7, send.message.entry_id), send.destination,
                          acked_at_ns)
    return take(w)


def lac_pushes(effects: list) -> list[int]:
    return [e.message.lac for e in effects if type(e) is Send and type(e.message) is WriteLacRequest]


def test_a_writer_that_adds_now_and_then_pushes_with_the_completing_input():
    w = writer()
    assert lac_pushes(add_and_ack(w, 1, at_ns=0, acked_at_ns=10)) == [0, 0, 0]
    # The next add comes long after: again at once, the interval since the last push has passed.
    assert lac_pushes(add_and_ack(w, 2, at_ns=5_000, acked_at_ns=5_010)) == [1, 1, 1]
    assert w.ctx.next_deadline_ns() > 1_000_000         # no timer of its own: only request timeouts


def test_pushes_are_at_most_one_per_interval():
    w = writer()
    add_and_ack(w, 1, at_ns=0, acked_at_ns=10)
    assert lac_pushes(add_and_ack(w, 2, at_ns=5_000, acked_at_ns=5_010)) == [1, 1, 1]
    # Idle again 2 us later but only 500 ns after the last push: the push waits for the interval.
    assert lac_pushes(add_and_ack(w, 3, at_ns=7_000, acked_at_ns=5_500)) == []
    assert w.ctx.next_deadline_ns() == 5_010 + INTERVAL_NS
    w.ctx.on_timer(5_010 + INTERVAL_NS)
    assert lac_pushes(take(w)) == [2, 2, 2]


def test_a_writer_that_adds_right_after_going_idle_leaves_the_lac_to_its_next_add():
    w = writer()
    add_and_ack(w, 1, at_ns=0, acked_at_ns=10)                       # pushed: its first idle
    # Added 100 ns after going idle (within the interval): the application adds at once.
    effects = add_and_ack(w, 2, at_ns=110, acked_at_ns=2_000)
    assert lac_pushes(effects) == [] and w.ctx.next_deadline_ns() == 2_000 + HOLD_NS
    w.add(3, b"y", now_ns=2_050)                                     # came first: it carries LAC 1
    assert [e.message.body for e in take(w) if type(e.message) is AddRequest][0][16:24] \
        == (1).to_bytes(8, "big", signed=True)
    assert w.ctx.next_deadline_ns() > 1_000_000                      # the timer is gone
    w.ctx.on_timer(2_000 + HOLD_NS)
    assert lac_pushes(take(w)) == []
    # Without an add before the timer, the timer pushes, explicit_lac_hold_ns after going idle.
    w2 = writer()
    add_and_ack(w2, 1, at_ns=0, acked_at_ns=10)
    add_and_ack(w2, 2, at_ns=110, acked_at_ns=2_000)
    w2.ctx.on_timer(2_000 + HOLD_NS - 1)
    assert lac_pushes(take(w2)) == []
    w2.ctx.on_timer(2_000 + HOLD_NS)
    assert lac_pushes(take(w2)) == [1, 1, 1]


def test_a_held_push_is_dropped_when_the_application_adds_before_the_bookies_are_pulled():
    w = writer()
    w.add(1, b"x", now_ns=0)
    requests = [e for e in take(w) if type(e) is Send]
    for send in requests[:2]:
        w.ctx.on_response(AddResponse(send.message.request_id, Code.OK, 7, 0), send.destination, 10)
    completed, held = w.ctx.take_effects()            # the push waits for the pull
    assert completed.result == 0 and sorted(held.destinations) == ["b0", "b1", "b2"]
    w.add(2, b"y", now_ns=20)                         # the application, told of entry 0, adds at once
    w.ctx.pull_sends(held.destinations, 20)
    assert lac_pushes(take(w)) == [] and w.pending_adds_count == 1


def test_a_writer_with_a_push_delay_pushes_only_once_idle_that_long():
    """lac_push_delay_ns (a table range's journal): no push as the adds complete, whatever the
    application's habit; a timer that long after going idle, which the next add cancels."""
    delay_ns = 50_000
    w = writer()
    w.lac_push_delay_ns = delay_ns
    assert lac_pushes(add_and_ack(w, 1, at_ns=0, acked_at_ns=10)) == []
    assert w.ctx.next_deadline_ns() == 10 + delay_ns
    assert lac_pushes(add_and_ack(w, 2, at_ns=20_000, acked_at_ns=20_010)) == []    # cancelled it
    assert w.ctx.next_deadline_ns() == 20_010 + delay_ns
    w.ctx.on_timer(20_010 + delay_ns - 1)
    assert lac_pushes(take(w)) == []
    w.ctx.on_timer(20_010 + delay_ns)
    assert lac_pushes(take(w)) == [1, 1, 1]
    w.ctx.on_timer(20_010 + 3 * delay_ns)                # pushed once: nothing new to tell
    assert lac_pushes(take(w)) == []
