"""Table calls between stream storage servers, as msgpack values (streamstorage.peer_calls
carries them).

A server that gets a request for a range another server owns sends it to the owner as a call,
and the owner answers it from its own Tables, as if the request had come to it:

    call    [call_id, namespace, stream, pkey, operation]    a command (Tables.execute, txns
                                                             included) or a RangeRead (Tables.read)
            [call_id, namespace, stream, pkey, ["watch", lkey, lkey_end, start_revision]]
                                                             a watch (Tables.watch)
            [call_id, "", "", b"", ["cancel"]]               ends the watch call_id
            [0, "", "", b"", ["auth", secret]]               the first call on a connection to a
                                                             server that asks for the cluster's
                                                             secret (a bookie's AuthRequest);
                                                             refused with an Unauthorized error
                                                             answer to call id 0, then closed
    answer  [call_id, ANSWER_RESULT, result]
            [call_id, ANSWER_ERROR, [class name, message, *extra]]
            [call_id, ANSWER_WATCH_CREATED, [revision]]       the watch is in place: the changes
                                                             above revision follow
            [call_id, ANSWER_WATCH_EVENT, [kind, kv, prev_kv, revision]]    one per change
            [call_id, ANSWER_WATCH_ENDED, []]                the watch ended (its range stopped
                                                             here; an error ends it too)

Operations are lists as the journal has them (commands.op_to_list). A result is [kind, field...]
with its key-values as lists. An error names the nearest class of what was raised that is in
ERROR_CLASSES (every error of the table, stream and ledger layers, and the builtin ones the
gateway tells apart), with its message: the caller raises that class again, so what it makes of
the error (the gateway's status code) is the same as on the owner. NotOwner carries its owner.

Each call or answer is packed on its own (pack_call, pack_answer: its size is then known) and a
frame body is a msgpack array of them (frame_of). Decoding never trusts the peer: anything not
of these shapes raises MalformedFrame, and the connection that carried it is closed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgpack

from bkcore import errors as ledger_errors
from bkcore.stream import errors as stream_errors
from bkcore.table import commands
from bkcore.table.commands import (
    Command, DeleteResult, IncrementResult, KeyValue, OpRefused, PutResult, RangeRead, RangeResult,
    TableError, TxnResult, op_from_list, op_to_list,
)
from bkcore.table.kv import WatchEvent
from bkcore.table.ownership import NotOwner, OwnershipUncertain
from bkcore.table.range import RangeClosed, WatchCompacted, WatchTooSlow
from bkcore.wire import MESSAGES_PER_FRAME_MAX, MalformedFrame, frame_body

ANSWER_RESULT = 0
ANSWER_ERROR = 1
ANSWER_WATCH_CREATED = 2
ANSWER_WATCH_EVENT = 3
ANSWER_WATCH_ENDED = 4
_ANSWER_KINDS = (ANSWER_RESULT, ANSWER_ERROR, ANSWER_WATCH_CREATED, ANSWER_WATCH_EVENT, ANSWER_WATCH_ENDED)
_CALL_ID_MAX = 2**63 - 1


def _classes_of(module, base: type) -> list[type]:
    return [value for value in vars(module).values() if isinstance(value, type) and issubclass(value, base)]


_ERROR_CLASS_LIST = [
    *_classes_of(commands, TableError), NotOwner, OwnershipUncertain, RangeClosed, WatchCompacted, WatchTooSlow,
    *_classes_of(stream_errors, stream_errors.StreamException),
    *_classes_of(ledger_errors, ledger_errors.BKException),
    ConnectionError, TimeoutError, OSError, ValueError, RuntimeError,
]
ERROR_CLASSES: dict[str, type[BaseException]] = {cls.__name__: cls for cls in _ERROR_CLASS_LIST}
assert len(ERROR_CLASSES) == len(_ERROR_CLASS_LIST), "two error classes share a name"


@dataclass(frozen=True, slots=True)
class WatchOperation:
    """Tables.watch(namespace, stream, pkey, lkey, lkey_end, start_revision=...) as a call."""

    lkey: bytes
    lkey_end: bytes | None
    start_revision: int


@dataclass(frozen=True, slots=True)
class CancelWatch:
    """The operation of a call that ends the watch of the same call id."""


CANCEL_WATCH = CancelWatch()

AUTH_CALL_ID = 0            # (calls proper are numbered from 1)


@dataclass(frozen=True, slots=True)
class PeerAuth:
    """The operation of the call that proves the cluster's secret."""

    secret: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class WatchCreated:
    """A watch's first answer: every change above `revision` follows."""

    revision: int


class WatchEnded:
    """A watch's last answer when it ended without an error."""


WATCH_ENDED = WatchEnded()


@dataclass(frozen=True, slots=True)
class TableCall:
    call_id: int
    namespace: str
    stream: str
    pkey: bytes
    operation: Command | RangeRead | WatchOperation | CancelWatch | PeerAuth

    @property
    def is_read(self) -> bool:
        return type(self.operation) is RangeRead


