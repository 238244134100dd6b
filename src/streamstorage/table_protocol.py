"""BookKeeper's table protocol (kv_rpc.proto) in terms of our table commands: the commands a
request asks for, and the response fields of their results.

The rules live in bkcore.table (kv.py); what BookKeeper's protocol shows differently from them
is translated here, each with the Java it follows:

- versions count from 0 (MVCCStoreImpl.put/increment: a new record gets version 0); ours count
  the writes since a key was created, from 1. A response shows version - 1, a version compare
  asks for value + 1.
- a range end is inclusive (MVCCStoreImpl.getKeyRecords stops after the end key; TableStoreImpl
  builds the end from the request's lkey): [key, end] is our [key, end + b"\\0").
- a delete without prev_kv is blind (MVCCStoreImpl.delete: `blind = allowBlind && !prevKv`):
  it says 0 keys deleted, whatever it deleted.
- a range's count is the number of keys it returns (MVCCStoreImpl.processRange:
  `result.count(kvs.size())`), and count_only / keys_only are not read (TableStoreImpl.buildRangeOp
  passes neither); neither are a put's expected_version, lease or ignore_* fields (buildPutOp).

Additions, outside the protobuf fields so that no BookKeeper request means anything else here
(request metadata, bkcore.table.watch_rpc): a Range call with TO_PKEY_END_HEADER reads from its
key to the end of the pkey (BookKeeper has no such end; `bk table range` uses it to list a
pkey); a Range or Delete call with PREFIX_HEADER covers the keys of its pkey starting with its
key (`--prefix`); a Put with PUT_TTL_MS_HEADER expires its key after that many milliseconds
(`bk table put --ttl`). RangeOptions says which a call asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

from bookkeeper.proto import kv_pb2, kv_rpc_pb2, storage_pb2

from bkcore.table.commands import (
    Compare, CompareResult, CompareTarget, DeleteRange, DeleteResult, IllegalOp, Increment, KeyValue, OpRefused, Put,
    PutResult, RangeRead, RangeResult, TableError, fold_key, pkey_end, prefix_end, unfold_key,
)


def kv_to_proto(kv: KeyValue) -> kv_pb2.KeyValue:
    _, lkey = unfold_key(kv.key)
    return kv_pb2.KeyValue(key=lkey, value=kv.value, create_revision=kv.create_revision,
                           mod_revision=kv.mod_revision, version=kv.version - 1, is_number=kv.is_number,
                           number_value=kv.number or 0, expire_time=kv.expire_at_ms)


@dataclass(frozen=True, slots=True)
class RangeOptions:
    """What a Range or Delete call's metadata asks of its range: to the end of the pkey
    (TO_PKEY_END_HEADER), or every key starting with the call's key (PREFIX_HEADER)."""

    to_pkey_end: bool = False
    prefix: bool = False


def folded_end(pkey: bytes, key: bytes, range_end: bytes, options: RangeOptions = RangeOptions()) -> bytes | None:
    """Our exclusive end of a request's inclusive `range_end` (none: one key)."""
    if options.prefix:
        return prefix_end(fold_key(pkey, key))
    if options.to_pkey_end:
        return pkey_end(fold_key(pkey))
    return fold_key(pkey, range_end + b"\0") if range_end else None


def range_read_of(pkey: bytes, request: kv_rpc_pb2.RangeRequest, options: RangeOptions = RangeOptions()) -> RangeRead:
    """TableStoreImpl.buildRangeOp: key, end, limit and the revision bounds (each > 0 or none)."""
    return RangeRead(fold_key(pkey, request.key), folded_end(pkey, request.key, request.range_end, options),
                     limit=max(request.limit, 0),
                     min_mod_revision=max(request.min_mod_revision, 0),
                     max_mod_revision=max(request.max_mod_revision, 0),
                     min_create_revision=max(request.min_create_revision, 0),
                     max_create_revision=max(request.max_create_revision, 0))


def put_of(pkey: bytes, request: kv_rpc_pb2.PutRequest, ttl_ms: int = 0) -> Put:
    """TableStoreImpl.buildPutOp: key, value and prev_kv (and our per-put TTL)."""
    return Put(fold_key(pkey, request.key), request.value, request.prev_kv, ttl_ms)


