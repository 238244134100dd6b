"""Conformance: puts, gets, increments and deletes of single keys, as BookKeeper's table service
answers them, through the stock `apache-bookkeeper-client` (kv.Table and its stubs) and `bk table`.

Java references are to apache/bookkeeper (commit 9590a97f67):
  statelib .../impl/mvcc/MVCCStoreImpl.java, MVCCRecord.java
  storage  .../impl/kv/TableStoreImpl.java, TableStoreUtils.java
"""

import pytest
from bookkeeper.common.exceptions import BadRequest
from bookkeeper.proto import kv_rpc_pb2, storage_pb2

from bkcore.table.commands import COMMAND_SIZE_MAX


def test_a_blind_put_answers_nothing_and_a_new_key_starts_at_version_0(table):
    """MVCCStoreImpl.put (lines 520-523): a new record gets create revision = mod revision =
    the command's revision and version 0; PutResponse.prev_kv only with prev_kv (lines 534-540).
    The stock Table.put returns None."""
    assert table.kv.put(b"k", b"v1") is None
    response, _ = table.call("Put", kv_rpc_pb2.PutRequest(key=b"fresh", value=b"x", header=table.header(b"fresh")))
    assert response.header.code == storage_pb2.SUCCESS and not response.HasField("prev_kv")
    kv = table.kv.get(b"k")
    assert (kv.key, kv.value, kv.version, kv.is_number) == (b"k", b"v1", 0, False)
    assert kv.create_revision == kv.mod_revision > 0


def test_each_put_adds_one_to_the_version_and_keeps_the_create_revision(table):
    """MVCCStoreImpl.put line 519: `record.setVersion(record.getVersion() + 1)`; the create
    revision stays, the mod revision becomes the command's (line 526)."""
    table.kv.put(b"k", b"v1")
    first = table.kv.get(b"k")
    table.kv.put(b"k", b"v2")
    table.kv.put(b"k", b"v3")
    last = table.kv.get(b"k")
    assert (last.value, last.version, last.create_revision) == (b"v3", 2, first.create_revision)
    assert last.mod_revision > first.mod_revision


def test_prev_kv_returns_the_record_the_put_replaced(table):
    """MVCCStoreImpl.put lines 515-518 and 534-540: with prev_kv, the record as it was (value,
    version, revisions); none for a new key. TableStoreUtils.newKeyValue gives the lkey."""
    table.kv.put(b"k", b"old")
    before = table.kv.get(b"k")
    response, _ = table.call("Put", kv_rpc_pb2.PutRequest(key=b"k", value=b"new", prev_kv=True,
                                                          header=table.header(b"k")))
    prev = response.prev_kv
    assert (prev.key, prev.value, prev.version, prev.mod_revision) == (b"k", b"old", 0, before.mod_revision)
    response, _ = table.call("Put", kv_rpc_pb2.PutRequest(key=b"other", value=b"x", prev_kv=True,
                                                          header=table.header(b"other")))
    assert not response.HasField("prev_kv")


def test_a_put_ignores_expected_version_and_lease(table):
    """TableStoreImpl.buildPutOp (lines 166-176) reads key, value and prev_kv only: a put with
    an expected_version that does not match (or a lease) is carried out all the same."""
    table.kv.put(b"k", b"v1")
    response, _ = table.call("Put", kv_rpc_pb2.PutRequest(key=b"k", value=b"v2", expected_version=7, lease=3,
                                                          header=table.header(b"k")))
    assert response.header.code == storage_pb2.SUCCESS
    assert (table.kv.get(b"k").value, table.kv.get(b"k").version) == (b"v2", 1)


def test_increments_make_a_number_key(table):
    """MVCCStoreImpl.increment (lines 400-432): a missing key starts at 0 with version 0 and
    value type NUMBER (8 bytes, big-endian: `writeLong`); the total only with get_total
    (IncrementResultImpl.totalAmount is 0 otherwise). The stock Table.incr returns None."""
    assert table.kv.incr(b"n", 100) is None
    response, _ = table.call("Increment", kv_rpc_pb2.IncrementRequest(key=b"n", amount=-58, get_total=True,
                                                                      header=table.header(b"n")))
    assert response.header.code == storage_pb2.SUCCESS and response.total_amount == 42
    response, _ = table.call("Increment", kv_rpc_pb2.IncrementRequest(key=b"n", amount=1, header=table.header(b"n")))
    assert response.total_amount == 0
    kv = table.kv.get(b"n")
    assert (kv.is_number, kv.number_value, kv.value, kv.version) == (True, 43, (43).to_bytes(8, "big"), 2)


def test_a_put_on_a_number_is_refused_and_changes_nothing(table):
    """MVCCStoreImpl.put lines 510-513: a record whose value type is not BYTES answers
    Code.ILLEGAL_OP, which TableStoreUtils.mvccCodeToStatusCode (line 121) makes BAD_REQUEST;
    the stock client raises BadRequest for it (exceptions._BK_CODE_TO_EXCEPTION_)."""
    table.kv.incr(b"n", 5)
    with pytest.raises(BadRequest):
        table.kv.put(b"n", b"text")
    response, reason = table.call("Put", kv_rpc_pb2.PutRequest(key=b"n", value=b"text", header=table.header(b"n")))
    assert response.header.code == storage_pb2.BAD_REQUEST
    assert "b'n'" in reason and "holds a number" in reason
    kv = table.kv.get(b"n")
    assert (kv.is_number, kv.number_value, kv.version) == (True, 5, 0)


