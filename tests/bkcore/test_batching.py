"""Coalescing adds into AddBatchRequests: only consecutive entries of one ledger with the same
key and flags join; everything else keeps its place; answers expand back one per add."""

import itertools

from hypothesis import given, strategies as st

from bkcore.client.batching import coalesce_adds, expand_batch_response
from bkcore.errors import Code
from bkcore.wire import AddBatchRequest, AddBatchResponse, AddRequest, ReadLacRequest


def add(request_id, entry_id, ledger_id=1, key=b"k", recovery=False):
    return AddRequest(request_id, ledger_id, entry_id, key, b"body%d" % entry_id, recovery)


def test_runs_join_and_breaks_split():
    messages = [add(1, 0), add(2, 1), add(3, 2), ReadLacRequest(9, 1), add(4, 3), add(5, 5),
                add(6, 6, ledger_id=2), add(7, 7, ledger_id=2), add(8, 8, ledger_id=2, recovery=True)]
    batches = {}
    ids = itertools.count(100)
    out = coalesce_adds(messages, ids.__next__, batches)
    assert [type(m).__name__ for m in out] == ["AddBatchRequest", "ReadLacRequest", "AddRequest", "AddRequest",
                                              "AddBatchRequest", "AddRequest"]
    assert out[0] == AddBatchRequest(100, 1, 0, b"k", [b"body0", b"body1", b"body2"])
    assert [r.request_id for r in batches[100]] == [1, 2, 3]
    assert [r.request_id for r in batches[101]] == [6, 7]
    answers = expand_batch_response(AddBatchResponse(100, Code.OK, 1, 0, 3), batches[100])
    assert [(a.request_id, a.entry_id, a.code) for a in answers] == [(1, 0, 0), (2, 1, 0), (3, 2, 0)]


@given(st.lists(st.tuples(st.integers(1, 2), st.integers(0, 3), st.booleans()), max_size=60))
def test_every_add_is_carried_exactly_once_in_order(specs):
    messages = [add(i, entry, ledger_id=ledger, recovery=recovery) for i, (ledger, entry, recovery) in enumerate(specs)]
    batches = {}
    out = coalesce_adds(messages, itertools.count(1000).__next__, batches)
    carried = []
    for message in out:
        if isinstance(message, AddBatchRequest):
            requests = batches[message.request_id]
            assert len(requests) >= 2 and message.bodies == [r.body for r in requests]
            assert [r.entry_id for r in requests] == list(range(message.first_entry_id, message.first_entry_id + len(requests)))
            carried += requests
        else:
            carried.append(message)
    assert carried == messages
