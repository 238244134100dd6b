"""The writer core's add batches, stepped by hand: adds held per bookie until the driver pulls
it, one request per bookie and run (also for adds held in separate inputs while a bookie's
connection is busy), one answer acknowledging the whole run, stale answers ignored, size limits
splitting runs, and held adds timed out when their bookie is never pulled."""

import random

from hypothesis import given, settings, strategies as st

from bkcore.client.batching import BATCH_SIZE_MAX
from bkcore.client.config import ClientConfig
from bkcore.client.context import ClientContext
from bkcore.client.writer import LedgerWriter
from bkcore.digest import DigestType, master_key
from bkcore.effects import Completed, HeldSends, MetadataCall, Send
from bkcore.errors import Code
from bkcore.ledger.layout import LedgerLayout
from bkcore.ledger.metadata import LedgerMetadata, password_hash
from bkcore.ledger.schedule import write_set
from bkcore.wire import AddBatchRequest, AddBatchResponse, AddRequest, AddResponse

ENSEMBLE = ("b0", "b1", "b2")


def writer(ensemble_size: int = 3, write_quorum_size: int = 3, ack_quorum_size: int = 2) -> LedgerWriter:
    ctx = ClientContext(client_id="c", config=ClientConfig(), rng=random.Random(1), layout=LedgerLayout())
    metadata = LedgerMetadata(ledger_id=7, ensemble_size=ensemble_size, write_quorum_size=write_quorum_size,
                              ack_quorum_size=ack_quorum_size, ensembles=((0, ENSEMBLE[:ensemble_size]),),
                              digest_type=DigestType.CRC32C, password_hash=password_hash(b"pw"),
                              master_key=master_key(b"pw"))
    return LedgerWriter(ctx=ctx, metadata=metadata, password=b"pw")


def take(w: LedgerWriter, now_ns: int = 0) -> list:
    """The effects, as a driver whose connections can all write takes them: every bookie a
    HeldSends names is pulled at once, and its Sends taken too."""
    taken = []
    while effects := w.ctx.take_effects():
        for effect in effects:
            if type(effect) is HeldSends:
                w.ctx.pull_sends(effect.destinations, now_ns)
            else:
                taken.append(effect)
    return taken


def sends(w: LedgerWriter) -> dict[str, list]:
    by_bookie: dict[str, list] = {}
    for effect in take(w):
        if type(effect) is Send:
            by_bookie.setdefault(effect.destination, []).append(effect.message)
    return by_bookie


def completions(w: LedgerWriter) -> list[int]:
    return [effect.result for effect in take(w) if type(effect) is Completed]


def test_adds_wait_for_their_bookies_to_be_pulled_then_leave_as_one_batch_per_bookie():
    w = writer()
    for op_id in range(5):
        assert w.add(op_id, b"p%d" % op_id, now_ns=0) == op_id
    # The bookies are named once; taking effects sends nothing.
    assert w.ctx.take_effects() == [HeldSends(list(ENSEMBLE))] and w.ctx.take_effects() == ()
    assert w.ctx.pending_requests_count == 0
    w.ctx.pull_sends(ENSEMBLE, 0)
    out = sends(w)
    assert sorted(out) == list(ENSEMBLE)
    for messages in out.values():
        [batch] = messages
        assert type(batch) is AddBatchRequest and (batch.ledger_id, batch.first_entry_id, len(batch.bodies)) == (7, 0, 5)
    assert w.ctx.pending_requests_count == 3
    # The next take sends a lone add as an AddRequest.
    w.add(5, b"alone", now_ns=0)
    assert [type(m) for messages in sends(w).values() for m in messages] == [AddRequest] * 3


def test_one_answer_acknowledges_the_run_and_completions_stay_in_order():
    w = writer()
    for op_id in range(4):
        w.add(op_id, b"x", now_ns=0)
    out = sends(w)
    b0, b1 = out["b0"][0], out["b1"][0]
    w.ctx.on_response(AddBatchResponse(b0.request_id, Code.OK, 7, 0, 4), "b0", 1)
    assert completions(w) == [] and w.last_add_confirmed == -1      # one ack of Qa = 2
    w.ctx.on_response(AddBatchResponse(b1.request_id, Code.OK, 7, 0, 4), "b1", 2)
    assert completions(w) == [0, 1, 2, 3] and w.last_add_confirmed == 3
    # A duplicate or a late answer changes nothing.
    w.ctx.on_response(AddBatchResponse(b1.request_id, Code.OK, 7, 0, 4), "b1", 3)
    w.ctx.on_response(AddBatchResponse(out["b2"][0].request_id, Code.OK, 7, 0, 4), "b2", 3)
    assert completions(w) == [] and w.pending_adds_count == 0