@dataclass(frozen=True, slots=True)
class TableAnswer:
    """What the owner made of a call: its result, or the error it raised (then result is None).
    A watch's answers are results too: WatchCreated, then WatchEvents, then WATCH_ENDED (or an
    error)."""

    call_id: int
    result: object = None
    error: BaseException | None = None


# -- encoding -----------------------------------------------------------------------------------

def pack_call(call: TableCall) -> bytes:
    return msgpack.packb([call.call_id, call.namespace, call.stream, call.pkey, _operation_to_list(call.operation)],
                         use_bin_type=True)


def _operation_to_list(operation) -> list:
    kind = type(operation)
    if kind is WatchOperation:
        return ["watch", operation.lkey, operation.lkey_end, operation.start_revision]
    if kind is CancelWatch:
        return ["cancel"]
    if kind is PeerAuth:
        return ["auth", operation.secret]
    return op_to_list(operation)


def pack_answer(answer: TableAnswer) -> bytes:
    result = answer.result
    if answer.error is not None:
        kind, value = ANSWER_ERROR, error_to_list(answer.error)
    elif type(result) is WatchEvent:
        kind, value = ANSWER_WATCH_EVENT, [result.kind, _kv_to_list(result.kv), _kv_to_list(result.prev_kv),
                                           result.revision]
    elif type(result) is WatchCreated:
        kind, value = ANSWER_WATCH_CREATED, [result.revision]
    elif result is WATCH_ENDED:
        kind, value = ANSWER_WATCH_ENDED, []
    else:
        kind, value = ANSWER_RESULT, result_to_list(result)
    return msgpack.packb([answer.call_id, kind, value], use_bin_type=True)


def frame_of(packed: list[bytes]) -> bytes:
    """One frame whose body is the array of the packed calls or answers (ValueError when they
    do not fit in one: FramedConnection then splits them)."""
    header = msgpack.Packer().pack_array_header(len(packed))
    return frame_body(b"".join([header, *packed]))


def _kv_to_list(kv: KeyValue | None) -> list | None:
    return None if kv is None else [kv.key, kv.value, kv.create_revision, kv.mod_revision, kv.version,
                                    kv.expire_at_ms, kv.is_number]


def result_to_list(result: object) -> list:
    match result:
        case PutResult():
            return [1, result.revision, _kv_to_list(result.prev_kv)]
        case DeleteResult():
            return [2, result.revision, result.deleted, [_kv_to_list(kv) for kv in result.prev_kvs]]
        case RangeResult():
            return [3, result.revision, [_kv_to_list(kv) for kv in result.kvs], result.count, result.more]
        case IncrementResult():
            return [4, result.revision, result.total]
        case TxnResult():
            return [5, result.revision, result.succeeded, [result_to_list(r) for r in result.results]]
        case OpRefused():
            return [6, result.reason]
    raise TypeError(f"not a table result: {result!r:.80}")


def error_to_list(error: BaseException) -> list:
    """[name of the nearest class in ERROR_CLASSES, message, *what that class carries]; an error
    of no such class (a bug on the owner) travels as a RuntimeError naming its class."""
    cls = next((c for c in type(error).__mro__ if ERROR_CLASSES.get(c.__name__) is c), None)
    if cls is NotOwner:
        return [NotOwner.__name__, str(error), error.owner, error.what]
    if cls is None:
        return [RuntimeError.__name__, f"{type(error).__name__}: {error}"]
    return [cls.__name__, str(error)]


# -- decoding (peer input: never trusted) --------------------------------------------------------

def decode_calls(body) -> list[TableCall]:
    """A frame body of calls; MalformedFrame for anything else."""
    calls = []
    for item in _array_of(body):
        if not (isinstance(item, list) and len(item) == 5):
            raise MalformedFrame("a table call is not a list of 5")
        call_id, namespace, stream, pkey, operation = item
        if not (_is_call_id(call_id) and type(namespace) is str and type(stream) is str and type(pkey) is bytes
                and isinstance(operation, list)):
            raise MalformedFrame("a table call's fields have the wrong types")
        calls.append(TableCall(call_id, namespace, stream, pkey, _checked(operation_from_list, operation)))
    return calls


def operation_from_list(items: list):
    """The inverse of _operation_to_list (input it cannot read raises KeyError, TypeError, ValueError)."""
    if items and items[0] == "watch":
        _, lkey, lkey_end, start_revision = items
        if not (type(lkey) is bytes and (lkey_end is None or type(lkey_end) is bytes)
                and type(start_revision) is int and start_revision >= 0):
            raise TypeError("a watch's fields have the wrong types")
        return WatchOperation(lkey, lkey_end, start_revision)
    if items == ["cancel"]:
        return CANCEL_WATCH
    if items and items[0] == "auth":
        _, secret = items
        if type(secret) is not bytes:
            raise TypeError("a secret is not bytes")
        return PeerAuth(secret)
    return op_from_list(items)


