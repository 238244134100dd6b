"""Conformance: ranges, delete-ranges and txns within one pkey, as BookKeeper's table service
answers them, through the stock package's TableService stub and `bk table range`.

Java references are to apache/bookkeeper (commit 9590a97f67):
  statelib .../impl/mvcc/MVCCStoreImpl.java, MVCCRecord.java
  storage  .../impl/kv/TableStoreImpl.java, TableStoreUtils.java
"""

import pytest
from bookkeeper.common.exceptions import KeyNotFoundError, from_table_rpc_response
from bookkeeper.proto import kv_rpc_pb2, storage_pb2

PKEY = b"user"
C = kv_rpc_pb2.Compare


@pytest.fixture
def rows(table):
    """lkeys a, b, c, d of PKEY, put in that order: {lkey: its KeyValue}."""
    for lkey in (b"a", b"b", b"c", b"d"):
        table.call("Put", kv_rpc_pb2.PutRequest(key=lkey, value=lkey.upper(), header=table.header(PKEY)))
    return {lkey: table.get(lkey, pkey=PKEY) for lkey in (b"a", b"b", b"c", b"d")}


def read(table, key: bytes, range_end: bytes = b"", **options) -> kv_rpc_pb2.RangeResponse:
    response, _ = table.call("Range", kv_rpc_pb2.RangeRequest(key=key, range_end=range_end,
                                                              header=table.header(PKEY), **options))
    assert response.header.code == storage_pb2.SUCCESS
    return response


def txn(table, compares=(), success=(), failure=()) -> tuple[kv_rpc_pb2.TxnResponse, str]:
    return table.call("Txn", kv_rpc_pb2.TxnRequest(compare=list(compares), success=list(success),
                                                   failure=list(failure), header=table.header(PKEY)))


def put_op(key: bytes, value: bytes, **options) -> kv_rpc_pb2.RequestOp:
    return kv_rpc_pb2.RequestOp(request_put=kv_rpc_pb2.PutRequest(key=key, value=value, **options))


def keys_of(kvs) -> list[bytes]:
    return [kv.key for kv in kvs]


def test_a_range_end_is_included(table, rows):
    """MVCCStoreImpl.getKeyRecords line 887: the scan stops at the first key past rawEndKey, so
    the end key itself is read; TableStoreImpl.buildRangeOp (lines 103-136) makes the end the
    store key of (r_key, range_end)."""
    response = read(table, b"b", b"c")
    assert keys_of(response.kvs) == [b"b", b"c"] and (response.count, response.more) == (2, False)
    assert [kv.value for kv in response.kvs] == [b"B", b"C"]
    assert keys_of(read(table, b"c", b"b").kvs) == []          # an end before the key: nothing


def test_a_limit_stops_the_read_and_the_count_is_what_it_returns(table, rows):
    """MVCCStoreImpl.processRange lines 1017-1032: at most `limit` records, `count(kvs.size())`
    and `more` when the scan stopped at the limit with keys left."""
    response = read(table, b"a", b"d", limit=2)
    assert keys_of(response.kvs) == [b"a", b"b"] and (response.count, response.more) == (2, True)
    response = read(table, b"a", b"d", limit=10)
    assert keys_of(response.kvs) == [b"a", b"b", b"c", b"d"] and (response.count, response.more) == (4, False)


def test_count_only_and_keys_only_are_not_read(table, rows):
    """TableStoreImpl.buildRangeOp (lines 103-136) passes neither count_only nor keys_only to
    the range op: the keys come back with their values."""
    response = read(table, b"a", b"b", count_only=True, keys_only=True)
    assert [(kv.key, kv.value) for kv in response.kvs] == [(b"a", b"A"), (b"b", b"B")] and response.count == 2


def test_revision_bounds_pick_the_keys_before_the_limit(table, rows):
    """TableStoreImpl.buildRangeOp lines 117-128 (each bound only when > 0) and MVCCRecord.test
    lines 137-146; getKeyRecords (lines 885-899) counts only the records that pass toward the limit."""
    response = read(table, b"a", b"d", min_mod_revision=rows[b"c"].mod_revision)
    assert keys_of(response.kvs) == [b"c", b"d"]
    response = read(table, b"a", b"d", max_create_revision=rows[b"b"].create_revision)
    assert keys_of(response.kvs) == [b"a", b"b"]
    response = read(table, b"a", b"d", min_create_revision=rows[b"b"].create_revision, limit=2)
    assert keys_of(response.kvs) == [b"b", b"c"]
    response = read(table, b"b", max_mod_revision=rows[b"a"].mod_revision)      # one key, filtered
    assert (response.count, list(response.kvs)) == (0, [])


