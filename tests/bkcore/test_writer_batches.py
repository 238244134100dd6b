"""The writer core's add batches, stepped by hand: adds held until effects are taken, one
request per bookie and run, one answer acknowledging the whole run, stale answers ignored,
size limits splitting runs."""

import random

from bkcore.client.batching import BATCH_SIZE_MAX
from bkcore.client.config import ClientConfig
from bkcore.client.context import ClientContext
from bkcore.client.writer import LedgerWriter
from bkcore.digest import DigestType, master_key
from bkcore.effects import Completed, MetadataCall, Send
from bkcore.errors import Code
from bkcore.ledger.layout import LedgerLayout
from bkcore.ledger.metadata import LedgerMetadata, password_hash
from bkcore.wire import AddBatchRequest, AddBatchResponse, AddRequest, AddResponse

ENSEMBLE = ("b0", "b1", "b2")


def writer(ensemble_size: int = 3, write_quorum_size: int = 3, ack_quorum_size: int = 2) -> LedgerWriter:
    ctx = ClientContext(client_id="c", config=ClientConfig(), rng=random.Random(1), layout=LedgerLayout())
    metadata = LedgerMetadata(ledger_id=7, ensemble_size=ensemble_size, write_quorum_size=write_quorum_size,
                              ack_quorum_size=ack_quorum_size, ensembles=((0, ENSEMBLE[:ensemble_size]),),
                              digest_type=DigestType.CRC32C, password_hash=password_hash(b"pw"),
                              master_key=master_key(b"pw"))
    return LedgerWriter(ctx=ctx, metadata=metadata, password=b"pw")


def sends(w: LedgerWriter) -> dict[str, list]:
    by_bookie: dict[str, list] = {}
    for effect in w.ctx.take_effects():
        if type(effect) is Send:
            by_bookie.setdefault(effect.destination, []).append(effect.message)
    return by_bookie


def completions(w: LedgerWriter) -> list[int]:
    return [effect.result for effect in w.ctx.take_effects() if type(effect) is Completed]


def test_adds_wait_for_the_effects_to_be_taken_then_leave_as_one_batch_per_bookie():
    w = writer()
    for op_id in range(5):
        assert w.add(op_id, b"p%d" % op_id, now_ns=0) == op_id
    assert w.ctx.pending_requests_count == 0          # nothing sent before the take
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
    effects = w.ctx.take_effects()
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