def decode_answers(body) -> list[TableAnswer]:
    """A frame body of answers; MalformedFrame for anything else."""
    answers = []
    for item in _array_of(body):
        if not (isinstance(item, list) and len(item) == 3 and _is_call_id(item[0])
                and item[1] in _ANSWER_KINDS and isinstance(item[2], list)):
            raise MalformedFrame("a table answer is not [call id, kind, list]")
        call_id, kind, value = item
        if kind == ANSWER_ERROR:
            answers.append(TableAnswer(call_id, error=_checked(error_from_list, value)))
        elif kind == ANSWER_RESULT:
            answers.append(TableAnswer(call_id, result=_checked(result_from_list, value)))
        else:
            answers.append(TableAnswer(call_id, result=_checked(_watch_answer_from_list(kind), value)))
    return answers


def _watch_answer_from_list(kind: int):
    def watch_answer_from_list(items: list):
        if kind == ANSWER_WATCH_CREATED:
            (revision,) = items
            return WatchCreated(_int(revision))
        if kind == ANSWER_WATCH_ENDED:
            if items:
                raise ValueError("a watch's end carries nothing")
            return WATCH_ENDED
        event_kind, kv, prev_kv, revision = items
        if event_kind not in ("put", "delete") or kv is None:
            raise ValueError(f"not a watch event: {event_kind!r:.20}")
        return WatchEvent(event_kind, _kv_from_list(kv), _kv_from_list(prev_kv), _int(revision))
    return watch_answer_from_list


def _array_of(body) -> list:
    try:
        items = msgpack.unpackb(body, raw=False, strict_map_key=True, max_array_len=MESSAGES_PER_FRAME_MAX)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise MalformedFrame(f"frame body is not msgpack: {exc}") from None
    if not isinstance(items, list):
        raise MalformedFrame("frame body is not an array")
    return items


def _is_call_id(value: object) -> bool:
    return type(value) is int and 0 <= value <= _CALL_ID_MAX


def _checked(decode, value: list):
    """decode(value), any failure of which is the peer's: MalformedFrame."""
    try:
        return decode(value)
    except (KeyError, TypeError, ValueError, IndexError, RecursionError) as exc:
        raise MalformedFrame(f"unreadable {decode.__name__.removesuffix('_from_list')}: {exc!r:.200}") from None


def _kv_from_list(items: list | None) -> KeyValue | None:
    if items is None:
        return None
    key, value, create_revision, mod_revision, version, expire_at_ms, is_number = items
    if not (type(key) is bytes and type(value) is bytes and type(is_number) is bool
            and all(type(n) is int for n in (create_revision, mod_revision, version, expire_at_ms))):
        raise TypeError("a key-value's fields have the wrong types")
    return KeyValue(key, value, create_revision, mod_revision, version, expire_at_ms, is_number)


def result_from_list(items: list, *, in_txn: bool = False) -> object:
    kind, *fields = items
    match kind:
        case 1:
            revision, prev_kv = fields
            return PutResult(_int(revision), _kv_from_list(prev_kv))
        case 2:
            revision, deleted, prev_kvs = fields
            return DeleteResult(_int(revision), _int(deleted), tuple(_kv_from_list(kv) for kv in prev_kvs))
        case 3:
            revision, kvs, count, more = fields
            return RangeResult(_int(revision), tuple(_kv_from_list(kv) for kv in kvs), _int(count), bool(more))
        case 4:
            revision, total = fields
            return IncrementResult(_int(revision), None if total is None else _int(total))
        case 5 if not in_txn:           # a txn's results are those of its operations: no txn
            revision, succeeded, results = fields
            return TxnResult(_int(revision), bool(succeeded),
                             tuple(result_from_list(r, in_txn=True) for r in results))
        case 6 if in_txn:
            (reason,) = fields
            if type(reason) is not str:
                raise TypeError("a refusal's reason is not a string")
            return OpRefused(reason)
    raise ValueError(f"unknown result kind {kind!r:.20}")


def _int(value: object) -> int:
    if type(value) is not int:
        raise TypeError(f"{value!r:.20} is not an int")
    return value


def error_from_list(items: list) -> BaseException:
    """The error the owner raised, as the same class with the same message (an unknown class,
    from a newer peer, as a RuntimeError naming it)."""
    name, message, *extra = items
    if type(name) is not str or type(message) is not str:
        raise TypeError("an error's name and message are not strings")
    cls = ERROR_CLASSES.get(name)
    if cls is NotOwner:
        owner, what = extra
        if type(owner) is not str or type(what) is not str:
            raise TypeError("NotOwner's owner and range are not strings")
        return NotOwner(owner, what)
    if cls is None:
        return RuntimeError(f"{name}: {message}")
    return cls(message)
