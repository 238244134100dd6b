"""The gRPC endpoint against the stock `apache-bookkeeper-client` package from PyPI (its
blocking calls run in a worker thread while the gateway serves in the test's trio loop), plus
txn and watch through raw stubs."""

import contextlib
import time

import grpc
import msgpack
import pytest
import trio

import bkclient

bookkeeper = pytest.importorskip("bookkeeper", reason="the grpc extra (apache-bookkeeper-client) is not installed")

from bookkeeper import admin, kv  # noqa: E402
from bookkeeper.common.exceptions import BadRequest, NamespaceExistsError, StreamNotFoundError  # noqa: E402
from bookkeeper.proto import kv_rpc_pb2, kv_rpc_pb2_grpc, storage_pb2, storage_pb2_grpc  # noqa: E402

from bkcore.client.handles import WriteHandle  # noqa: E402
from bkcore.stream.segments import StreamSettings, stream_id_of  # noqa: E402
from bkcore.table.commands import RangeRead, fold_key  # noqa: E402
from bkcore.table.placement import preferred_server  # noqa: E402
from bkcore.table.service import OWNER_KNOWN_S, range_of  # noqa: E402
from streamstorage.grpc_gateway import WATCH_METHOD, GrpcGateway  # noqa: E402
from bkcore.table.range import TABLES_NAMESPACE  # noqa: E402

URI = "memory://grpc"


@pytest.fixture
async def gateway(start_cluster, tmp_path):
    await start_cluster(URI, 3)
    async with bkclient.connect(URI, renew_session=False) as bk:     # a server: it owns claims
        async with trio.open_nursery() as nursery:
            yield await nursery.start(GrpcGateway(bk, port=0, index_dir=str(tmp_path / "indexes")).run)
            nursery.cancel_scope.cancel()


async def test_the_stock_client_manages_namespaces_streams_and_tables(gateway):
    service_uri = (f"bk://127.0.0.1:{gateway.port}",)

    def with_stock_client():
        admin_client = admin.Client(storage_client_settings=service_uri)
        admin_client.namespaces().create("analytics")
        with pytest.raises(NamespaceExistsError):
            admin_client.namespaces().create("analytics")
        props = admin_client.namespace("analytics").create("counters")
        assert props.stream_id == stream_id_of("analytics", "counters")
        assert admin_client.namespace("analytics").get("counters").stream_name == "counters"
        with pytest.raises(StreamNotFoundError):
            admin_client.namespace("analytics").get("missing")
        table = kv.Client(storage_client_settings=service_uri, namespace="analytics").table("counters")
        table.put_str("greeting", "hello")
        assert table.get_str("greeting").value == b"hello"
        table.incr_str("visits", 100)
        table.incr_str("visits", 23)
        visits = table.get_str("visits")
        assert visits.is_number and visits.number_value == 123
        with pytest.raises(BadRequest):
            table.incr_str("greeting", 1)       # a value, not a counter
        assert table.delete_str("greeting") == 0      # blind: MVCCStoreImpl.delete counts nothing
        assert table.get_str("greeting") is None
        admin_client.namespace("analytics").delete("counters")
        with pytest.raises(StreamNotFoundError):
            admin_client.namespace("analytics").get("counters")

    await trio.to_thread.run_sync(with_stock_client)
    # Deleting the stream also deleted its table ranges' journals and checkpoints.
    left = await gateway.tables._bk.streams.list_streams(TABLES_NAMESPACE)
    assert not [name for name in left if name.startswith("analytics~counters~")]


