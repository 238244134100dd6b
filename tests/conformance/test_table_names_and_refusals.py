"""Conformance: which namespace, stream and table a table call reaches; tables made by the
stock admin client with its defaults; how refusals reach users of the stock client (its
exception for each status code) and of `bk table` (one line, no traceback).

Java references are to apache/bookkeeper (commit 9590a97f67):
  storage .../impl/metadata/RootRangeStoreImpl.java, .../impl/kv/TableStoreUtils.java
  python  stream/clients/python/bookkeeper/common/exceptions.py, common/constants.py
"""

import pytest
from bookkeeper.common.constants import __DEFAULT_TABLE_CONF__ as DEFAULT_TABLE_CONF
from bookkeeper.common.exceptions import NamespaceNotFoundError, StreamExistsError, StreamNotFoundError
from bookkeeper.proto import kv_rpc_pb2, storage_pb2, storage_pb2_grpc, stream_pb2


def test_a_table_made_with_the_stock_defaults_has_their_ranges_and_serves_keys_in_each(server, table):
    """constants.__DEFAULT_TABLE_CONF__ (4 initial ranges, storage type TABLE) as the stock
    admin client's Namespace.create sends it; GetStream answers the configuration back
    (RootRangeStoreImpl.getStream) and the meta range lists the 4 ranges, each of which serves keys."""
    root = storage_pb2_grpc.RootRangeServiceStub(server.channel)
    got = root.GetStream(storage_pb2.GetStreamRequest(
        stream_name=stream_pb2.StreamName(namespace_name=server.namespace, stream_name=table.name)))
    conf = got.stream_props.stream_conf
    assert got.code == storage_pb2.SUCCESS and got.stream_props.stream_id == table.stream_id
    assert (conf.initial_num_ranges, conf.storage_type) == (DEFAULT_TABLE_CONF.initial_num_ranges, stream_pb2.TABLE)
    ranges = storage_pb2_grpc.MetaRangeServiceStub(server.channel).GetActiveRanges(
        storage_pb2.GetActiveRangesRequest(stream_id=table.stream_id))
    assert len(ranges.ranges) == DEFAULT_TABLE_CONF.initial_num_ranges == 4
    keys = [b"key-%d" % i for i in range(16)]         # crc32c spreads 16 keys over all 4 ranges
    for key in keys:
        table.kv.put(key, key)
    assert [table.kv.get(key).value for key in keys] == keys


def test_a_missing_namespace_is_namespace_not_found(server):
    """RootRangeStoreImpl.getStream (lines 664-671): no such namespace -> NAMESPACE_NOT_FOUND,
    which the stock kv Client.table raises as NamespaceNotFoundError."""
    with pytest.raises(NamespaceNotFoundError):
        server.kv_table("anything", namespace="no_such_namespace")


def test_a_missing_table_is_stream_not_found(server):
    """RootRangeStoreImpl.getStreamProps (line 617): no such stream -> STREAM_NOT_FOUND, which
    the stock kv Client.table raises as StreamNotFoundError; `bk table` says so in one line."""
    with pytest.raises(StreamNotFoundError):
        server.kv_table("no_such_table")
    code, out, err = server.bk("table", "get", "-t", f"{server.namespace}/no_such_table", "-k", "k")
    assert code == 1 and out == "" and len(err.splitlines()) == 1 and "STREAM_NOT_FOUND" in err


def test_creating_a_table_twice_raises_stream_exists(server, table):
    """The stock Namespace.create raises StreamExistsError for a table that exists (BookKeeper
    answers INTERNAL_SERVER_ERROR, RootRangeStoreImpl.createStream, and the client then finds
    the stream; we answer STREAM_EXISTS, which it raises as the same exception)."""
    with pytest.raises(StreamExistsError):
        server.admin().namespace(server.namespace).create(table.name)


def test_a_deleted_table_refuses_its_keys_as_stream_not_found(server, table):
    """After the stock admin client deletes a table (RootRangeStoreImpl.deleteStream), a client
    still holding it is refused with STREAM_NOT_FOUND (StreamNotFoundError). BookKeeper routes
    such a call to no storage container (StorageContainerStoreImpl: the 404 container), which
    the stock client retries for 60 s; we answer at once (docs/operations.md, "Tables and BookKeeper").
    A table made again under the name starts empty."""
    table.kv.put(b"k", b"v")
    server.admin().namespace(server.namespace).delete(table.name)
    with pytest.raises(StreamNotFoundError):
        table.kv.put(b"k", b"again")
    response, reason = table.call("Range", kv_rpc_pb2.RangeRequest(key=b"k", header=table.header(b"k")))
    assert response.header.code == storage_pb2.STREAM_NOT_FOUND and reason
    server.admin().namespace(server.namespace).create(table.name)
    assert server.kv_table(table.name).get(b"k") is None


def test_bk_table_prints_a_refusal_as_one_line_with_the_key_the_rule_and_the_code(server, table):
    """Refusals keep BookKeeper's codes (MVCCStoreImpl.put/increment ILLEGAL_OP ->
    TableStoreUtils.mvccCodeToStatusCode BAD_REQUEST); `bk table`, run as users run it, prints
    what failed, the server's reason naming the key and the rule, and the code: one line on
    stderr, exit 1, no traceback."""
    table.kv.incr(b"visits", 3)
    table.kv.put(b"greeting", b"hello")
    for argv, rule in [(("put", "-k", "visits", "-v", "x"), "holds a number"),
                       (("incr", "-k", "greeting", "-a", "1"), "holds bytes")]:
        done = server.bk_process("table", argv[0], "-t", table.cli_name, *argv[1:])
        assert done.returncode == 1 and done.stdout == "", done.stderr
        assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
        assert f"b'{argv[2]}'" in done.stderr and rule in done.stderr and "(BAD_REQUEST)" in done.stderr
    assert table.kv.get(b"visits").number_value == 3 and table.kv.get(b"greeting").value == b"hello"


def test_bk_table_shows_what_the_stock_client_reads(server, table):
    """`bk table get` prints the key's value or number, its version (from 0, MVCCStoreImpl.put
    line 523) and mod revision as the stock client reads them; `bk table delete` counts what it
    deleted (it asks with prev_kv: MVCCStoreImpl.delete counts nothing for a blind delete)."""
    assert server.bk("table", "put", "-t", table.cli_name, "-k", "k", "-v", "v1")[0] == 0
    server.bk("table", "put", "-t", table.cli_name, "-k", "k", "-v", "v2")
    kv = table.kv.get(b"k")
    code, out, _ = server.bk("table", "get", "-t", table.cli_name, "-k", "k")
    assert code == 0 and out.strip() == f"k = v2  (version {kv.version}, revision {kv.mod_revision})"
    assert kv.version == 1
    assert server.bk("table", "incr", "-t", table.cli_name, "-k", "n", "-a", "5")[1].strip() == "n = 5"
    assert server.bk("table", "delete", "-t", table.cli_name, "-k", "k")[1].strip() == "deleted 1 key(s)"
    assert server.bk("table", "delete", "-t", table.cli_name, "-k", "k")[1].strip() == "deleted 0 key(s)"