def test_an_increment_of_bytes_is_refused_and_changes_nothing(table):
    """MVCCStoreImpl.increment lines 407-410: a record whose value type is not NUMBER answers
    Code.ILLEGAL_OP -> BAD_REQUEST (BadRequest in the stock client)."""
    table.kv.put(b"greeting", b"hello")
    with pytest.raises(BadRequest):
        table.kv.incr(b"greeting", 1)
    response, reason = table.call("Increment", kv_rpc_pb2.IncrementRequest(key=b"greeting", amount=1,
                                                                           header=table.header(b"greeting")))
    assert response.header.code == storage_pb2.BAD_REQUEST and "b'greeting'" in reason and "holds bytes" in reason
    kv = table.kv.get(b"greeting")
    assert (kv.value, kv.is_number, kv.version) == (b"hello", False, 0)


def test_a_get_of_a_missing_key_finds_nothing(table):
    """MVCCStoreImpl.processRange lines 981-997: no record -> count 0, no kvs, more false; the
    stock Table.get returns None when count is 0."""
    assert table.kv.get(b"nothing") is None
    response, _ = table.call("Range", kv_rpc_pb2.RangeRequest(key=b"nothing", header=table.header(b"nothing")))
    assert (response.header.code, response.count, list(response.kvs), response.more) == \
        (storage_pb2.SUCCESS, 0, [], False)


def test_a_blind_delete_counts_nothing_but_deletes(table):
    """MVCCStoreImpl.delete line 601: `blind = allowBlind && !op.option().prevKv()`, and a blind
    delete answers numDeleted = 0 (lines 612-614) whether or not the key was there. So the
    stock Table.delete (which sends no prev_kv) returns 0."""
    table.kv.put(b"k", b"v")
    assert table.kv.delete(b"k") == 0
    assert table.kv.get(b"k") is None
    assert table.kv.delete(b"k") == 0


def test_a_delete_with_prev_kv_counts_and_returns_what_it_deleted(table):
    """MVCCStoreImpl.deleteUsingIter lines 670-685: with prev_kv, the record found is counted
    and returned (TableStoreUtils.processDeleteResult); a missing key: 0 and none."""
    table.kv.put(b"k", b"v")
    table.kv.put(b"k", b"w")
    response, _ = table.call("Delete", kv_rpc_pb2.DeleteRangeRequest(key=b"k", prev_kv=True, header=table.header(b"k")))
    assert response.deleted == 1 and [(kv.key, kv.value, kv.version) for kv in response.prev_kvs] == [(b"k", b"w", 1)]
    response, _ = table.call("Delete", kv_rpc_pb2.DeleteRangeRequest(key=b"k", prev_kv=True, header=table.header(b"k")))
    assert (response.header.code, response.deleted, list(response.prev_kvs)) == (storage_pb2.SUCCESS, 0, [])


def test_a_deleted_number_key_may_come_back_as_bytes(table):
    """MVCCStoreImpl.delete checks no value type; once the record is gone a put makes a new
    BYTES record at version 0 (put lines 520-525)."""
    table.kv.incr(b"n", 1)
    table.kv.delete(b"n")
    table.kv.put(b"n", b"text")
    kv = table.kv.get(b"n")
    assert (kv.value, kv.is_number, kv.version) == (b"text", False, 0)


def test_an_empty_key_is_a_key(table):
    """TableStoreUtils.newStoreKey (lines 66-87): an empty routing key is stored under
    NO_ROUTING_KEY with the lkey; nothing refuses an empty key."""
    table.kv.put(b"", b"empty")
    assert table.kv.get(b"").value == b"empty"


def test_keys_and_values_up_to_one_distributedlog_record(table):
    """BookKeeper journals a command as one DistributedLog record (MVCCAsyncBytesStoreImpl
    writeCommandReturnTxId), at most LogRecord.MAX_LOGRECORD_SIZE = 1 MiB - 8 KiB; keys and
    values have no other limit (MVCCStoreImpl checks none). So a 4 KiB key (which the stock
    Table sends twice: as routing key and as key, as BookKeeper's record holds it too) with a
    value that fills the rest of the record is kept whole. Past it BookKeeper's writer fails
    (LogRecordTooLongException -> INTERNAL_SERVER_ERROR, which the stock client retries for
    60 s); ours refuses at once with BAD_REQUEST and says the limit (docs/operations.md, "Tables and
    BookKeeper")."""
    key = b"k" * 4096
    value = bytes(range(256)) * ((COMMAND_SIZE_MAX - 2 * len(key) - 256) // 256)
    table.kv.put(key, value)
    assert table.kv.get(key).value == value
    table.kv.put(key + b"2", b"small")                      # keys past lmdb's limit stay apart
    assert table.kv.get(key).value == value and table.kv.get(key + b"2").value == b"small"
    too_large = b"x" * (COMMAND_SIZE_MAX + 1)
    response, reason = table.call("Put", kv_rpc_pb2.PutRequest(key=b"big", value=too_large,
                                                               header=table.header(b"big")))
    assert response.header.code == storage_pb2.BAD_REQUEST
    assert "b'big'" in reason and str(COMMAND_SIZE_MAX) in reason
    with pytest.raises(BadRequest):
        table.kv.put(b"big", too_large)
    assert table.kv.get(b"big") is None