async def test_txn_and_watch_through_stubs(gateway):
    target = f"127.0.0.1:{gateway.port}"
    stream_id = stream_id_of("default", "kv")

    def setup_and_txn():
        from bookkeeper.proto import storage_pb2_grpc
        with grpc.insecure_channel(target) as channel:
            root = storage_pb2_grpc.RootRangeServiceStub(channel)
            assert root.CreateStream(storage_pb2.CreateStreamRequest(ns_name="default", name="kv")).code == \
                storage_pb2.SUCCESS
            tables = kv_rpc_pb2_grpc.TableServiceStub(channel)
            header = kv_rpc_pb2.RoutingHeader(stream_id=stream_id, r_key=b"user")
            tables.Put(kv_rpc_pb2.PutRequest(key=b"name", value=b"ada", header=header))
            compare = kv_rpc_pb2.Compare(key=b"name", target=kv_rpc_pb2.Compare.VALUE,
                                         result=kv_rpc_pb2.Compare.EQUAL, value=b"ada")
            put = kv_rpc_pb2.RequestOp(request_put=kv_rpc_pb2.PutRequest(key=b"name", value=b"lovelace"))
            answer = tables.Txn(kv_rpc_pb2.TxnRequest(compare=[compare], success=[put], header=header))
            assert answer.header.code == storage_pb2.SUCCESS and answer.succeeded
            answer = tables.Txn(kv_rpc_pb2.TxnRequest(compare=[compare], success=[put], header=header))
            assert not answer.succeeded
            # A txn without a routing key (TxnRequest has no key of its own) is answered, not a crash.
            unrouted = kv_rpc_pb2.RoutingHeader(stream_id=stream_id)
            answer = tables.Txn(kv_rpc_pb2.TxnRequest(success=[put], header=unrouted))
            assert answer.header.code == storage_pb2.SUCCESS and answer.succeeded
            got = tables.Range(kv_rpc_pb2.RangeRequest(key=b"name", header=header))
            assert got.kvs[0].value == b"lovelace" and got.kvs[0].version == 1      # BookKeeper's: from 0
            return got.kvs[0].mod_revision

    revision = await trio.to_thread.run_sync(setup_and_txn)

    def watch_and_write():
        with grpc.insecure_channel(target) as channel:
            watch = channel.unary_stream(WATCH_METHOD, request_serializer=msgpack.packb,
                                         response_deserializer=msgpack.unpackb)
            events = watch({"stream_id": stream_id, "pkey": b"user", "key": b"name", "start_revision": revision})
            tables = kv_rpc_pb2_grpc.TableServiceStub(channel)
            header = kv_rpc_pb2.RoutingHeader(stream_id=stream_id, r_key=b"user")
            tables.Put(kv_rpc_pb2.PutRequest(key=b"name", value=b"countess", header=header))
            tables.Delete(kv_rpc_pb2.DeleteRangeRequest(key=b"name", header=header))
            seen = []
            for event in events:
                if "created" in event:      # the first answer: where the watch starts
                    assert event["revision"] == revision - 1 and not seen
                    continue
                seen.append((event["type"], event["value"]))
                if len(seen) == 3:
                    events.cancel()
                    break
            return seen

    assert await trio.to_thread.run_sync(watch_and_write) == [
        ("put", b"lovelace"), ("put", b"countess"), ("delete", b"")]


async def test_a_quiet_watch_stays_open_and_is_let_go_when_its_client_leaves(gateway):
    """A watch with nothing to say for a while still gets the next change, and once its client
    cancels it the server stops watching for it. (As a plain generator in grpc.aio's thread
    pool, a watch failed after a second without changes, its context having no is_active(),
    and its watcher was never let go, its callbacks never being called.)"""
    target = f"127.0.0.1:{gateway.port}"
    stream_id = stream_id_of("default", "quiet")
    header = kv_rpc_pb2.RoutingHeader(stream_id=stream_id, r_key=b"k")

    def watch_through_a_quiet_second():
        with grpc.insecure_channel(target) as channel:
            storage_pb2_grpc.RootRangeServiceStub(channel).CreateStream(
                storage_pb2.CreateStreamRequest(ns_name="default", name="quiet"))
            tables = kv_rpc_pb2_grpc.TableServiceStub(channel)
            tables.Put(kv_rpc_pb2.PutRequest(key=b"k", value=b"1", header=header))
            watch = channel.unary_stream(WATCH_METHOD, request_serializer=msgpack.packb,
                                         response_deserializer=msgpack.unpackb)
            events = watch({"stream_id": stream_id, "pkey": b"k", "key": b"k"})
            assert "created" in next(events)
            time.sleep(1.5)
            tables.Put(kv_rpc_pb2.PutRequest(key=b"k", value=b"2", header=header))
            change = next(events)
            events.cancel()
            return change

    change = await trio.to_thread.run_sync(watch_through_a_quiet_second)
    assert (change["type"], change["value"]) == ("put", b"2")
    (table_range,) = [r for index, r in gateway.tables._ranges.items() if index[1] == "quiet"]
    with trio.fail_after(10):
        while table_range._watchers:
            await trio.sleep(0.05)