def test_a_delete_range_with_prev_kv_counts_and_returns_its_keys(table, rows):
    """MVCCStoreImpl.deleteUsingIter lines 686-702: every record of [key, end] (the end
    included) is counted, returned with prev_kv and deleted."""
    response, _ = table.call("Delete", kv_rpc_pb2.DeleteRangeRequest(key=b"b", range_end=b"c", prev_kv=True,
                                                                     header=table.header(PKEY)))
    assert response.deleted == 2 and [(kv.key, kv.value) for kv in response.prev_kvs] == [(b"b", b"B"), (b"c", b"C")]
    assert keys_of(read(table, b"a", b"d").kvs) == [b"a", b"d"]


def test_a_blind_delete_range_deletes_its_keys_and_counts_none(table, rows):
    """MVCCStoreImpl.delete lines 601 and 612-614, deleteBlind lines 645-660: without prev_kv
    the whole [key, end] goes and numDeleted is 0."""
    response, _ = table.call("Delete", kv_rpc_pb2.DeleteRangeRequest(key=b"a", range_end=b"c",
                                                                     header=table.header(PKEY)))
    assert (response.header.code, response.deleted, list(response.prev_kvs)) == (storage_pb2.SUCCESS, 0, [])
    assert keys_of(read(table, b"a", b"d").kvs) == [b"d"]


def test_bk_table_range_lists_a_pkey_and_its_to_is_included(server, table, rows):
    """`bk table range`: the keys of a pkey from --from through --to (included, as
    MVCCStoreImpl.getKeyRecords reads the end key), versions from 0 (MVCCStoreImpl.put
    line 523); without --to, to the end of the pkey."""
    code, out, _ = server.bk("table", "range", "-t", table.cli_name, "-p", "user", "--from", "b", "--to", "c")
    assert code == 0 and [line.split(" = ")[0] for line in out.splitlines()] == ["b", "c"]
    assert out.splitlines()[0].startswith("b = B  (version 0, revision ")
    code, out, _ = server.bk("table", "range", "-t", table.cli_name, "-p", "user")
    assert code == 0 and [line.split(" = ")[0] for line in out.splitlines()] == ["a", "b", "c", "d"]


@pytest.mark.parametrize("target, field", [(C.VERSION, "version"), (C.CREATE, "create_revision"),
                                           (C.MOD, "mod_revision")])
def test_comparing_a_missing_keys_version_or_revision_fails_the_txn_with_key_not_found(table, target, field):
    """MVCCStoreImpl.processCompareOp lines 772-777: no record and a target other than VALUE
    throws Code.KEY_NOT_FOUND, before any operation runs (processTxn line 729);
    mvccCodeToStatusCode line 129 keeps KEY_NOT_FOUND, which the stock client's
    from_table_rpc_response raises as KeyNotFoundError."""
    response, reason = txn(table, [C(key=b"ghost", target=target, result=C.EQUAL, **{field: 0})],
                           [put_op(b"ghost", b"made")], [put_op(b"other", b"x")])
    assert response.header.code == storage_pb2.KEY_NOT_FOUND and not response.succeeded
    assert "b'ghost'" in reason and "does not exist" in reason
    with pytest.raises(KeyNotFoundError):
        from_table_rpc_response(response)
    assert table.get(b"ghost", pkey=PKEY) is None and table.get(b"other", pkey=PKEY) is None


@pytest.mark.parametrize("result, value, holds", [
    (C.EQUAL, b"", True), (C.EQUAL, b"x", False), (C.NOT_EQUAL, b"x", True), (C.NOT_EQUAL, b"", False),
    (C.LESS, b"x", False), (C.GREATER, b"x", False)])
def test_comparing_a_missing_keys_value(table, result, value, holds):
    """MVCCStoreImpl.processCompareOp lines 800-808 (an empty value is null: TableStoreUtils.
    fromProtoCompare lines 264-270): = holds only against no value, != only against a value,
    < and > never. = with no value is BookKeeper's compare-and-create."""
    response, _ = txn(table, [C(key=b"k", target=C.VALUE, result=result, value=value)], [put_op(b"k", b"made")])
    assert response.header.code == storage_pb2.SUCCESS and response.succeeded is holds
    assert (table.get(b"k", pkey=PKEY) is not None) is holds


@pytest.mark.parametrize("result, value, holds", [
    (C.EQUAL, b"", False), (C.LESS, b"", False), (C.GREATER, b"", True), (C.NOT_EQUAL, b"", True),
    (C.EQUAL, b"B", True), (C.LESS, b"C", True), (C.LESS, b"A", False), (C.GREATER, b"A", True),
    (C.GREATER, b"BB", False), (C.LESS, b"BB", True)])