def delete_of(pkey: bytes, request: kv_rpc_pb2.DeleteRangeRequest, options: RangeOptions = RangeOptions()) -> DeleteRange:
    """TableStoreImpl.buildDeleteOp: key, end and prev_kv."""
    return DeleteRange(fold_key(pkey, request.key), folded_end(pkey, request.key, request.range_end, options),
                       request.prev_kv)


def increment_of(pkey: bytes, request: kv_rpc_pb2.IncrementRequest) -> Increment:
    """TableStoreImpl.buildIncrementOp: key, amount and get_total."""
    return Increment(fold_key(pkey, request.key), request.amount, request.get_total)


_TARGETS = {kv_rpc_pb2.Compare.VALUE: CompareTarget.VALUE, kv_rpc_pb2.Compare.VERSION: CompareTarget.VERSION,
            kv_rpc_pb2.Compare.CREATE: CompareTarget.CREATE_REVISION,
            kv_rpc_pb2.Compare.MOD: CompareTarget.MOD_REVISION}
_RESULTS = {kv_rpc_pb2.Compare.EQUAL: CompareResult.EQUAL, kv_rpc_pb2.Compare.NOT_EQUAL: CompareResult.NOT_EQUAL,
            kv_rpc_pb2.Compare.LESS: CompareResult.LESS, kv_rpc_pb2.Compare.GREATER: CompareResult.GREATER}


def compare_of(pkey: bytes, compare: kv_rpc_pb2.Compare) -> Compare:
    """TableStoreUtils.fromProtoCompare (an empty value is "no value": Compare says how)."""
    target, result = _TARGETS.get(compare.target), _RESULTS.get(compare.result)
    if target is None or result is None:
        raise TableError(f"a txn compare of key {compare.key!r} has an unknown target {compare.target} or "
                         f"result {compare.result}")
    value = {CompareTarget.VALUE: compare.value, CompareTarget.VERSION: compare.version + 1,
             CompareTarget.CREATE_REVISION: compare.create_revision,
             CompareTarget.MOD_REVISION: compare.mod_revision}[target]
    return Compare(fold_key(pkey, compare.key), target, result, value)


def txn_op_of(pkey: bytes, op: kv_rpc_pb2.RequestOp):
    """TableStoreImpl.buildTxnOp: a put, a delete or a range."""
    kind = op.WhichOneof("request")
    if kind == "request_put":
        return put_of(pkey, op.request_put)
    if kind == "request_delete_range":
        return delete_of(pkey, op.request_delete_range)
    if kind == "request_range":
        return range_read_of(pkey, op.request_range)
    raise TableError(f"a txn operation is a put, a delete or a range, not {kind}")


# -- responses: the fields of each response but its header --------------------------------------

def range_fields(result: RangeResult) -> dict:
    return {"kvs": [kv_to_proto(kv) for kv in result.kvs], "count": len(result.kvs), "more": result.more}


def put_fields(result: PutResult) -> dict:
    return {"prev_kv": kv_to_proto(result.prev_kv)} if result.prev_kv else {}


def delete_fields(op: DeleteRange, result: DeleteResult) -> dict:
    if not op.prev_kv:
        return {"deleted": 0}
    return {"deleted": result.deleted, "prev_kvs": [kv_to_proto(kv) for kv in result.prev_kvs]}


def response_op(op, result, header: kv_rpc_pb2.RoutingHeader, status_of) -> kv_rpc_pb2.ResponseOp:
    """TableStoreUtils.processTxnResult: each result with its own header (a put its key's value
    type refused carries that code; the txn itself succeeded)."""
    def with_header(fields: dict, code: int = storage_pb2.SUCCESS) -> dict:
        return {"header": kv_rpc_pb2.ResponseHeader(code=code, routing_header=header), **fields}
    if isinstance(result, OpRefused):
        refused = kv_rpc_pb2.PutResponse(**with_header({}, status_of(IllegalOp(result.reason))))
        return kv_rpc_pb2.ResponseOp(response_put=refused)
    if isinstance(result, PutResult):
        return kv_rpc_pb2.ResponseOp(response_put=kv_rpc_pb2.PutResponse(**with_header(put_fields(result))))
    if isinstance(result, DeleteResult):
        return kv_rpc_pb2.ResponseOp(response_delete_range=kv_rpc_pb2.DeleteRangeResponse(
            **with_header(delete_fields(op, result))))
    assert isinstance(result, RangeResult), result
    return kv_rpc_pb2.ResponseOp(response_range=kv_rpc_pb2.RangeResponse(**with_header(range_fields(result))))