def test_a_single_add_answer_still_acknowledges_its_entry():
    w = writer(ack_quorum_size=1)
    w.add(0, b"x", now_ns=0)
    request = sends(w)["b2"][0]
    w.ctx.on_response(AddResponse(request.request_id, Code.OK, 7, 0), "b2", 1)
    assert completions(w) == [0]


def test_runs_split_at_the_batch_size_limit():
    w = writer()
    body = b"z" * (BATCH_SIZE_MAX // 3)
    for op_id in range(7):
        w.add(op_id, body, now_ns=0)
    for messages in sends(w).values():
        firsts = [m.first_entry_id if type(m) is AddBatchRequest else m.entry_id for m in messages]
        counts = [len(m.bodies) if type(m) is AddBatchRequest else 1 for m in messages]
        assert firsts == [0, 2, 4, 6] and counts == [2, 2, 2, 1]


def test_a_batch_that_fails_fails_every_add_it_carried_over_to_an_ensemble_change():
    w = writer(ack_quorum_size=3)
    for op_id in range(3):
        w.add(op_id, b"x", now_ns=0)
    out = sends(w)
    for bookie in ("b0", "b2"):
        w.ctx.on_response(AddBatchResponse(out[bookie][0].request_id, Code.OK, 7, 0, 3), bookie, 1)
    w.ctx.on_response(AddBatchResponse(out["b1"][0].request_id, Code.IO_ERROR, 7, 0, 3), "b1", 1)
    effects = take(w)
    assert not any(type(effect) is Completed for effect in effects)
    assert [type(effect) for effect in effects] == [MetadataCall]      # listing bookies for a change
    assert w.pending_adds_count == 3 and w.last_add_confirmed == -1


def test_each_striped_bookie_gets_its_own_runs():
    w = writer(ensemble_size=3, write_quorum_size=2, ack_quorum_size=1)
    for op_id in range(6):
        w.add(op_id, b"s", now_ns=0)
    runs = {bookie: [(m.first_entry_id, len(m.bodies)) if type(m) is AddBatchRequest else (m.entry_id, 1)
                     for m in messages] for bookie, messages in sends(w).items()}
    assert runs == {"b0": [(0, 1), (2, 2), (5, 1)], "b1": [(0, 2), (3, 2)], "b2": [(1, 2), (4, 2)]}


def bookie_runs(effects: list) -> dict[str, list[tuple[int, int]]]:
    """(first entry id, count) of each add request, per bookie."""
    runs: dict[str, list[tuple[int, int]]] = {}
    for effect in effects:
        if type(effect) is Send:
            m = effect.message
            runs.setdefault(effect.destination, []).append(
                (m.first_entry_id, len(m.bodies)) if type(m) is AddBatchRequest else (m.entry_id, 1))
    return runs


def test_adds_of_separate_inputs_for_a_busy_bookie_leave_together_when_it_is_pulled():
    w = writer()
    w.add(0, b"a", now_ns=0)
    [held] = w.ctx.take_effects()
    w.ctx.pull_sends(["b0", "b2"], 0)                # b1's connection is busy writing
    assert bookie_runs(w.ctx.take_effects()) == {"b0": [(0, 1)], "b2": [(0, 1)]}
    for op_id in (1, 2, 3):                        # one at a time, each its own input
        w.add(op_id, b"x", now_ns=op_id)
        effects = w.ctx.take_effects()
        # b0 and b2 are named again (they were pulled), b1 is named already.
        assert [sorted(effect.destinations) for effect in effects] == [["b0", "b2"]]
        w.ctx.pull_sends(["b0", "b2"], op_id)
        assert bookie_runs(w.ctx.take_effects()) == {"b0": [(op_id, 1)], "b2": [(op_id, 1)]}
    w.ctx.pull_sends(["b1"], 10)                    # b1 done writing: all four in one batch
    [batch] = [effect.message for effect in w.ctx.take_effects()]
    assert type(batch) is AddBatchRequest and (batch.first_entry_id, len(batch.bodies)) == (0, 4)
    # Acknowledged by b1's one answer and each of b0's.
    w.ctx.on_response(AddBatchResponse(batch.request_id, Code.OK, 7, 0, 4), "b1", 11)
    assert completions(w) == []
    b0_requests = [rid for rid, (dest, _) in w.ctx._pending_requests.items() if dest == "b0"]
    for request_id, entry_id in zip(b0_requests, range(4)):
        w.ctx.on_response(AddResponse(request_id, Code.OK, 7, entry_id), "b0", 12)
    assert completions(w) == [0, 1, 2, 3] and w.last_add_confirmed == 3
    w.invariants()


def test_held_adds_time_out_from_when_they_were_held_if_their_bookie_is_never_pulled():
    w = writer(ack_quorum_size=3)
    timeout_ns = w.ctx.config.add_entry_timeout_ns
    w.add(0, b"a", now_ns=100)
    assert w.ctx.take_effects() == [HeldSends(list(ENSEMBLE))]
    w.ctx.pull_sends(["b0", "b1"], 100)                # b2 never drains
    w.ctx.take_effects()
    assert w.ctx.next_deadline_ns() == 100 + timeout_ns
    w.ctx.on_timer(100 + timeout_ns)
    # b2's add leaves (to wait behind what its connection has), already timed out, like b0's
    # and b1's: the writer replaces them (lists the bookies), as when the add waited in that
    # connection's queue.
    send, list_bookies = w.ctx.take_effects()
    assert send.destination == "b2" and type(list_bookies) is MetadataCall
    assert w.ctx.pending_requests_count == 0 and w.ctx.next_deadline_ns() is None


def test_a_pull_sends_each_pulled_bookie_what_is_held_for_it_and_keeps_the_rest():
    w = writer(ensemble_size=3, write_quorum_size=2, ack_quorum_size=1)
    for op_id in range(4):
        w.add(op_id, b"s", now_ns=0)
    assert w.ctx.take_effects() == [HeldSends(["b0", "b1"]), HeldSends(["b2"])]
    w.ctx.pull_sends(["b1"], 0)
    assert bookie_runs(w.ctx.take_effects()) == {"b1": [(0, 2), (3, 1)]}
    w.add(4, b"s", now_ns=1)                        # entry 4 to b1 (named again) and b2
    assert w.ctx.take_effects() == [HeldSends(["b1"])]
    w.ctx.pull_sends(["b0", "b1", "b2", "elsewhere"], 2)
    assert bookie_runs(w.ctx.take_effects()) == {"b0": [(0, 1), (2, 2)], "b1": [(4, 1)], "b2": [(1, 2), (4, 1)]}


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([(3, 3, 2), (3, 2, 1), (3, 2, 2)]),
       st.lists(st.one_of(st.tuples(st.just("add"), st.integers(1, 3)),
                          st.tuples(st.just("pull"), st.sets(st.sampled_from(ENSEMBLE))),
                          st.tuples(st.just("answer"), st.integers(0, 20))), max_size=30))