def _preferred_first(first: GrpcGateway, second: GrpcGateway, stream: str, key: bytes):
    """The two servers, the one that the range of `key` in default/`stream` prefers first (it
    claims the range when asked; the other sends it there)."""
    ids = [f"127.0.0.1:{first.port}", f"127.0.0.1:{second.port}"]
    index = ("default", stream, range_of(key, StreamSettings().table_ranges))
    return (first, second) if preferred_server(index, ids) == ids[0] else (second, first)


@contextlib.asynccontextmanager
async def two_servers(start_cluster, tmp_path, stream: str):
    """Two gateways of one cluster, each a server with its own session, as (A, B): A is the one
    the range of b"k" in default/`stream` prefers (it claims the range when asked; B sends it
    there). Servers own claims through their sessions: they must learn that one ended, not
    renew it."""
    await start_cluster(URI, 3)
    async with bkclient.connect(URI, renew_session=False) as bk_a, bkclient.connect(URI, renew_session=False) as bk_b:
        async with trio.open_nursery() as nursery:
            yield _preferred_first(
                await nursery.start(GrpcGateway(bk_a, port=0, index_dir=str(tmp_path / "a")).run),
                await nursery.start(GrpcGateway(bk_b, port=0, index_dir=str(tmp_path / "b")).run), stream, b"k")
            nursery.cancel_scope.cancel()


async def test_a_watch_sent_to_a_server_that_does_not_own_the_range_is_answered_by_the_owner(
        start_cluster, tmp_path):
    stream_id = stream_id_of("default", "relayed")
    header = kv_rpc_pb2.RoutingHeader(stream_id=stream_id, r_key=b"k")
    async with two_servers(start_cluster, tmp_path, "relayed") as (a, b):
        def watch_through_b():
            with grpc.insecure_channel(f"127.0.0.1:{a.port}") as to_a, \
                    grpc.insecure_channel(f"127.0.0.1:{b.port}") as to_b:
                storage_pb2_grpc.RootRangeServiceStub(to_a).CreateStream(
                    storage_pb2.CreateStreamRequest(ns_name="default", name="relayed"))
                tables = kv_rpc_pb2_grpc.TableServiceStub(to_a)
                tables.Put(kv_rpc_pb2.PutRequest(key=b"k", value=b"1", header=header))     # A owns it
                watch = to_b.unary_stream(WATCH_METHOD, request_serializer=msgpack.packb,
                                          response_deserializer=msgpack.unpackb)
                events = watch({"stream_id": stream_id, "pkey": b"k", "key": b"k"})
                assert "created" in next(events)
                tables.Put(kv_rpc_pb2.PutRequest(key=b"k", value=b"2", header=header))
                change = next(events)
                events.cancel()
                return change

        with trio.fail_after(30):
            change = await trio.to_thread.run_sync(watch_through_b)
        assert (change["type"], change["value"]) == ("put", b"2")
        assert len(a.tables._ranges) == 1 and not b.tables._ranges      # B only relayed it
        # Over the servers' own channel (one watch call to A), and cancelling the client's
        # call ended A's watch too.
        assert b.peers.statistics().call_count == 1 and a.peer_server.statistics().call_count == 1
        (table_range,) = a.tables._ranges.values()
        with trio.fail_after(10):
            while table_range._watchers:
                await trio.sleep(0.05)