def test_comparing_a_present_keys_value(table, rows, result, value, holds):
    """MVCCStoreImpl.processCompareOp lines 810-845: against no value, = and < fail and > and !=
    hold; against bytes, the record's value compares as bytes (ByteBuf.compareTo: unsigned
    bytes, then length)."""
    response, _ = txn(table, [C(key=b"b", target=C.VALUE, result=result, value=value)])
    assert response.header.code == storage_pb2.SUCCESS and response.succeeded is holds


def test_comparing_a_present_keys_version_and_revisions(table, rows):
    """MVCCStoreImpl.processCompareOp lines 789-797 (MVCCRecord.compareModRev/compareCreateRev/
    compareVersion): versions as BookKeeper counts them, from 0."""
    b = rows[b"b"]
    for compare, holds in [(C(key=b"b", target=C.VERSION, result=C.EQUAL, version=0), True),
                           (C(key=b"b", target=C.VERSION, result=C.EQUAL, version=1), False),
                           (C(key=b"b", target=C.VERSION, result=C.LESS, version=1), True),
                           (C(key=b"b", target=C.MOD, result=C.EQUAL, mod_revision=b.mod_revision), True),
                           (C(key=b"b", target=C.MOD, result=C.GREATER, mod_revision=b.mod_revision), False),
                           (C(key=b"b", target=C.CREATE, result=C.LESS, create_revision=b.create_revision + 1), True),
                           (C(key=b"b", target=C.CREATE, result=C.NOT_EQUAL, create_revision=b.create_revision),
                            False)]:
        response, _ = txn(table, [compare])
        assert response.succeeded is holds, compare


def test_a_txn_runs_one_branch_and_answers_each_operation(table, rows):
    """MVCCStoreImpl.processTxn lines 725-764: the success or the failure operations, each
    answered in order (TableStoreUtils.processTxnResult lines 205-239), all at one revision;
    a txn without compares succeeds."""
    success = [put_op(b"a", b"A2", prev_kv=True),
               kv_rpc_pb2.RequestOp(request_range=kv_rpc_pb2.RangeRequest(key=b"c", range_end=b"d")),
               kv_rpc_pb2.RequestOp(request_delete_range=kv_rpc_pb2.DeleteRangeRequest(key=b"b", prev_kv=True)),
               put_op(b"e", b"E")]
    response, _ = txn(table, [], success, [put_op(b"lost", b"x")])
    assert response.header.code == storage_pb2.SUCCESS and response.succeeded
    put, ranged, deleted, blind = response.responses
    assert put.response_put.prev_kv.value == b"A" and not blind.response_put.HasField("prev_kv")
    assert keys_of(ranged.response_range.kvs) == [b"c", b"d"] and ranged.response_range.count == 2
    assert deleted.response_delete_range.deleted == 1 and deleted.response_delete_range.prev_kvs[0].value == b"B"
    assert table.get(b"a", pkey=PKEY).mod_revision == table.get(b"e", pkey=PKEY).mod_revision
    assert table.get(b"lost", pkey=PKEY) is None and table.get(b"b", pkey=PKEY) is None
    response, _ = txn(table, [C(key=b"a", target=C.VALUE, result=C.EQUAL, value=b"nope")],
                      [put_op(b"won", b"x")], [put_op(b"lost", b"x")])
    assert not response.succeeded and response.responses[0].HasField("response_put")
    assert table.get(b"lost", pkey=PKEY).value == b"x" and table.get(b"won", pkey=PKEY) is None


def test_a_put_on_a_number_in_a_txn_is_refused_alone(table):
    """MVCCStoreImpl.put lines 510-513 answer ILLEGAL_OP in that put's result, and processTxn
    (lines 745-758) goes on with the other operations and answers the txn OK: the put's own
    header says BAD_REQUEST (TableStoreUtils.processPutResult), the number stays."""
    table.call("Increment", kv_rpc_pb2.IncrementRequest(key=b"n", amount=7, header=table.header(PKEY)))
    response, _ = txn(table, [], [put_op(b"n", b"text"), put_op(b"m", b"fine")])
    assert response.header.code == storage_pb2.SUCCESS and response.succeeded
    assert [r.response_put.header.code for r in response.responses] == [storage_pb2.BAD_REQUEST, storage_pb2.SUCCESS]
    assert table.get(b"n", pkey=PKEY).number_value == 7 and table.get(b"m", pkey=PKEY).value == b"fine"
