"""bkcore.table.peer_wire: table calls, results and errors survive the trip between servers
unchanged, and whatever else a peer sends is refused as MalformedFrame."""

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bkcore.table.commands import (
    Compare, CompareResult, CompareTarget, DeleteRange, DeleteResult, Increment, IncrementResult, KeyValue,
    OpRefused, Put, PutResult, RangeRead, RangeResult, Txn, TxnResult,
)
from bkcore.table.kv import WatchEvent
from bkcore.table.ownership import NotOwner
from bkcore.table.peer_wire import (
    CANCEL_WATCH, ERROR_CLASSES, WATCH_ENDED, TableAnswer, TableCall, WatchCreated, WatchOperation, decode_answers,
    decode_calls, frame_of, pack_answer, pack_call,
)
from bkcore.wire import FRAME_HEADER, MalformedFrame

KV = KeyValue(b"\x00\x01pk", b"v", 3, 4, 2, expire_at_ms=99, is_number=False)
NUMBER = KeyValue(b"\x00\x01pn", (7).to_bytes(8, "big"), 5, 5, 1, is_number=True)
RESULTS = [
    PutResult(4), PutResult(5, KV), DeleteResult(6, 2, (KV, NUMBER)), DeleteResult(6, 0),
    RangeResult(7, (KV, NUMBER), 2, more=True), RangeResult(7, (), 0), IncrementResult(8, 12),
    IncrementResult(8), TxnResult(9, False, (PutResult(9, KV), OpRefused("holds a number"), RangeResult(9, (KV,), 1),
                                            DeleteResult(9, 1), IncrementResult(9, -3))),
]
OPERATIONS = [
    Put(b"k", b"v", prev_kv=True, ttl_ms=5), DeleteRange(b"a", b"z", True), Increment(b"n", -4, False),
    RangeRead(b"a", b"z", limit=3, count_only=False, keys_only=True, min_mod_revision=2),
    Txn((Compare(b"k", CompareTarget.VERSION, CompareResult.LESS, 3),
         Compare(b"k", CompareTarget.VALUE, CompareResult.EQUAL, b"x")),
        (Put(b"k", b"v"), RangeRead(b"k")), (Increment(b"n", 1),)),
]


def body(frame: bytes) -> bytes:
    return frame[FRAME_HEADER.size:]


def test_calls_and_results_come_back_equal():
    calls = [TableCall(i + 1, "ns", "table", b"pk", op) for i, op in enumerate(OPERATIONS)]
    assert decode_calls(body(frame_of([pack_call(c) for c in calls]))) == calls
    assert [c.is_read for c in calls] == [False, False, False, True, False]
    answers = [TableAnswer(i, result=r) for i, r in enumerate(RESULTS)]
    assert decode_answers(body(frame_of([pack_answer(a) for a in answers]))) == answers


def test_watches_and_their_answers_come_back_equal():
    calls = [TableCall(1, "ns", "table", b"pk", WatchOperation(b"k", None, 0)),
             TableCall(2, "ns", "table", b"pk", WatchOperation(b"a", b"", 17)),
             TableCall(1, "", "", b"", CANCEL_WATCH)]
    assert decode_calls(body(frame_of([pack_call(c) for c in calls]))) == calls
    answers = [TableAnswer(1, result=WatchCreated(16)), TableAnswer(1, result=WatchEvent("put", KV, None, 17)),
               TableAnswer(1, result=WatchEvent("delete", KeyValue(b"\x00\x01pk", b"", 0, 18, 0), KV, 18)),
               TableAnswer(1, result=WATCH_ENDED)]
    assert decode_answers(body(frame_of([pack_answer(a) for a in answers]))) == answers


@pytest.mark.parametrize("cls", sorted(ERROR_CLASSES.values(), key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_every_error_class_comes_back_as_itself_with_its_message(cls):
    error = NotOwner("host:1", "range 2 of table ns/t") if cls is NotOwner else cls("what went wrong")
    (answer,) = decode_answers(body(frame_of([pack_answer(TableAnswer(7, error=error))])))
    assert type(answer.error) is cls and str(answer.error) == str(error)
    if cls is NotOwner:
        assert (answer.error.owner, answer.error.what) == ("host:1", "range 2 of table ns/t")


def test_an_error_of_another_class_travels_as_its_nearest_known_class():
    class Closed(ConnectionRefusedError):
        pass
    (refused, bug) = decode_answers(body(frame_of([pack_answer(TableAnswer(1, error=Closed("no"))),
                                                   pack_answer(TableAnswer(2, error=KeyError("x")))])))
    assert type(refused.error) is ConnectionError and str(refused.error) == "no"
    assert type(bug.error) is RuntimeError and str(bug.error) == "KeyError: 'x'"


@pytest.mark.parametrize("items", [
    [[1, "ns", "t", b"pk"]], [[-1, "ns", "t", b"pk", [1, b"k", b"v", False, 0]]],
    [[1, "ns", "t", "pk", [1, b"k", b"v", False, 0]]], [[1, "ns", "t", b"pk", [99]]],
    [[1, "ns", "t", b"pk", [1, b"k"]]], {"a": 1}, 5,
    [[1, "ns", "t", b"pk", ["watch", "k", None, 0]]], [[1, "ns", "t", b"pk", ["watch", b"k", None, -1]]],
    [[1, "ns", "t", b"pk", ["watch", b"k", None]]], [[1, "", "", b"", ["cancel", 1]]],
])
def test_calls_of_the_wrong_shape_are_malformed(items):
    with pytest.raises(MalformedFrame):
        decode_calls(msgpack.packb(items))


@pytest.mark.parametrize("items", [
    [[1, 0, [5, 1, True, [[5, 1, True, []]]]]],        # a txn inside a txn's results
    [[1, 0, [6, "refused"]]],                           # a refusal outside a txn
    [[1, 0, [1, "1", None]]], [[1, 0, [3, 1, [[b"k", b"v", 1, 1, 1, 0, 1]], 1, False]]],
    [[1, 1, ["NotOwner", "m"]]], [[1, 1, [3, "m"]]], [[1, 2, []]],
    [[1, 3, ["put", None, None, 3]]], [[1, 3, ["moved", [b"k", b"v", 1, 1, 1, 0, False], None, 3]]],
    [[1, 4, [1]]], [[1, 2, ["1"]]], [[1, 5, []]],
])
def test_answers_of_the_wrong_shape_are_malformed(items):
    with pytest.raises(MalformedFrame):
        decode_answers(msgpack.packb(items))


@given(st.binary(max_size=200))
def test_random_bytes_are_refused_or_read(data):
    for decode in (decode_calls, decode_answers):
        try:
            decode(data)
        except MalformedFrame:
            pass


values = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.binary(max_size=8)
                      | st.text(max_size=8), lambda inner: st.lists(inner, max_size=6), max_leaves=30)


@given(st.lists(st.lists(values, max_size=6), max_size=4))
def test_random_msgpack_values_are_refused_or_read(items):
    for decode in (decode_calls, decode_answers):
        try:
            decode(msgpack.packb(items))
        except MalformedFrame:
            pass