async def test_two_servers_share_ranges_and_one_takes_over_when_the_other_dies(start_cluster, tmp_path):
    """Server A owns the table's range; requests sent to B are forwarded to A. A's metastore
    session then expires (as when its process dies): B claims the range, fences A through the
    journal, rebuilds the state, and the table stays available with every acknowledged write."""
    async with two_servers(start_cluster, tmp_path, "shared") as (a, b):
        bk_a = a.tables._bk
        stream_id = stream_id_of("default", "shared")

        def table_calls(server, *puts):
            with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
                if puts and puts[0] == b"create":
                    from bookkeeper.proto import storage_pb2_grpc
                    storage_pb2_grpc.RootRangeServiceStub(channel).CreateStream(
                        storage_pb2.CreateStreamRequest(ns_name="default", name="shared"))
                    puts = puts[1:]
                tables = kv_rpc_pb2_grpc.TableServiceStub(channel)
                header = kv_rpc_pb2.RoutingHeader(stream_id=stream_id, r_key=b"k")
                for value in puts:
                    answer = tables.Put(kv_rpc_pb2.PutRequest(key=b"k", value=value, header=header))
                    assert answer.header.code == storage_pb2.SUCCESS
                return tables.Range(kv_rpc_pb2.RangeRequest(key=b"k", header=header)).kvs[0].value

        assert await trio.to_thread.run_sync(table_calls, a, b"create", b"1") == b"1"
        assert len(a.tables._ranges) == 1
        # Sent to B, served by A (B opened nothing).
        assert await trio.to_thread.run_sync(table_calls, b, b"2") == b"2"
        assert not b.tables._ranges
        bk_a.store.expire_session()

        def read_status(server):
            with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
                header = kv_rpc_pb2.RoutingHeader(stream_id=stream_id, r_key=b"k")
                answer = kv_rpc_pb2_grpc.TableServiceStub(channel).Range(
                    kv_rpc_pb2.RangeRequest(key=b"k", header=header), metadata=[("bk-forwarded", "1")])
                return answer.header.code
        # A's claim may be gone already: it no longer answers reads from its state (read lease).
        assert await trio.to_thread.run_sync(read_status, a) != storage_pb2.SUCCESS
        with trio.fail_after(30):
            while True:
                value = await trio.to_thread.run_sync(table_calls, b)
                if b.tables._ranges:
                    break
                await trio.sleep(0.1)
        assert value == b"2"
        assert await trio.to_thread.run_sync(table_calls, b, b"3") == b"3"
        with trio.fail_after(10):
            while a.tables._ranges:         # A stops serving once it sees its session gone
                await trio.sleep(0.1)


async def test_calls_forwarded_to_the_owner_look_it_up_once_and_go_on_without_a_task(start_cluster, tmp_path):
    """B remembers that A serves the range (OWNER_KNOWN_S): forwarding 40 calls asks the
    metastore about the range's owner once (plus once per OWNER_KNOWN_S the calls took), not
    40 times. Without the memory each call spawned a claim that read the owner's node."""
    stream_id = stream_id_of("default", "remembered")
    header = kv_rpc_pb2.RoutingHeader(stream_id=stream_id, r_key=b"k")
    async with two_servers(start_cluster, tmp_path, "remembered") as (a, b):
        lookups = []
        ownership = b.tables._ownership
        look_up = ownership.owner

        async def counted_owner(index):
            lookups.append(index)
            return await look_up(index)
        ownership.owner = counted_owner

        def calls_through_b() -> float:
            with grpc.insecure_channel(f"127.0.0.1:{a.port}") as to_a, \
                    grpc.insecure_channel(f"127.0.0.1:{b.port}") as to_b:
                storage_pb2_grpc.RootRangeServiceStub(to_a).CreateStream(
                    storage_pb2.CreateStreamRequest(ns_name="default", name="remembered"))
                kv_rpc_pb2_grpc.TableServiceStub(to_a).Put(kv_rpc_pb2.PutRequest(key=b"k", value=b"0", header=header))
                tables = kv_rpc_pb2_grpc.TableServiceStub(to_b)
                started = time.monotonic()
                for n in range(20):
                    put = tables.Put(kv_rpc_pb2.PutRequest(key=b"k", value=b"%d" % n, header=header))
                    assert put.header.code == storage_pb2.SUCCESS
                    got = tables.Range(kv_rpc_pb2.RangeRequest(key=b"k", header=header))
                    assert got.header.code == storage_pb2.SUCCESS and got.kvs[0].value == b"%d" % n
                return time.monotonic() - started

        with trio.fail_after(60):
            elapsed_s = await trio.to_thread.run_sync(calls_through_b)
        assert len(a.tables._ranges) == 1 and not b.tables._ranges      # B only relayed them
        assert b.peers.statistics().call_count == 40
        # Once B knew the owner and had a connection to it, it sent the calls on from the
        # gRPC handler itself, without a task per call.
        assert b.peers.statistics().submitted_call_count >= 36
        assert 1 <= len(lookups) <= 1 + elapsed_s / OWNER_KNOWN_S + 1, (len(lookups), elapsed_s)


