"""Metadata operations as data: what clients and bookies ask of the metastore.

The store is a tree of versioned byte values (ZooKeeper's model): every backend (the in-memory
store of tests and the simulator, raft-lite, ZooKeeper) answers these ops with a MetaResult.
CONNECTION_LOSS means the outcome is unknown: the op may or may not have been applied, and a
conditional write must be re-read and compared before it is retried.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class MetaCode(IntEnum):
    OK = 0
    NO_NODE = 1
    NODE_EXISTS = 2
    BAD_VERSION = 3
    CONNECTION_LOSS = 4
    NOT_EMPTY = 5
    SESSION_EXPIRED = 6


@dataclass(frozen=True, slots=True)
class Get:
    path: str


@dataclass(frozen=True, slots=True)
class Create:
    """Create a node. Sequential creates append a 10-digit counter to the path's last part;
    ephemeral nodes vanish when the creating session ends."""

    path: str
    data: bytes = b""
    is_ephemeral: bool = False
    is_sequential: bool = False


@dataclass(frozen=True, slots=True)
class SetData:
    """Compare-and-set: applies only if the node's version equals `version` (-1: any)."""

    path: str
    data: bytes
    version: int


@dataclass(frozen=True, slots=True)
class Delete:
    path: str
    version: int = -1


@dataclass(frozen=True, slots=True)
class Children:
    path: str


MetaOp = Get | Create | SetData | Delete | Children


@dataclass(frozen=True, slots=True)
class MetaResult:
    code: MetaCode
    data: bytes = b""
    version: int = -1
    children: tuple[str, ...] = ()
    path: str = ""


# -- plain-value forms, for metastore protocols and replicated logs ---------------------------

_OP_KINDS = {Get: 1, Create: 2, SetData: 3, Delete: 4, Children: 5}
_OP_CLASSES = {kind: cls for cls, kind in _OP_KINDS.items()}


def op_to_list(op: MetaOp) -> list:
    return [_OP_KINDS[type(op)], *(getattr(op, name) for name in op.__slots__)]


def op_from_list(value: object) -> MetaOp:
    """Rebuild an op; raises ValueError for anything that is not one."""
    if not isinstance(value, list) or not value or value[0] not in _OP_CLASSES:
        raise ValueError(f"not a metadata op: {value!r:.80}")
    cls = _OP_CLASSES[value[0]]
    try:
        op = cls(*value[1:])
    except TypeError as exc:
        raise ValueError(f"bad {cls.__name__}: {exc}") from None
    if not isinstance(op.path, str) or (hasattr(op, "data") and not isinstance(op.data, bytes)):
        raise ValueError(f"bad {cls.__name__} field types")
    return op


def result_to_list(result: MetaResult) -> list:
    return [int(result.code), result.data, result.version, list(result.children), result.path]


def result_from_list(value: list) -> MetaResult:
    code, data, version, children, path = value
    return MetaResult(MetaCode(code), data, version, tuple(children), path)
