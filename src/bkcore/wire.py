"""Messages between clients and bookies, their msgpack encoding, and length+crc32c framing.

This module is the only place that knows how bytes on a connection map to messages. A frame is

    u32 length (big endian, of everything after it) | u32 crc32c (of the body) | body

and the body is a msgpack array of messages, each encoded as [tag, field, field, ...]. One frame
carries many messages: Python pays per call, not per byte, so batching happens here.

Decoding never trusts the peer: wrong types, unknown tags, bad checksums and oversized frames
raise `MalformedFrame`; callers count it and answer with an error rather than crash.
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass
from typing import ClassVar

import crc32c
import msgpack

from bkcore.errors import Code

PROTOCOL_VERSION = 1

# Entry id that asks a bookie for the last entry it holds of a ledger (BookKeeper's
# LAST_ADD_CONFIRMED read used by recovery to learn the LAC).
LAST_ENTRY_ID = -1
# "No entry": the LAC of an empty ledger, the last entry id of an empty closed ledger.
INVALID_ENTRY_ID = -1

FRAME_HEADER = struct.Struct(">II")
FRAME_SIZE_MAX = 8 * 1024 * 1024
# The most entry bytes a bookie puts in one ReadBatchResponse, whatever size_max asks: the
# answer then fits a frame with room to spare (its first entry is sent whatever its size, and
# entries are smaller than a frame).
READ_BATCH_SIZE_MAX = FRAME_SIZE_MAX // 2
MESSAGES_PER_FRAME_MAX = 100_000
# A FrameDecoder's buffer holds this many receives of the size asked for (or one whole frame).
RECEIVE_ROOM_FACTOR = 4


class MalformedFrame(Exception):
    """Bytes from a peer that are not a valid frame or message."""


def store_fields_directly(cls: type) -> type:
    """Give a frozen, slotted dataclass an __init__ that stores each field through its slot
    descriptor. Same parameters, defaults and result as the generated one, which goes through
    object.__setattr__ by name for every field (the price of frozen) and makes building a
    message cost about twice as much. Use it under @dataclass; fields need plain defaults
    (no default_factory). A __post_init__ runs last, as in the generated __init__."""
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen and "__slots__" in cls.__dict__
    namespace: dict[str, object] = {}
    parameters = []
    stores = []
    for field in dataclasses.fields(cls):
        assert field.init and not field.kw_only and field.default_factory is dataclasses.MISSING, field.name
        if field.default is dataclasses.MISSING:
            parameters.append(field.name)
        else:
            namespace[f"_default_{field.name}"] = field.default
            parameters.append(f"{field.name}=_default_{field.name}")
        namespace[f"_store_{field.name}"] = cls.__dict__[field.name].__set__
        stores.append(f"    _store_{field.name}(self, {field.name})\n")
    if hasattr(cls, "__post_init__"):
        stores.append("    self.__post_init__()\n")
    exec(f"def __init__(self, {', '.join(parameters)}):\n{''.join(stores) or '    pass'}\n", namespace)
    init = namespace["__init__"]
    init.__annotations__ = dict(cls.__init__.__annotations__)
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    cls.__init__ = init
    return cls


@store_fields_directly
@dataclass(frozen=True, slots=True)
class AddRequest:
    """Store one entry. `body` is the packed entry (header, digest, payload; see digest.py)."""

    TAG: ClassVar[int] = 1
    request_id: int
    ledger_id: int
    entry_id: int
    master_key: bytes
    body: bytes
    is_recovery: bool = False
    is_deferred_sync: bool = False


@store_fields_directly
@dataclass(frozen=True, slots=True)
class AddResponse:
    TAG: ClassVar[int] = 2
    request_id: int
    code: int
    ledger_id: int
    entry_id: int


@store_fields_directly
@dataclass(frozen=True, slots=True)
class ReadRequest:
    """Read one entry, or the last entry held when `entry_id` is LAST_ENTRY_ID.

    `is_fencing` fences the ledger first (needs the master key), as every recovery read does.
    A long poll (`long_poll_timeout_ns` > 0) waits at the bookie until it knows a LAC greater
    than `previous_lac`, or until the timeout, then answers the read of `entry_id`.
    """

    TAG: ClassVar[int] = 3
    request_id: int
    ledger_id: int
    entry_id: int
    master_key: bytes = b""
    is_fencing: bool = False
    previous_lac: int = INVALID_ENTRY_ID
    long_poll_timeout_ns: int = 0


@store_fields_directly
@dataclass(frozen=True, slots=True)
class ReadResponse:
    """`body` is the packed entry; `lac` is the highest LAC the bookie knows for the ledger."""

    TAG: ClassVar[int] = 4
    request_id: int
    code: int
    ledger_id: int
    entry_id: int
    body: bytes = b""
    lac: int = INVALID_ENTRY_ID


@store_fields_directly
@dataclass(frozen=True, slots=True)
class WriteLacRequest:
    """Explicit LAC from an idle writer; `body` is the LAC packed with its digest."""

    TAG: ClassVar[int] = 5
    request_id: int
    ledger_id: int
    master_key: bytes
    lac: int
    body: bytes


@store_fields_directly
@dataclass(frozen=True, slots=True)
class WriteLacResponse:
    TAG: ClassVar[int] = 6
    request_id: int
    code: int
    ledger_id: int


@store_fields_directly
@dataclass(frozen=True, slots=True)
class ReadLacRequest:
    """What a bookie knows of a ledger's LAC: its explicit LAC and its last entry, as written
    (the reader checks both digests and takes the larger)."""

    TAG: ClassVar[int] = 7
    request_id: int
    ledger_id: int


@store_fields_directly
@dataclass(frozen=True, slots=True)
class ReadLacResponse:
    """`lac_body` is the explicit LAC as written (packed, digested) or empty; `last_body` is the
    last entry held, or empty. The client takes the larger LAC of the two after checking digests."""

    TAG: ClassVar[int] = 8
    request_id: int
    code: int
    ledger_id: int
    lac_body: bytes = b""
    last_body: bytes = b""


@store_fields_directly
@dataclass(frozen=True, slots=True)
class ForceLedgerRequest:
    """Make every entry of a deferred-sync ledger received so far durable."""

    TAG: ClassVar[int] = 9
    request_id: int
    ledger_id: int
    master_key: bytes


@store_fields_directly
@dataclass(frozen=True, slots=True)
class ForceLedgerResponse:
    TAG: ClassVar[int] = 10
    request_id: int
    code: int
    ledger_id: int


@store_fields_directly
@dataclass(frozen=True, slots=True)
class ErrorResponse:
    """Answer to a frame that could not be decoded; the connection is closed after it."""

    TAG: ClassVar[int] = 11
    code: int
    reason: str


@store_fields_directly
@dataclass(frozen=True, slots=True)
class AddBatchRequest:
    """Store consecutive entries first_entry_id, first_entry_id + 1, ... of one ledger with the
    same key and flags: what a client sends when many adds for one bookie are pending. The
    bookie journals them as one record and answers once, for all of them (one code)."""

    TAG: ClassVar[int] = 12
    request_id: int
    ledger_id: int
    first_entry_id: int
    master_key: bytes
    bodies: list
    is_recovery: bool = False
    is_deferred_sync: bool = False


@store_fields_directly
@dataclass(frozen=True, slots=True)
class AddBatchResponse:
    TAG: ClassVar[int] = 13
    request_id: int
    code: int
    ledger_id: int
    first_entry_id: int
    count: int


@store_fields_directly
@dataclass(frozen=True, slots=True)
class AuthRequest:
    """The first message on a connection to a bookie that requires a shared secret."""

    TAG: ClassVar[int] = 14
    request_id: int
    secret: bytes


@store_fields_directly
@dataclass(frozen=True, slots=True)
class AuthResponse:
    TAG: ClassVar[int] = 15
    request_id: int
    code: int


@store_fields_directly
@dataclass(frozen=True, slots=True)
class BookieInfoRequest:
    """What a bookie says about itself (BookKeeper's GetBookieInfo): disk space and state.
    Answered by the bookie's driver, which knows its disks; the core never sees it."""

    TAG: ClassVar[int] = 16
    request_id: int


@store_fields_directly
@dataclass(frozen=True, slots=True)
class BookieInfoResponse:
    TAG: ClassVar[int] = 17
    request_id: int
    code: int
    free_disk_space: int = 0
    total_disk_space: int = 0
    is_readonly: bool = False
    ledger_count: int = 0


@store_fields_directly
@dataclass(frozen=True, slots=True)
class ReadBatchRequest:
    """Read consecutive entries of one ledger in one round trip (BookKeeper's batch read, BP-62).

    The bookie answers with the entries it holds from `first_entry_id` on, in order, stopping
    after `count_max` entries, before the first entry it does not hold, or before the bodies
    would pass `size_max` bytes (the first entry is sent whatever its size). Only useful for a
    ledger whose bookies each hold every entry (E == Qw): with striping, a bookie holds only
    some entries of any range.
    """

    TAG: ClassVar[int] = 18
    request_id: int
    ledger_id: int
    first_entry_id: int
    count_max: int
    size_max: int


@store_fields_directly
@dataclass(frozen=True, slots=True)
class ReadBatchResponse:
    """`bodies` are the packed entries first_entry_id, first_entry_id + 1, ... (none unless
    `code` is OK); `lac` is the highest LAC the bookie knows for the ledger."""

    TAG: ClassVar[int] = 19
    LIST_MAY_BE_EMPTY: ClassVar[bool] = True
    request_id: int
    code: int
    ledger_id: int
    first_entry_id: int
    lac: int
    bodies: list


Message = (
    AddRequest | AddResponse | ReadRequest | ReadResponse | WriteLacRequest | WriteLacResponse
    | ReadLacRequest | ReadLacResponse | ForceLedgerRequest | ForceLedgerResponse | ErrorResponse
    | AddBatchRequest | AddBatchResponse | AuthRequest | AuthResponse | BookieInfoRequest | BookieInfoResponse
    | ReadBatchRequest | ReadBatchResponse
)

_CLASSES = (
    AddRequest, AddResponse, ReadRequest, ReadResponse, WriteLacRequest, WriteLacResponse,
    ReadLacRequest, ReadLacResponse, ForceLedgerRequest, ForceLedgerResponse, ErrorResponse,
    AddBatchRequest, AddBatchResponse, AuthRequest, AuthResponse, BookieInfoRequest, BookieInfoResponse,
    ReadBatchRequest, ReadBatchResponse,
)
# A list field is a list of bytes (the bodies of a batch): 1..BATCH_ENTRY_COUNT_MAX of them, or
# 0.. when the class says LIST_MAY_BE_EMPTY (an answer that failed carries none).
_TYPE_BY_NAME = {"int": int, "bytes": bytes, "bool": bool, "str": str, "list": list}
BATCH_ENTRY_COUNT_MAX = 10_000
# tag -> (class, tuple of (field name, python type), number of required fields)
_SCHEMA: dict[int, tuple[type, tuple[tuple[str, type], ...], int]] = {}
for _cls in _CLASSES:
    _fields = dataclasses.fields(_cls)
    _SCHEMA[_cls.TAG] = (
        _cls,
        tuple((f.name, _TYPE_BY_NAME[str(f.type)]) for f in _fields),
        sum(1 for f in _fields if f.default is dataclasses.MISSING),
    )

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_BYTES_ONLY = frozenset({bytes})


def message_to_list(message: Message) -> list:
    return [message.TAG, *(getattr(message, name) for name, _ in _SCHEMA[message.TAG][1])]


def message_from_list(item: object) -> Message:
    """Validate and build a message from its decoded msgpack form."""
    if not isinstance(item, list) or not item or type(item[0]) is not int:
        raise MalformedFrame("message is not a tagged array")
    schema = _SCHEMA.get(item[0])
    if schema is None:
        raise MalformedFrame(f"unknown message tag {item[0]}")
    cls, fields, required_count = schema
    values = item[1:]
    if not required_count <= len(values) <= len(fields):
        raise MalformedFrame(f"{cls.__name__}: {len(values)} fields, expected {len(fields)}")
    for (name, expected), value in zip(fields, values):
        # bool is a subclass of int: compare exact types so True is never an entry id.
        if type(value) is not expected:
            raise MalformedFrame(f"{cls.__name__}.{name}: {type(value).__name__}, expected {expected.__name__}")
        if expected is int and not _INT64_MIN <= value <= _INT64_MAX:
            raise MalformedFrame(f"{cls.__name__}.{name}: out of range")
        if expected is list and (not (0 if getattr(cls, "LIST_MAY_BE_EMPTY", False) else 1)
                                 <= len(value) <= BATCH_ENTRY_COUNT_MAX
                                 or not _BYTES_ONLY.issuperset(map(type, value))):
            raise MalformedFrame(f"{cls.__name__}.{name}: not up to {BATCH_ENTRY_COUNT_MAX} byte strings")
    if "code" in cls.__slots__:
        code = values[[n for n, _ in fields].index("code")]
        if code not in Code._value2member_map_:
            raise MalformedFrame(f"{cls.__name__}: unknown code {code}")
    return cls(*values)


def encode_messages(messages: list[Message]) -> bytes:
    return msgpack.packb([message_to_list(m) for m in messages], use_bin_type=True)


def decode_messages(body: bytes) -> list[Message]:
    try:
        items = msgpack.unpackb(body, raw=False, use_list=True, strict_map_key=True,
                                max_array_len=MESSAGES_PER_FRAME_MAX)
    except (ValueError, msgpack.UnpackException, TypeError) as exc:
        raise MalformedFrame(f"body is not msgpack: {exc}") from None
    if not isinstance(items, list):
        raise MalformedFrame("frame body is not an array")
    return [message_from_list(item) for item in items]


def encode_frame(messages: list[Message]) -> bytes:
    # The same bytes as frame_body(encode_messages(messages)), with one copy of the body fewer:
    # the frame is built straight from the packer's buffer, not from a bytes copy of it (a
    # batch of adds is a frame of hundreds of KiB).
    packer = msgpack.Packer(use_bin_type=True, autoreset=False)
    packer.pack([message_to_list(m) for m in messages])
    body = packer.getbuffer()
    try:
        return frame_body(body)
    finally:
        body.release()


def frame_body(body: bytes | memoryview) -> bytes:
    """length | crc32c | body: the framing every protocol here shares."""
    if len(body) + 4 > FRAME_SIZE_MAX:
        raise ValueError(f"frame of {len(body)} bytes exceeds FRAME_SIZE_MAX {FRAME_SIZE_MAX}; send fewer messages per frame")
    return FRAME_HEADER.pack(len(body) + 4, crc32c.crc32c(body)) + body


class FrameDecoder:
    """Incremental frame parser for a byte stream: bytes in, then next_frame() until None.

    Bytes come in by feed(data), or are received straight into the decoder's own buffer:
    receive_buffer() gives the free room at its end (a memoryview, e.g. for socket.recv_into)
    and received(count) says how much of it was filled. That spares a copy of every byte, and
    a frame is decoded where it was received.

    The buffer holds what was received and not yet decoded, and room for RECEIVE_ROOM_FACTOR
    receives or the rest of one frame, whichever is more: at most about frame_size_max plus a
    receive (a length above frame_size_max raises MalformedFrame at once, before the body
    arrives). It is never resized while a memoryview of it may be alive: when
    the room runs out, the unfinished frame moves to the front (once per buffer's worth), or
    to a new, larger buffer when a frame needs more room than the buffer has.
    """

    def __init__(self, *, frame_size_max: int = FRAME_SIZE_MAX, decode=None) -> None:
        self._frame_size_max = frame_size_max
        # Invariant: _buffer[_start:_end] are the bytes received and not yet decoded;
        # _buffer[_end:] is room for more.
        self._buffer = bytearray()
        self._start = 0
        self._end = 0
        # What a frame's body becomes: bookie messages by default; other protocols that share
        # this framing (raft-lite) pass their own decoder.
        self._decode = decode or decode_messages

    def feed(self, data: bytes) -> None:
        size = len(data)
        room = self.receive_buffer(size)
        room[:size] = data
        room.release()
        self.received(size)

    def receive_buffer(self, size_min: int) -> memoryview:
        """Room for at least size_min more bytes, and for the rest of the frame whose header
        has arrived (so a large frame is received into place, not copied along in pieces)."""
        pending = self._end - self._start
        needed = max(size_min, self._frame_size() - pending)
        if len(self._buffer) - self._end < needed:
            self._make_room(pending, needed, size_min)
        return memoryview(self._buffer)[self._end:]

    def _frame_size(self) -> int:
        """Bytes of the frame at _start, header included, once its header is in (else 0).
        Lengths above the limit count as 0 here: next_frame() refuses them."""
        if self._end - self._start < FRAME_HEADER.size:
            return 0
        length = FRAME_HEADER.unpack_from(self._buffer, self._start)[0]
        return 4 + length if length <= self._frame_size_max else 0

    def _make_room(self, pending: int, needed: int, size_min: int) -> None:
        if pending + needed <= len(self._buffer):
            # Same length, so no resize: a memoryview a caller still holds stays valid.
            self._buffer[:pending] = self._buffer[self._start:self._end]
        else:
            # Room for several receives: the unfinished frame moves to the front once per
            # buffer's worth, not after every receive.
            buffer = bytearray(max(pending + needed, RECEIVE_ROOM_FACTOR * size_min))
            buffer[:pending] = memoryview(self._buffer)[self._start:self._end]
            self._buffer = buffer
        self._start, self._end = 0, pending

    def received(self, count: int) -> None:
        """`count` bytes were written at the start of the last receive_buffer()."""
        assert 0 <= count <= len(self._buffer) - self._end
        self._end += count

    def next_frame(self) -> list[Message] | None:
        start = self._start
        if self._end - start < FRAME_HEADER.size:
            return None
        length, checksum = FRAME_HEADER.unpack_from(self._buffer, start)
        if length < 4 or length > self._frame_size_max:
            raise MalformedFrame(f"frame length {length} outside 4..{self._frame_size_max}")
        end = start + 4 + length
        if self._end < end:
            return None
        # Checked and decoded in place (a frame can be megabytes: no copy of it is made).
        with memoryview(self._buffer) as view:
            body = view[start + FRAME_HEADER.size:end]
            try:
                if crc32c.crc32c(body) != checksum:
                    raise MalformedFrame("frame checksum mismatch")
                return self._decode(body)
            finally:
                body.release()
                if end == self._end:
                    self._start = self._end = 0     # all decoded: the room starts at the front
                else:
                    self._start = end