async def test_the_library_table_objects_route_to_the_owner(gateway):
    bk = gateway.tables._bk
    await bk.streams.create_stream("default", "lib")
    table = await bk.open_table("lib")
    assert await table.put(b"k", b"v1") is None
    assert (await table.put(b"k", b"v2")).value == b"v1"
    assert (await table.get(b"k")).value == b"v2"
    assert await table.increment(b"n", 7) == 7 and (await table.get(b"n")).number_value == 7
    for lkey in (b"a", b"b", b"c"):
        await table.put(lkey, lkey.upper(), pkey=b"user-1")
    assert [kv.value for kv in await table.range(b"", pkey=b"user-1")] == [b"A", b"B", b"C"]
    assert [kv.key for kv in await table.range(b"b", pkey=b"user-1")] == [b"b", b"c"]
    assert await table.delete(b"a", pkey=b"user-1") == 1
    seen = []

    async def watch(task_status=trio.TASK_STATUS_IGNORED):
        task_status.started()
        async for event in table.watch(b"k"):
            seen.append(event["value"])
            if len(seen) == 2:
                return

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(watch)
            await trio.sleep(0.5)           # the watch reaches the server
            await table.put(b"k", b"v3")
            await table.delete(b"k")
    assert seen == [b"v3", b""]
    table.close()


async def test_a_watch_resumes_where_it_left_off_when_its_range_restarts(gateway):
    """The range under a watch stops twice (as when its owner changes); each time the watch
    opens again from its last revision, so the watcher sees every change once, in order,
    including changes made while it was reconnecting and several changes of one revision."""
    bk = gateway.tables._bk
    await bk.streams.create_stream("default", "resume")
    table = await bk.open_table("resume")
    seen = []
    expected = [b"1", b"2", b"3", b"4", b"5", b"6"]

    async def watch(task_status=trio.TASK_STATUS_IGNORED):
        task_status.started()
        async for event in table.watch(b"k"):
            seen.append(event["value"])
            if len(seen) == len(expected):
                return

    def stop_range():
        (table_range,) = [r for i, r in gateway.tables._ranges.items() if i[1] == "resume"]
        table_range.stop(ConnectionError("the test stopped the range"))

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(watch)
            await trio.sleep(0.5)           # the watch reaches the server
            await table.put(b"k", b"1")
            await table.put(b"k", b"2")
            while len(seen) < 2:
                await trio.sleep(0.05)
            stop_range()
            await table.put(b"k", b"3")     # while the watch is reconnecting (the range reopens)
            await table.put(b"k", b"4")
            while len(seen) < 4:
                await trio.sleep(0.05)
            stop_range()
            await trio.sleep(0.3)
            await table.put(b"k", b"5")
            await table.put(b"k", b"6")
    assert seen == expected
    table.close()