def test_whatever_is_pulled_when_each_bookie_gets_its_entries_once_in_order(shape, steps):
    ensemble_size, write_quorum_size, ack_quorum_size = shape
    w = writer(ensemble_size, write_quorum_size, ack_quorum_size)
    sent: dict[str, list[int]] = {bookie: [] for bookie in ENSEMBLE}
    unanswered: list[Send] = []
    completed: list[int] = []
    added_count = 0

    def collect() -> None:
        for effect in w.ctx.take_effects():
            if type(effect) is Send and type(effect.message) in (AddRequest, AddBatchRequest):
                m = effect.message
                first, count = (m.first_entry_id, len(m.bodies)) if type(m) is AddBatchRequest else (m.entry_id, 1)
                sent[effect.destination] += range(first, first + count)
                unanswered.append(effect)
            elif type(effect) is Completed:
                completed.append(effect.result)
        w.invariants()

    def answer(send: Send) -> None:
        m = send.message
        response = (AddBatchResponse(m.request_id, Code.OK, 7, m.first_entry_id, len(m.bodies))
                    if type(m) is AddBatchRequest else AddResponse(m.request_id, Code.OK, 7, m.entry_id))
        w.ctx.on_response(response, send.destination, 1)

    for kind, argument in steps:
        if kind == "add":
            for _ in range(argument):
                w.add(added_count, b"e%d" % added_count, now_ns=0)
                added_count += 1
        elif kind == "pull":
            w.ctx.pull_sends(sorted(argument), 0)
        elif unanswered:
            answer(unanswered.pop(argument % len(unanswered)))
        collect()
    w.ctx.pull_sends(ENSEMBLE, 0)
    collect()
    while unanswered:
        answer(unanswered.pop(0))
        collect()
    assert completed == list(range(added_count)) and w.pending_adds_count == 0
    for position, bookie in enumerate(ENSEMBLE):
        assert sent[bookie] == [entry_id for entry_id in range(added_count)
                                if position in write_set(entry_id, ensemble_size=ensemble_size,
                                                         write_quorum_size=write_quorum_size)]
