"""The state machine of one table range: commands in, results and watch events out.

The state lives in a KvIndex, an ordered byte map written atomically once per command: an
in-memory one here (tests, the simulator, checkpoints), an lmdb one in transports. Three kinds
of index keys:

    b"d" + key                      msgpack [value, create_revision, mod_revision, version, expire_at_ms,
                                             is_number]
    b"e" + expire_at_ms (8 bytes) + key     an expiry to carry out (TTL keys only)
    b"m" + name                     msgpack metadata: the range's revision, the journal position applied

Applying is deterministic: the only clock is the command's journaled `now_ms`. Before a command
runs, every key whose TTL passed at its now_ms is deleted (each a delete event), so replaying
the journal gives the same state and the same events anywhere. A command that fails
(TableError) changes nothing: writes are gathered in an overlay and land only at the end.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Iterable, Iterator

import msgpack
from sortedcontainers import SortedDict

from bkcore.table.commands import (
    COMMAND_SIZE_MAX, Command, Compare, CompareResult, CompareTarget, DeleteRange, DeleteResult, ExpireKeys, IllegalOp,
    Increment, IncrementResult, KeyNotFound, KeyValue, OpRefused, Put, PutResult, RangeRead, RangeResult, Stamped,
    TableError, Txn, TxnResult, key_name,
)

DATA, EXPIRY, META = b"d", b"e", b"m"
EXPIRY_END = b"f"                  # every expiry key is below it
NO_EXPIRY_MS = 2**64               # the expiry floor of a range without expiries
COUNTER_SIZE = 8
KEY_SIZE_MAX = COMMAND_SIZE_MAX      # no key is larger than the command that put it


@dataclass(frozen=True, slots=True)
class WatchEvent:
    kind: str                        # "put" or "delete"
    kv: KeyValue                     # for a delete: the key, empty value, mod_revision of the delete
    prev_kv: KeyValue | None
    revision: int


class KvIndex(abc.ABC):
    """An ordered map of bytes; `write` applies a batch atomically (None deletes)."""

    @abc.abstractmethod
    def get(self, key: bytes) -> bytes | None: ...

    @abc.abstractmethod
    def scan(self, start: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Pairs with start <= key < end, ascending."""

    @abc.abstractmethod
    def write(self, changes: dict[bytes, bytes | None]) -> None: ...

    @abc.abstractmethod
    def items(self) -> Iterable[tuple[bytes, bytes]]:
        """Every pair in key order, as the index is now (later writes do not show)."""

    @abc.abstractmethod
    def replace_all(self, items: Iterable[tuple[bytes, bytes]]) -> None:
        """Make the index hold exactly `items` (a checkpoint being loaded)."""

    def batch(self) -> contextlib.AbstractContextManager:
        """`with index.batch():` the writes of the block land together, at its end, as one
        atomic write (snapshots show all of them or none); reads in the block see them. Never
        held across a wait: an index may share its writer with other indexes (lmdb's one write
        transaction per environment). Here (no snapshots): each write lands at once."""
        return contextlib.nullcontext()

    def snapshot(self) -> KvIndexSnapshot | None:
        """A read-only view of the index as it is now (whole writes only), which another thread
        may read while writes go on; None when this kind of index has none."""
        return None