async def test_gets_skip_the_loop_only_while_the_read_lease_holds(gateway):
    """Tables.read_in_thread (what a Range handler tries first) answers only once the loop has
    confirmed the read lease, and stops at once when the metastore session is lost; the loop's
    own path then refuses too."""
    tables, bk = gateway.tables, gateway.tables._bk
    await bk.streams.create_stream("default", "leased")
    await tables.put("default", "leased", b"k", b"k", b"v")

    def read_in_thread():
        result = tables.read_in_thread("default", "leased", b"k", RangeRead(fold_key(b"k", b"k")))
        return result.kvs[0].value if result is not None else None
    assert await trio.to_thread.run_sync(read_in_thread) is None        # no read through the loop yet
    assert (await tables.get("default", "leased", b"k", b"k")).value == b"v"
    assert await trio.to_thread.run_sync(read_in_thread) == b"v"
    assert tables.read_in_thread("default", "leased", b"k", RangeRead(fold_key(b"k", b"missing"))).kvs == ()
    assert tables.read_in_thread("default", "other", b"k", RangeRead(fold_key(b"k", b"k"))) is None  # no settings
    bk.store.expire_session()
    assert await trio.to_thread.run_sync(read_in_thread) is None


async def test_a_gateway_cancelled_from_outside_journals_and_seals_what_it_was_given(start_cluster, tmp_path,
                                                                                     monkeypatch):
    """Cancelled while a put's journal entry is in flight and two more puts wait behind it,
    the gateway still journals the waiting puts and seals its ranges before it stops, and the
    next owner has all three. (The tasks that flush and seal the journal run until then: when
    the cancellation stopped them too, closing the range waited forever for its queue.)"""
    await start_cluster(URI, 3)
    stream_id = stream_id_of("default", "held")
    held: list[tuple] = []
    original_start_add = WriteHandle.start_add

    def start_add(handle, payload, on_done, **options):       # hold the first add of the table's journal
        stream = dict(handle.metadata.custom_metadata).get("stream", b"")
        if not held and stream.startswith(b"__tables/default~held~"):
            held.append((handle, payload, on_done))
        else:
            original_start_add(handle, payload, on_done, **options)
    monkeypatch.setattr(WriteHandle, "start_add", start_add)

    def put(port: int, key: bytes) -> None:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            if key == b"create":
                storage_pb2_grpc.RootRangeServiceStub(channel).CreateStream(
                    storage_pb2.CreateStreamRequest(ns_name="default", name="held"))
                return
            header = kv_rpc_pb2.RoutingHeader(stream_id=stream_id, r_key=b"k")
            with contextlib.suppress(grpc.RpcError):      # (answered, or cut off by the server's stop)
                kv_rpc_pb2_grpc.TableServiceStub(channel).Put(kv_rpc_pb2.PutRequest(key=key, value=b"v", header=header))

    serving, stopped = trio.CancelScope(), trio.Event()

    async def serve(task_status=trio.TASK_STATUS_IGNORED) -> None:
        with serving:
            async with bkclient.connect(URI, renew_session=False) as bk:
                await GrpcGateway(bk, port=0, index_dir=str(tmp_path / "first")).run(task_status=task_status)
        stopped.set()

    async with trio.open_nursery() as nursery:
        first = await nursery.start(serve)
        await trio.to_thread.run_sync(put, first.port, b"create")
        nursery.start_soon(trio.to_thread.run_sync, put, first.port, b"k1")
        with trio.fail_after(20):
            while not held:
                await trio.sleep(0.01)
        for key in (b"k2", b"k3"):
            nursery.start_soon(trio.to_thread.run_sync, put, first.port, key)
        with trio.fail_after(20):                      # they reach the range and wait behind k1
            while sum(len(r._journal._queue) for r in first.tables._ranges.values()) < 2:
                await trio.sleep(0.01)
        serving.cancel()
        handle, payload, on_done = held[0]
        original_start_add(handle, payload, on_done)   # k1's entry goes on, as the bookies answer
        with trio.move_on_after(20):
            await stopped.wait()
        if not stopped.is_set():
            first.tables.stop_all(RuntimeError("the test gave up waiting"))     # so the test can end
            pytest.fail("the cancelled gateway did not stop within 20 s")

    async with bkclient.connect(URI, renew_session=False) as bk:
        async with trio.open_nursery() as nursery:
            second = await nursery.start(GrpcGateway(bk, port=0, index_dir=str(tmp_path / "second")).run)
            values = [await second.tables.get("default", "held", b"k", key) for key in (b"k1", b"k2", b"k3")]
            nursery.cancel_scope.cancel()
    assert [kv.value if kv else None for kv in values] == [b"v"] * 3
