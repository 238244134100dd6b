"""Table commands and results as plain values, and their journal encoding.

A table range is a deterministic state machine: its journal (a log stream) holds the mutating
commands in order, each stamped by the range's owner with the time it was accepted (`now_ms`,
which is all TTLs depend on), so replaying the journal rebuilds the same state anywhere.

Keys are bytes. A PTable key is (pkey, lkey): both are folded into one index key with the pkey
length first, so everything of one pkey is contiguous and ordered by lkey; a Table key is a
PTable key with an empty lkey. Ranges (range, delete-range) stay within one pkey.

Each key has a create_revision, a mod_revision and a version (writes since its creation, the
first counting 1); every command that changes something gets the range's next revision (a txn
gets one for all its writes). A key holds bytes or a number (made by increments), never both in
turn; compares follow BookKeeper's MVCCStoreImpl (see Compare). What BookKeeper's protocol shows
differently (versions from 0, inclusive range ends, blind deletes counting 0) is the gRPC
gateway's translation (streamstorage.bk_protocol), not a second set of rules here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import msgpack

COMMAND_FORMAT = 1
# The most bytes one journaled command may take: BookKeeper journals each table command as one
# DistributedLog record, at most LogRecord.MAX_LOGRECORD_SIZE = 1 MiB - 8 KiB. Keys and values
# have no limits of their own beyond fitting in it.
COMMAND_SIZE_MAX = 1024 * 1024 - 8 * 1024


class CompareTarget(Enum):
    VALUE = "value"
    VERSION = "version"
    CREATE_REVISION = "create"
    MOD_REVISION = "mod"


class CompareResult(Enum):
    EQUAL = "="
    NOT_EQUAL = "!="
    LESS = "<"
    GREATER = ">"


@dataclass(frozen=True, slots=True)
class Compare:
    """Holds when the key's `target` compares to `value` as `result` says, by BookKeeper's rules
    (MVCCStoreImpl.processCompareOp). Comparing the version or a revision of a missing key
    refuses the whole txn (KeyNotFound). Against a value, a missing key and an empty expected
    value are both "no value": a missing key is = to no value and != to any bytes, never < or >;
    a present key is > and != no value, never = or <; otherwise bytes compare as bytes."""

    key: bytes
    target: CompareTarget
    result: CompareResult
    value: bytes | int


@dataclass(frozen=True, slots=True)
class Put:
    key: bytes
    value: bytes
    prev_kv: bool = False
    ttl_ms: int = 0              # 0: never expires


@dataclass(frozen=True, slots=True)
class DeleteRange:
    """Delete `key`, or every key in [key, range_end) when range_end is given (folded keys:
    pkey_end(key) reaches the end of the key's pkey)."""

    key: bytes
    range_end: bytes | None = None
    prev_kv: bool = False


@dataclass(frozen=True, slots=True)
class RangeRead:
    key: bytes
    range_end: bytes | None = None
    limit: int = 0               # 0: no limit
    count_only: bool = False
    keys_only: bool = False
    # Only keys whose revisions lie within these bounds (0: no bound), as BookKeeper's
    # RangeOption has them; the limit counts the keys that pass.
    min_mod_revision: int = 0
    max_mod_revision: int = 0
    min_create_revision: int = 0
    max_create_revision: int = 0


@dataclass(frozen=True, slots=True)
class Increment:
    """Add `amount` to the key's 8-byte signed big-endian counter (a missing key counts as 0)."""

    key: bytes
    amount: int
    get_total: bool = True


@dataclass(frozen=True, slots=True)
class Txn:
    compares: tuple[Compare, ...]
    success: tuple[Put | DeleteRange | RangeRead | Increment, ...]
    failure: tuple[Put | DeleteRange | RangeRead | Increment, ...] = ()


@dataclass(frozen=True, slots=True)
class ExpireKeys:
    """Delete every key whose TTL has passed at `now_ms` (the owner journals it now and then)."""


Command = Put | DeleteRange | Increment | Txn | ExpireKeys
Operation = Put | DeleteRange | RangeRead | Increment


@dataclass(frozen=True, slots=True)
class Stamped:
    """A journaled command: what, and when the owner accepted it."""

    command: Command
    now_ms: int


# -- results ------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    expire_at_ms: int = 0        # 0: never
    is_number: bool = False      # a counter (Increment): value is 8 bytes, signed big-endian

    @property
    def number(self) -> int | None:
        return int.from_bytes(self.value, "big", signed=True) if self.is_number else None


@dataclass(frozen=True, slots=True)
class PutResult:
    revision: int
    prev_kv: KeyValue | None = None


@dataclass(frozen=True, slots=True)
class DeleteResult:
    revision: int
    deleted: int
    prev_kvs: tuple[KeyValue, ...] = ()


@dataclass(frozen=True, slots=True)
class RangeResult:
    revision: int
    kvs: tuple[KeyValue, ...]
    count: int
    more: bool = False


@dataclass(frozen=True, slots=True)
class IncrementResult:
    revision: int
    total: int | None = None


@dataclass(frozen=True, slots=True)
class TxnResult:
    revision: int
    succeeded: bool
    results: tuple[object, ...]


class TableError(Exception):
    """A command the table refuses (it changes nothing): a command too large, bad input..."""


class IllegalOp(TableError):
    """A put on a key that holds a number, or an increment of one that holds bytes
    (BookKeeper's Code.ILLEGAL_OP)."""


class KeyNotFound(TableError):
    """A txn compared the version or a revision of a key that does not exist (BookKeeper's
    Code.KEY_NOT_FOUND)."""


@dataclass(frozen=True, slots=True)
class OpRefused:
    """The result of a put in a txn that its key's value type refuses (an IllegalOp, whose
    message `reason` is): BookKeeper answers that put alone with its code and carries out the
    rest of the txn."""

    reason: str


def key_name(key: bytes) -> str:
    """A folded key as its user knows it: the key of a plain table (pkey == lkey), else
    lkey and pkey."""
    if len(key) < 2 or len(key) < 2 + int.from_bytes(key[:2], "big"):
        return repr(key)             # not a folded key (a range used by itself, in tests)
    pkey, lkey = unfold_key(key)
    return repr(lkey) if pkey == lkey else f"{lkey!r} (pkey {pkey!r})"


def describe(command: Command) -> str:
    """What a command is, for a message: its kind and its (first) key."""
    if isinstance(command, Txn):
        keys = [c.key for c in command.compares] + [op.key for op in command.success + command.failure]
        return f"a txn on key {key_name(keys[0])}" if keys else "an empty txn"
    kind = {Put: "a put to", DeleteRange: "a delete of", Increment: "an increment of"}.get(type(command))
    return f"{kind} key {key_name(command.key)}" if kind else type(command).__name__


# -- key folding --------------------------------------------------------------------------------

def fold_key(pkey: bytes, lkey: bytes = b"") -> bytes:
    if len(pkey) > 0xFFFF:
        raise TableError(f"a pkey has at most 65535 bytes, not {len(pkey)}")
    return len(pkey).to_bytes(2, "big") + pkey + lkey


def unfold_key(key: bytes) -> tuple[bytes, bytes]:
    size = int.from_bytes(key[:2], "big")
    return key[2:2 + size], key[2 + size:]


def pkey_end(key: bytes) -> bytes:
    """The first folded key after every key of `key`'s pkey."""
    pkey, _ = unfold_key(key)
    return prefix_end(fold_key(pkey))


def prefix_end(prefix: bytes) -> bytes:
    """The smallest byte string greater than every string starting with `prefix` (for a
    folded pkey and lkey prefix: the end of the keys of that pkey starting with that lkey)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return b"\xff" * (len(prefix) + 1)
    return stripped[:-1] + bytes([stripped[-1] + 1])


# -- journal encoding ---------------------------------------------------------------------------

_KINDS = {Put: 1, DeleteRange: 2, RangeRead: 3, Increment: 4, Txn: 5, ExpireKeys: 6}
_CLASSES = {kind: cls for cls, kind in _KINDS.items()}


def op_to_list(op) -> list:
    """A command or read as msgpack-ready lists (the journal's form; peer calls use it too)."""
    if isinstance(op, Txn):
        return [_KINDS[Txn], [[c.key, c.target.value, c.result.value, c.value] for c in op.compares],
                [op_to_list(o) for o in op.success], [op_to_list(o) for o in op.failure]]
    return [_KINDS[type(op)], *(getattr(op, name) for name in op.__slots__)]


def op_from_list(items: list):
    """The inverse of op_to_list; input it cannot read raises KeyError, TypeError or ValueError."""
    kind, *fields = items
    cls = _CLASSES[kind]
    if cls is Txn:
        compares, success, failure = fields
        return Txn(tuple(Compare(k, CompareTarget(t), CompareResult(r), v) for k, t, r, v in compares),
                   tuple(op_from_list(o) for o in success), tuple(op_from_list(o) for o in failure))
    return cls(*fields)


def encode_stamped(stamped: Stamped) -> bytes:
    return msgpack.packb([COMMAND_FORMAT, stamped.now_ms, op_to_list(stamped.command)], use_bin_type=True)


def decode_stamped(data: bytes) -> Stamped:
    try:
        fmt, now_ms, command = msgpack.unpackb(data, raw=False)
        if fmt != COMMAND_FORMAT:
            raise TableError(f"table command format {fmt} is not {COMMAND_FORMAT}")
        return Stamped(op_from_list(command), now_ms)
    except TableError:
        raise
    except (ValueError, TypeError, KeyError, msgpack.UnpackException) as exc:
        raise TableError(f"unreadable table command: {exc}") from None