class KvIndexSnapshot(KvIndex):
    """What KvIndex.snapshot() returns: `with index.snapshot() as view:` reads, then lets go."""

    def write(self, changes: dict[bytes, bytes | None]) -> None:
        raise TypeError("a snapshot of an index is read-only")

    def replace_all(self, items: Iterable[tuple[bytes, bytes]]) -> None:
        raise TypeError("a snapshot of an index is read-only")

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> KvIndexSnapshot:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class MemoryKvIndex(KvIndex):
    def __init__(self, items: dict[bytes, bytes] | None = None) -> None:
        self._map = SortedDict(items or {})

    def get(self, key: bytes) -> bytes | None:
        return self._map.get(key)

    def scan(self, start: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        for key in list(self._map.irange(start, end, inclusive=(True, False))):
            yield key, self._map[key]

    def write(self, changes: dict[bytes, bytes | None]) -> None:
        for key, value in changes.items():
            if value is None:
                self._map.pop(key, None)
            else:
                self._map[key] = value

    def items(self) -> list[tuple[bytes, bytes]]:
        return list(self._map.items())

    def replace_all(self, items: Iterable[tuple[bytes, bytes]]) -> None:
        self._map = SortedDict(items)


class RangeState:
    def __init__(self, index: KvIndex) -> None:
        self.index = index
        meta = index.get(META + b"state")
        self.revision, self.applied_position = msgpack.unpackb(meta) if meta else (0, None)
        # No expiry in the index is earlier than this (None: not known yet). A command applied
        # before it looks for no expiries, which saves a scan per command; expiries a command
        # adds lower it, and a scan sets it again to the earliest expiry still to come.
        self.expiry_floor_ms: int | None = None

    # -- reads --------------------------------------------------------------------------------

    def read(self, op: RangeRead, *, now_ms: int) -> RangeResult:
        return _Batch(self, now_ms).range(op)

    def get(self, key: bytes, *, now_ms: int) -> KeyValue | None:
        return _Batch(self, now_ms).get(key)

    # -- writes -------------------------------------------------------------------------------

    def apply(self, stamped: Stamped, *, position=None) -> tuple[object, list[WatchEvent]]:
        """Apply one journaled command (at journal `position`, remembered with the state).
        Returns (result, events); a TableError leaves the state untouched except for expiries."""
        batch = _Batch(self, stamped.now_ms)
        batch.expire_due()
        try:
            result = batch.run(stamped.command)
        except TableError as error:
            batch.discard_command()
            result = error
        self._commit(batch, position)
        return result, batch.events

    def _commit(self, batch: _Batch, position) -> None:
        if batch.wrote:
            self.revision = batch.revision
        if batch.expiry_floor_ms is not None:
            self.expiry_floor_ms = batch.expiry_floor_ms
        self.applied_position = position if position is not None else self.applied_position
        batch.changes[META + b"state"] = msgpack.packb([self.revision, self.applied_position])
        self.index.write(batch.changes)


class _Batch:
    """The writes of one command, seen by its own later reads, applied at the end."""

    def __init__(self, state: RangeState, now_ms: int) -> None:
        self.state = state
        self.now_ms = now_ms
        self.revision = state.revision + 1     # the revision this command's writes get
        self.changes: dict[bytes, bytes | None] = {}
        self.events: list[WatchEvent] = []
        self.wrote = False
        self.expiry_floor_ms = state.expiry_floor_ms    # the state's, once this command is applied
        self._mark = (0, 0)                    # changes/events before the command proper
        # What this batch read of the index (which does not change while it runs): a put reads
        # its key's record twice, for the previous value and for an expiry to drop.
        self._index_reads: dict[bytes, bytes | None] = {}

    # -- lookups ------------------------------------------------------------------------------

    def _raw(self, key: bytes) -> bytes | None:
        if key in self.changes:
            return self.changes[key]
        reads = self._index_reads
        if key not in reads:
            reads[key] = self.state.index.get(key)
        return reads[key]

    def get(self, key: bytes, *, include_expired: bool = False) -> KeyValue | None:
        raw = self._raw(DATA + key)
        if raw is None:
            return None
        kv = KeyValue(key, *msgpack.unpackb(raw))
        if kv.expire_at_ms and kv.expire_at_ms <= self.now_ms and not include_expired:
            return None
        return kv

    def _keys_in(self, start: bytes, end: bytes | None) -> list[bytes]:
        if end is None:
            return [start]
        keys = {k[1:] for k, _ in self.state.index.scan(DATA + start, DATA + end)}
        for key, value in self.changes.items():
            if key[:1] == DATA and start <= key[1:] < end:
                if value is None:
                    keys.discard(key[1:])
                else:
                    keys.add(key[1:])
        return sorted(keys)

    def range(self, op: RangeRead) -> RangeResult:
        kvs = [kv for kv in map(self.get, self._keys_in(op.key, op.range_end)) if kv is not None and _passes(kv, op)]
        count = len(kvs)
        more = bool(op.limit) and count > op.limit
        if op.limit:
            kvs = kvs[:op.limit]
        if op.count_only:
            kvs = []
        elif op.keys_only:
            kvs = [dataclasses.replace(kv, value=b"") for kv in kvs]
        return RangeResult(self.state.revision, tuple(kvs), count, more)

    # -- commands -----------------------------------------------------------------------------

    def run(self, command: Command):
        self._mark = (len(self.changes), len(self.events))
        if isinstance(command, Txn):
            return self._txn(command)
        if isinstance(command, ExpireKeys):
            return None
        return self._operation(command)

    def discard_command(self) -> None:
        """Forget the writes of the failed command (expiries before it stay)."""
        kept, events = self._mark
        self.changes = dict(list(self.changes.items())[:kept])
        del self.events[events:]
        self.wrote = bool(self.events)

    def _operation(self, op):
        if isinstance(op, Put):
            return self._put(op)
        if isinstance(op, DeleteRange):
            return self._delete(op)
        if isinstance(op, Increment):
            return self._increment(op)
        if isinstance(op, RangeRead):
            return self.range(op)
        raise TableError(f"{type(op).__name__} is not a table operation")

    def _put(self, op: Put) -> PutResult:
        _check_key(op.key)
        if not isinstance(op.value, bytes):
            raise TableError(f"the value put to key {key_name(op.key)} is bytes, not {type(op.value).__name__}")
        if type(op.ttl_ms) is not int or op.ttl_ms < 0:
            raise TableError(f"ttl_ms must be a non-negative int, not {op.ttl_ms!r}")
        previous = self.get(op.key)
        if previous is not None and previous.is_number:
            # MVCCStoreImpl.put: a record whose value type is not BYTES -> Code.ILLEGAL_OP.
            raise IllegalOp(f"key {key_name(op.key)} holds a number (made by increments); a put may not replace "
                            f"it with bytes: delete the key first")
        self._store(op.key, op.value, previous, expire_at_ms=self.now_ms + op.ttl_ms if op.ttl_ms else 0,
                    is_number=False)
        return PutResult(self.revision, previous if op.prev_kv else None)

    def _store(self, key: bytes, value: bytes, previous: KeyValue | None, *, expire_at_ms: int,
               is_number: bool) -> KeyValue:
        stale = self.get(key, include_expired=True)
        if stale is not None and stale.expire_at_ms:
            self.changes[_expiry_key(stale.expire_at_ms, key)] = None
        kv = KeyValue(key, value, previous.create_revision if previous else self.revision, self.revision,
                      previous.version + 1 if previous else 1, expire_at_ms, is_number)
        self.changes[DATA + key] = msgpack.packb([kv.value, kv.create_revision, kv.mod_revision, kv.version,
                                                  kv.expire_at_ms, kv.is_number])
        if expire_at_ms:
            self.changes[_expiry_key(expire_at_ms, key)] = b""
            if self.expiry_floor_ms is not None:
                self.expiry_floor_ms = min(self.expiry_floor_ms, expire_at_ms)
        self.events.append(WatchEvent("put", kv, previous, self.revision))
        self.wrote = True
        return kv

    def _delete(self, op: DeleteRange) -> DeleteResult:
        _check_key(op.key)
        gone = [kv for kv in map(self.get, self._keys_in(op.key, op.range_end)) if kv is not None]
        for kv in gone:
            self._remove(kv)
        return DeleteResult(self.revision if gone else self.state.revision, len(gone),
                            tuple(gone) if op.prev_kv else ())

    def _remove(self, kv: KeyValue) -> None:
        self.changes[DATA + kv.key] = None
        if kv.expire_at_ms:
            self.changes[_expiry_key(kv.expire_at_ms, kv.key)] = None
        self.events.append(WatchEvent("delete", KeyValue(kv.key, b"", 0, self.revision, 0), kv, self.revision))
        self.wrote = True

    def _increment(self, op: Increment) -> IncrementResult:
        _check_key(op.key)
        if type(op.amount) is not int:
            raise TableError(f"an increment amount is an int, not {op.amount!r}")
        previous = self.get(op.key)
        if previous is not None and not previous.is_number:
            # MVCCStoreImpl.increment: a record whose value type is not NUMBER -> Code.ILLEGAL_OP.
            raise IllegalOp(f"key {key_name(op.key)} holds bytes, not a number; only a key made by increments "
                            f"may be incremented")
        total = (previous.number if previous else 0) + op.amount
        if not -2**63 <= total < 2**63:
            raise TableError(f"incrementing key {key_name(op.key)} by {op.amount} would overflow its 64-bit "
                             f"number ({previous.number if previous else 0})")
        self._store(op.key, total.to_bytes(COUNTER_SIZE, "big", signed=True), previous,
                    expire_at_ms=previous.expire_at_ms if previous else 0, is_number=True)
        return IncrementResult(self.revision, total if op.get_total else None)

    def _txn(self, txn: Txn) -> TxnResult:
        succeeded = all(self._holds(compare) for compare in txn.compares)
        results = tuple(map(self._txn_operation, txn.success if succeeded else txn.failure))
        return TxnResult(self.revision if self.wrote else self.state.revision, succeeded, results)

    def _txn_operation(self, op):
        """MVCCStoreImpl.processTxn: a put its key's value type refuses answers with its code
        alone; the other operations of the txn go ahead."""
        try:
            return self._operation(op)
        except IllegalOp as error:
            if not isinstance(op, Put):
                raise
            return OpRefused(str(error))

    def _holds(self, compare: Compare) -> bool:
        """MVCCStoreImpl.processCompareOp (see Compare)."""
        _check_key(compare.key)
        kv = self.get(compare.key)
        expected = compare.value
        if compare.target is CompareTarget.VALUE:
            if not isinstance(expected, bytes):
                raise TableError(f"a value comparison of key {key_name(compare.key)} needs bytes")
            if kv is None or not expected:
                # "No value" on one side: only (in)equality with no value can hold.
                is_equal = kv is None and not expected
                return {CompareResult.EQUAL: is_equal, CompareResult.NOT_EQUAL: not is_equal,
                        CompareResult.LESS: False, CompareResult.GREATER: kv is not None}[compare.result]
            actual = kv.value
        else:
            if type(expected) is not int:
                raise TableError(f"a {compare.target.value} comparison of key {key_name(compare.key)} needs an int")
            if kv is None:
                raise KeyNotFound(f"txn compares the {compare.target.value} of key {key_name(compare.key)}, which "
                                  f"does not exist (only a value may be compared with a missing key)")
            actual = {CompareTarget.VERSION: kv.version, CompareTarget.CREATE_REVISION: kv.create_revision,
                      CompareTarget.MOD_REVISION: kv.mod_revision}[compare.target]
        return {CompareResult.EQUAL: actual == expected, CompareResult.NOT_EQUAL: actual != expected,
                CompareResult.LESS: actual < expected, CompareResult.GREATER: actual > expected}[compare.result]

    # -- expiry -------------------------------------------------------------------------------

    def expire_due(self) -> None:
        """Delete every key whose expiry time is at or before now_ms (there is none below the
        expiry floor), and raise the floor to the earliest expiry left."""
        if self.expiry_floor_ms is not None and self.now_ms < self.expiry_floor_ms:
            return
        end = EXPIRY + (self.now_ms + 1).to_bytes(8, "big")
        for expiry_key, _ in list(self.state.index.scan(EXPIRY, end)):
            kv = self.get(expiry_key[9:], include_expired=True)
            if kv is not None and kv.expire_at_ms == int.from_bytes(expiry_key[1:9], "big"):
                self._remove(kv)
            else:
                self.changes[expiry_key] = None
        following = next(iter(self.state.index.scan(end, EXPIRY_END)), None)
        self.expiry_floor_ms = int.from_bytes(following[0][1:9], "big") if following else NO_EXPIRY_MS


def _expiry_key(expire_at_ms: int, key: bytes) -> bytes:
    return EXPIRY + expire_at_ms.to_bytes(8, "big") + key


def _check_key(key: object) -> None:
    if not isinstance(key, bytes) or not key:
        raise TableError(f"a key is bytes, not {key!r:.60}")


def _passes(kv: KeyValue, op: RangeRead) -> bool:
    """MVCCRecord.test: the key's revisions lie within the read's bounds (0: none)."""
    return (kv.mod_revision >= op.min_mod_revision and kv.create_revision >= op.min_create_revision
            and (not op.max_mod_revision or kv.mod_revision <= op.max_mod_revision)
            and (not op.max_create_revision or kv.create_revision <= op.max_create_revision))
