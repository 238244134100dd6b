"""A table txn as plain values (TxnCompare, TxnOp) and the BookKeeper TxnRequest they make:
what `bk table txn` parses from etcdctl's text and StorageClient's TableClient.txn sends.

Compares follow BookKeeper (MVCCStoreImpl.processCompareOp): versions count from 0, comparing
the version or a revision of a missing key refuses the whole txn (KEY_NOT_FOUND), and against a
value b"" means "no value" (`value("k") = ""` holds only for a missing key). A delete asks for
the previous values, so that it counts what it deleted (a blind one counts 0).
"""

from __future__ import annotations

from dataclasses import dataclass

from bookkeeper.proto import kv_rpc_pb2

from bkcore.table.commands import CompareResult, CompareTarget

_TARGETS = {CompareTarget.VALUE: kv_rpc_pb2.Compare.VALUE, CompareTarget.VERSION: kv_rpc_pb2.Compare.VERSION,
            CompareTarget.CREATE_REVISION: kv_rpc_pb2.Compare.CREATE,
            CompareTarget.MOD_REVISION: kv_rpc_pb2.Compare.MOD}
_RESULTS = {CompareResult.EQUAL: kv_rpc_pb2.Compare.EQUAL, CompareResult.NOT_EQUAL: kv_rpc_pb2.Compare.NOT_EQUAL,
            CompareResult.LESS: kv_rpc_pb2.Compare.LESS, CompareResult.GREATER: kv_rpc_pb2.Compare.GREATER}
# The proto field that carries each target's operand.
_OPERAND_FIELDS = {CompareTarget.VALUE: "value", CompareTarget.VERSION: "version",
                   CompareTarget.CREATE_REVISION: "create_revision", CompareTarget.MOD_REVISION: "mod_revision"}


@dataclass(frozen=True, slots=True)
class TxnCompare:
    """The key's `target` compares to `operand` as `result` says: bytes for a value, a number
    (BookKeeper's version from 0, or a revision) otherwise."""

    target: CompareTarget
    key: bytes
    result: CompareResult
    operand: bytes | int


@dataclass(frozen=True, slots=True)
class TxnOp:
    """"put" (key, value), "get" (key) or "del" (key)."""

    kind: str
    key: bytes
    value: bytes = b""


TXN_OP_KINDS = ("put", "get", "del")


def compare_proto(compare: TxnCompare) -> kv_rpc_pb2.Compare:
    return kv_rpc_pb2.Compare(target=_TARGETS[compare.target], result=_RESULTS[compare.result], key=compare.key,
                              **{_OPERAND_FIELDS[compare.target]: compare.operand})


def op_proto(op: TxnOp) -> kv_rpc_pb2.RequestOp:
    if op.kind == "put":
        return kv_rpc_pb2.RequestOp(request_put=kv_rpc_pb2.PutRequest(key=op.key, value=op.value, prev_kv=True))
    if op.kind == "get":
        return kv_rpc_pb2.RequestOp(request_range=kv_rpc_pb2.RangeRequest(key=op.key))
    if op.kind == "del":
        return kv_rpc_pb2.RequestOp(request_delete_range=kv_rpc_pb2.DeleteRangeRequest(key=op.key, prev_kv=True))
    raise ValueError(f"a txn operation is one of {', '.join(TXN_OP_KINDS)}, not {op.kind!r}")


def txn_request(compares: list[TxnCompare], success: list[TxnOp], failure: list[TxnOp],
                header: kv_rpc_pb2.RoutingHeader) -> kv_rpc_pb2.TxnRequest:
    return kv_rpc_pb2.TxnRequest(compare=[compare_proto(c) for c in compares],
                                 success=[op_proto(op) for op in success],
                                 failure=[op_proto(op) for op in failure], header=header)
