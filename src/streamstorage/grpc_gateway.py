"""The gRPC endpoint of stream storage (default 127.0.0.1:4181), speaking BookKeeper's own
services so the stock `apache-bookkeeper-client` package works against it, and `bk stream` /
`bk table` use it too:

    RootRangeService         namespaces and streams (create/get/delete)
    StorageContainerService  where a storage container is served: always here
    MetaRangeService         a stream's hash ranges
    TableService             range (get), put, delete, txn, increment on a table
    bk.table.Watch/Watch     ours (BookKeeper's protos have no watch): a server stream of changes,
                             msgpack-encoded, from a revision

The gRPC server is grpc.aio's, on an asyncio loop in a thread of its own
(streamstorage.asyncio_thread). The table calls are coroutines there: each hands its work to the
trio loop, where the Tables and Streams objects live, and awaits the answer
(streamstorage.grpc_bridge.AsyncioBridge: no thread blocks, and many calls cross per wakeup of
either loop), so the trio loop is never blocked and no lock is needed. Gets are the exception: a
get is answered in the asyncio loop itself from a snapshot of the range's index when the range
is served here (Tables.read_in_thread), without crossing to trio at all. A watch is an async
generator there too, fed by a task in trio. The rarer calls (namespaces, streams) are plain
functions that gRPC runs in its thread pool, each handing its work to trio with TrioBridge.
Routing is by the stream id (a hash of the stream's name) and routing key the client sends; a
table key is (r_key, key), BookKeeper's (pKey, lKey).
"""

from __future__ import annotations

import asyncio
import queue
from concurrent import futures
from typing import Awaitable, Callable

import grpc
import msgpack
import outcome
import trio
from bookkeeper.proto import (
    common_pb2, kv_rpc_pb2, kv_rpc_pb2_grpc, storage_pb2, storage_pb2_grpc, stream_pb2,
)

from bkcore.errors import BKException
from bkcore.stream.errors import (
    NamespaceExists, NamespaceNotEmpty, NamespaceNotFound, StreamException, StreamExists, StreamNotFound,
)
from bkcore.stream.segments import StreamSettings, stream_id_of
from bkcore.table.commands import KeyNotFound, TableError, Txn, unfold_key
from bkcore.table.ownership import NotOwner
from bkcore.table.watch_rpc import (
    ERROR_MESSAGE_HEADER, OWNER_HEADER, OWNER_ONLY_HEADER, TO_PKEY_END_HEADER, WATCH_METHOD,
)
from bkcore.table.service import Tables, range_of
from streamstorage.asyncio_thread import AsyncioThread
from streamstorage.grpc_bridge import AsyncioBridge, TrioBridge
from streamstorage.lmdb_kv import LmdbRangeIndexes
from streamstorage.peer_calls import PeerClient, PeerServer
from streamstorage.table_protocol import (
    compare_of, delete_fields, delete_of, increment_of, put_fields, put_of, range_fields,
    range_read_of, response_op, txn_op_of,
)
from transports.service_nursery import open_service_nursery

DEFAULT_PORT = 4181
DEFAULT_NAMESPACE = "default"
WATCH_QUEUE_EVENTS = 10_000
_WATCH_END = object()

# TableStoreUtils.mvccCodeToStatusCode: ILLEGAL_OP and INVALID_ARGUMENT -> BAD_REQUEST,
# KEY_NOT_FOUND -> KEY_NOT_FOUND.
_STATUS = [
    (KeyNotFound, storage_pb2.KEY_NOT_FOUND), (TableError, storage_pb2.BAD_REQUEST),
    (ValueError, storage_pb2.BAD_REQUEST),
    (NamespaceExists, storage_pb2.NAMESPACE_EXISTS), (NamespaceNotFound, storage_pb2.NAMESPACE_NOT_FOUND),
    (NamespaceNotEmpty, storage_pb2.ILLEGAL_OP), (StreamExists, storage_pb2.STREAM_EXISTS),
    (StreamNotFound, storage_pb2.STREAM_NOT_FOUND),
]


def status_of(error: BaseException) -> int:
    """The BookKeeper status code for an error (INTERNAL_SERVER_ERROR, which clients retry, for
    anything transient such as a range changing owner)."""
    for cls, code in _STATUS:
        if isinstance(error, cls):
            return code
    return storage_pb2.INTERNAL_SERVER_ERROR


def refused(response, error: BaseException, context):
    """`response` (which carries the status code), with the reason in the trailing metadata
    (and, for NotOwner, the owner: OWNER_HEADER)."""
    trailing = [(ERROR_MESSAGE_HEADER, str(error).encode())]
    if isinstance(error, NotOwner):
        trailing.append((OWNER_HEADER, error.owner))
    context.set_trailing_metadata(tuple(trailing))
    return response


def settings_from_conf(conf: stream_pb2.StreamConfiguration, base: StreamSettings = StreamSettings()) -> StreamSettings:
    size = conf.rolling_policy.size_policy.max_segment_size
    interval = conf.rolling_policy.time_policy.interval_seconds
    retention_minutes = conf.retention_policy.time_policy.retention_minutes
    return StreamSettings(
        base.ensemble_size, base.write_quorum_size, base.ack_quorum_size,
        segment_rolling_size=size if size > 0 else base.segment_rolling_size,
        segment_rolling_interval_s=interval if interval > 0 else base.segment_rolling_interval_s,
        retention_s=retention_minutes * 60 if retention_minutes > 0 else base.retention_s,
        retention_size=base.retention_size,
        table_ranges=conf.initial_num_ranges if conf.initial_num_ranges > 0 else base.table_ranges)


def conf_from_settings(settings: StreamSettings) -> stream_pb2.StreamConfiguration:
    return stream_pb2.StreamConfiguration(
        key_type=stream_pb2.HASH, min_num_ranges=settings.table_ranges, initial_num_ranges=settings.table_ranges,
        rolling_policy=stream_pb2.SegmentRollingPolicy(
            size_policy=stream_pb2.SizeBasedSegmentRollingPolicy(max_segment_size=settings.segment_rolling_size),
            time_policy=stream_pb2.TimeBasedSegmentRollingPolicy(interval_seconds=settings.segment_rolling_interval_s)),
        retention_policy=stream_pb2.RetentionPolicy(time_policy=stream_pb2.TimeBasedRetentionPolicy(
            retention_minutes=settings.retention_s // 60 if settings.retention_s else -1)),
        storage_type=stream_pb2.TABLE)


def stream_properties(namespace: str, stream: str, settings: StreamSettings) -> stream_pb2.StreamProperties:
    return stream_pb2.StreamProperties(stream_id=stream_id_of(namespace, stream), storage_container_id=0,
                                       stream_name=stream, stream_conf=conf_from_settings(settings))


class RootRangeServicer(storage_pb2_grpc.RootRangeServiceServicer):
    def __init__(self, bridge: TrioBridge, streams, tables: Tables) -> None:
        self._bridge, self._streams, self._tables = bridge, streams, tables

    def _call(self, response_cls, fn, *args, fields, context):
        try:
            return response_cls(code=storage_pb2.SUCCESS, **fields(self._bridge.run(fn, *args)))
        except (StreamException, BKException, ValueError, OSError) as exc:
            return refused(response_cls(code=status_of(exc)), exc, context)

    def CreateNamespace(self, request, context):
        settings = settings_from_conf(request.ns_conf.default_stream_conf)

        async def create():
            await self._streams.create_namespace(request.name, settings)
            return settings
        return self._call(storage_pb2.CreateNamespaceResponse, create,
                          fields=lambda s: {"ns_props": _namespace_properties(request.name, s)}, context=context)

    def GetNamespace(self, request, context):
        return self._call(storage_pb2.GetNamespaceResponse, self._streams.catalog.namespace_settings, request.name,
                          fields=lambda s: {"ns_props": _namespace_properties(request.name, s)}, context=context)

    def DeleteNamespace(self, request, context):
        return self._call(storage_pb2.DeleteNamespaceResponse, self._streams.delete_namespace, request.name,
                          fields=lambda _: {}, context=context)

    def CreateStream(self, request, context):
        namespace, stream = request.ns_name or DEFAULT_NAMESPACE, request.name

        async def create():
            base = await self._streams.catalog.namespace_settings(namespace)
            settings = settings_from_conf(request.stream_conf, base)
            await self._streams.create_stream(namespace, stream, settings)
            return settings
        return self._call(storage_pb2.CreateStreamResponse, create,
                          fields=lambda s: {"stream_props": stream_properties(namespace, stream, s)}, context=context)

    async def _stream(self, namespace: str, stream: str):
        """The stream's metadata; NamespaceNotFound when its namespace is missing too
        (RootRangeStoreImpl.getStream and deleteStream answer NAMESPACE_NOT_FOUND first)."""
        try:
            return await self._streams.catalog.get_stream(namespace, stream)
        except StreamNotFound:
            await self._streams.catalog.namespace_settings(namespace)
            raise

    def GetStream(self, request, context):
        async def get():
            if request.HasField("stream_name"):
                namespace = request.stream_name.namespace_name or DEFAULT_NAMESPACE
                stream = request.stream_name.stream_name
            else:
                namespace, stream = await self._streams.catalog.stream_by_id(request.stream_id)
            metadata = await self._stream(namespace, stream)
            return namespace, stream, metadata.settings
        return self._call(storage_pb2.GetStreamResponse, get,
                          fields=lambda r: {"stream_props": stream_properties(*r)}, context=context)

    def DeleteStream(self, request, context):
        namespace, stream = request.ns_name or DEFAULT_NAMESPACE, request.name

        async def delete():
            await self._stream(namespace, stream)
            await self._tables.drop_table(namespace, stream)
            await self._streams.delete_stream(namespace, stream)
        return self._call(storage_pb2.DeleteStreamResponse, delete, fields=lambda _: {}, context=context)


def _namespace_properties(name: str, settings: StreamSettings) -> stream_pb2.NamespaceProperties:
    return stream_pb2.NamespaceProperties(namespace_id=stream_id_of(name, ""), namespace_name=name,
                                          default_stream_conf=conf_from_settings(settings))


class StorageContainerServicer(storage_pb2_grpc.StorageContainerServiceServicer):
    def __init__(self, host: str, port: int) -> None:
        self._endpoint = common_pb2.Endpoint(hostname=host, port=port)

    def GetStorageContainerEndpoint(self, request, context):
        return storage_pb2.GetStorageContainerEndpointResponse(status_code=storage_pb2.SUCCESS, responses=[
            storage_pb2.OneStorageContainerEndpointResponse(
                status_code=storage_pb2.SUCCESS, endpoint=storage_pb2.StorageContainerEndpoint(
                    storage_container_id=one.storage_container, revision=one.revision,
                    rw_endpoint=self._endpoint, ro_endpoint=self._endpoint))
            for one in request.requests])


class MetaRangeServicer(storage_pb2_grpc.MetaRangeServiceServicer):
    def __init__(self, bridge: TrioBridge, streams) -> None:
        self._bridge, self._streams = bridge, streams

    def GetActiveRanges(self, request, context):
        async def ranges():
            namespace, stream = await self._streams.catalog.stream_by_id(request.stream_id)
            return (await self._streams.catalog.get_stream(namespace, stream)).settings.table_ranges
        try:
            count = self._bridge.run(ranges)
        except (StreamException, BKException) as exc:
            return storage_pb2.GetActiveRangesResponse(code=status_of(exc))
        span = 2**64 // count
        return storage_pb2.GetActiveRangesResponse(code=storage_pb2.SUCCESS, ranges=[
            storage_pb2.RelatedRanges(props=stream_pb2.RangeProperties(
                start_hash_key=-2**63 + i * span, end_hash_key=2**63 - 1 if i == count - 1 else -2**63 + (i + 1) * span,
                range_id=i, storage_container_id=0)) for i in range(count)])


class TableServicer(kv_rpc_pb2_grpc.TableServiceServicer):
    """TableService: each call becomes our command (streamstorage.table_protocol), run in the
    loop. A refusal answers BookKeeper's status code in the response header, and its reason in
    the trailing metadata ERROR_MESSAGE_HEADER (which the stock client does not read).

    A call for a range another server owns goes there over the servers' own channel
    (streamstorage.peer_calls: many calls per frame), once: when the server it reaches does
    not own the range either (it just moved), the client gets INTERNAL_SERVER_ERROR, which it
    retries. A thick client's call (OWNER_ONLY_HEADER) is not forwarded: the refusal names the
    owner instead (OWNER_HEADER), and the client goes there itself."""

    def __init__(self, bridge: AsyncioBridge, streams, tables: Tables, peers: PeerClient) -> None:
        self._bridge, self._streams, self._tables, self._peers = bridge, streams, tables, peers
        self._names: dict[int, tuple[str, str]] = {}     # ids are hashes of names: never stale

    async def _stream_of(self, stream_id: int) -> tuple[str, str]:
        name = self._names.get(stream_id)
        if name is None:
            name = self._names[stream_id] = await self._streams.catalog.stream_by_id(stream_id)
        return name

    async def _run(self, request, response_cls, operate: Callable[[str, str, bytes, bool], Awaitable[dict]],
                   context):
        """Resolve the table and pkey from the routing header, run `operate(ns, stream, pkey,
        forward)` in the trio loop and build the response (with its header) from what it
        returns. forward: whether a range owned elsewhere is served through its owner (False
        for a thick client's call: NotOwner answers it)."""
        header = request.header
        forward = _forwards(context)

        async def call():
            namespace, stream = await self._stream_of(header.stream_id)
            return await operate(namespace, stream, header.r_key or request.key, forward)
        try:
            fields = await self._bridge.call(call)
            return response_cls(header=_response_header(header, storage_pb2.SUCCESS), **fields)
        except _REFUSED_TABLE_ERRORS as exc:
            # (NotOwner here: the owner the call was sent to no longer owns the range.)
            return refused(response_cls(header=_response_header(header, status_of(exc))), exc, context)

    async def _run_command(self, request, response_cls, command_of: Callable[[bytes], object],
                           fields_of: Callable[[object, object], dict], context):
        """A command of the routing header's table: command_of(pkey) built here, run in the trio
        loop (queued straight into its range when that is served here, else through
        _execute), and the response built here from fields_of(command, result)."""
        header = request.header
        forward = _forwards(context)
        try:
            name = self._names.get(header.stream_id)
            if name is None:
                name = await self._bridge.call(self._stream_of, header.stream_id)
            pkey = header.r_key or request.key
            command = command_of(pkey)
            result = await self._bridge.call_fast(self._execute_now, self._execute, *name, pkey, command, forward)
            return response_cls(header=_response_header(header, storage_pb2.SUCCESS), **fields_of(command, result))
        except _REFUSED_TABLE_ERRORS as exc:
            return refused(response_cls(header=_response_header(header, status_of(exc))), exc, context)

    def _execute_now(self, namespace: str, stream: str, pkey: bytes, command, forward: bool, on_done) -> bool:
        """In trio, without a task: the command queued in its range if that is served here
        (Tables.submit_here); False leaves it to _execute."""
        try:
            return self._tables.submit_here(namespace, stream, pkey, command, on_done)
        except NotOwner:
            return False        # (handed over meanwhile: _execute waits for the handover, then forwards)

    async def _execute(self, namespace: str, stream: str, pkey: bytes, command, forward: bool):
        """In trio: Tables.execute here, or at the range's owner (if `forward`)."""
        return await _here_or_at_owner(self._tables.execute, self._peers.execute, namespace, stream, pkey, command,
                                       forward)

    async def _read(self, namespace: str, stream: str, pkey: bytes, read, forward: bool):
        """In trio: Tables.read here, or at the range's owner (if `forward`)."""
        return await _here_or_at_owner(self._tables.read, self._peers.read, namespace, stream, pkey, read, forward)

    async def Range(self, request, context):
        to_pkey_end = any(key == TO_PKEY_END_HEADER for key, _ in context.invocation_metadata())
        answer = self._range_in_thread(request, to_pkey_end)
        if answer is not None:
            return answer

        async def operate(namespace, stream, pkey, forward):
            read = range_read_of(pkey, request, to_pkey_end=to_pkey_end)
            return range_fields(await self._read(namespace, stream, pkey, read, forward))
        return await self._run(request, kv_rpc_pb2.RangeResponse, operate, context)

    def _range_in_thread(self, request, to_pkey_end: bool) -> kv_rpc_pb2.RangeResponse | None:
        """A read answered in the asyncio loop, without a trip through trio, when the table's
        range is served here and needs nothing of trio's loop (Tables.read_in_thread)."""
        header = request.header
        name = self._names.get(header.stream_id)
        if name is None:
            return None
        pkey = header.r_key or request.key
        try:
            read = range_read_of(pkey, request, to_pkey_end=to_pkey_end)
        except TableError:
            return None             # the loop's path answers it
        result = self._tables.read_in_thread(*name, pkey, read)
        if result is None:
            return None
        return kv_rpc_pb2.RangeResponse(header=_response_header(header, storage_pb2.SUCCESS), **range_fields(result))

    async def Put(self, request, context):
        return await self._run_command(request, kv_rpc_pb2.PutResponse, lambda pkey: put_of(pkey, request),
                                       lambda put, result: put_fields(result), context)

    async def Delete(self, request, context):
        return await self._run_command(request, kv_rpc_pb2.DeleteRangeResponse, lambda pkey: delete_of(pkey, request),
                                       delete_fields, context)

    async def Increment(self, request, context):
        return await self._run_command(request, kv_rpc_pb2.IncrementResponse,
                                       lambda pkey: increment_of(pkey, request),
                                       lambda increment, result: {"total_amount": result.total or 0}, context)

    async def Txn(self, request, context):
        def txn_of(pkey: bytes) -> Txn:
            return Txn(tuple(compare_of(pkey, c) for c in request.compare),
                       tuple(txn_op_of(pkey, op) for op in request.success),
                       tuple(txn_op_of(pkey, op) for op in request.failure))

        def fields_of(txn: Txn, result) -> dict:
            ops = txn.success if result.succeeded else txn.failure
            return {"succeeded": result.succeeded,
                    "responses": [response_op(op, r, request.header, status_of) for op, r in zip(ops, result.results)]}
        return await self._run_command(request, kv_rpc_pb2.TxnResponse, txn_of, fields_of, context)


# What a table call answers as a refusal with its status code (status_of), not as a gRPC error.
_REFUSED_TABLE_ERRORS = (StreamException, BKException, TableError, NotOwner, ValueError, OSError, RuntimeError)


def _forwards(context) -> bool:
    """Whether a call for a range owned elsewhere is served through its owner: not for a thick
    client's (OWNER_ONLY_HEADER), which NotOwner answers."""
    return not any(key == OWNER_ONLY_HEADER for key, _ in context.invocation_metadata())


async def _here_or_at_owner(here, at_owner, namespace: str, stream: str, pkey: bytes, operation, forward: bool):
    """here(namespace, stream, pkey, operation); when another server owns the range and
    `forward`, at_owner(that server, namespace, stream, pkey, operation) instead."""
    try:
        return await here(namespace, stream, pkey, operation)
    except NotOwner as exc:
        if not forward:
            raise
        return await at_owner(exc.owner, namespace, stream, pkey, operation)


def _response_header(header: kv_rpc_pb2.RoutingHeader, code: int) -> kv_rpc_pb2.ResponseHeader:
    routing = kv_rpc_pb2.RoutingHeader(stream_id=header.stream_id, range_id=header.range_id, r_key=header.r_key)
    return kv_rpc_pb2.ResponseHeader(code=code, routing_header=routing)


class _WatchHandler:
    """bk.table.Watch/Watch: request {"stream_id" | "namespace"+"stream", "pkey", "key",
    "range_end", "start_revision"}; answers first {"created": True, "revision": r} (every change
    above revision r follows), then one dict per change, or {"error": ..., "code": ..., "kind": ...}.

    watch() is an async generator of the asyncio loop; the watch itself is a task of the trio
    loop (in `nursery`) that hands its answers over a thread-safe queue and wakes the asyncio
    side for them. When the call ends (the client went away, the server stops) the generator is
    closed and cancels that task. (A plain generator would run in grpc.aio's thread pool, whose
    context for it has neither is_active() nor callbacks: an idle watch failed after a second,
    and the thread of one that yielded after its client left waited forever.)

    A watch of a range owned elsewhere is that owner's watch, over the servers' own channel
    (PeerClient.watch): its changes come from the owner as they happen."""

    def __init__(self, bridge: TrioBridge, streams, tables: Tables, peers: PeerClient, nursery: trio.Nursery) -> None:
        self._bridge, self._streams, self._tables, self._nursery = bridge, streams, tables, nursery
        self._peers = peers

    async def watch(self, request: dict, context):
        loop = asyncio.get_running_loop()
        # Answers from the trio task, in order, _WATCH_END last. Bounded: the task ends the watch
        # once WATCH_QUEUE_EVENTS are waiting (a watcher that fell behind watches again).
        answers: queue.Queue = queue.Queue()
        arrived = asyncio.Event()        # set (from trio) after each answer put in `answers`
        scope = trio.CancelScope()

        def answer(item) -> None:        # in the trio loop
            answers.put(item)
            loop.call_soon_threadsafe(arrived.set)

        async def pump() -> None:
            self._nursery.start_soon(self._pump, request, scope, answers, answer)

        async def stop() -> None:
            scope.cancel()

        def started(result: outcome.Outcome) -> None:
            if isinstance(result, outcome.Error):      # the server is stopping: no task to start
                answer({"error": str(result.error), "code": status_of(result.error),
                        "kind": type(result.error).__name__})
                answer(_WATCH_END)

        self._bridge.start(pump, on_done=started)
        try:
            while True:
                arrived.clear()
                while not answers.empty():
                    item = answers.get_nowait()
                    if item is _WATCH_END:
                        return
                    yield item
                await arrived.wait()
        finally:
            self._bridge.start(stop, on_done=lambda result: None)     # (a scope can always be cancelled)

    async def _pump(self, request: dict, scope: trio.CancelScope, answers: queue.Queue, answer) -> None:
        """In the trio loop: the watch's answers, until it ends or `scope` is cancelled."""
        try:
            with scope:
                if "stream_id" in request:
                    namespace, stream = await self._streams.catalog.stream_by_id(request["stream_id"])
                else:
                    namespace, stream = request.get("namespace") or DEFAULT_NAMESPACE, request["stream"]
                key = request["key"]
                started = lambda revision: answer({"created": True, "revision": revision})  # noqa: E731
                async for event in self._watch_here_or_at_owner(
                        namespace, stream, request.get("pkey") or key, key, request.get("range_end"),
                        start_revision=request.get("start_revision", 0), started=started):
                    if answers.qsize() >= WATCH_QUEUE_EVENTS:
                        raise RuntimeError("the watcher fell too far behind; watch again from the next revision")
                    answer({"type": event.kind, "key": unfold_key(event.kv.key)[1], "value": event.kv.value,
                            "revision": event.revision,
                            # BookKeeper's version, from 0 (streamstorage.table_protocol)
                            "version": event.kv.version - 1 if event.kind == "put" else 0,
                            "is_number": event.kv.is_number, "number": event.kv.number,
                            "prev_value": event.prev_kv.value if event.prev_kv else None})
        except Exception as exc:      # noqa: BLE001 - any failure ends the watch with its reason
            answer({"error": str(exc), "code": status_of(exc), "kind": type(exc).__name__})
        finally:
            answer(_WATCH_END)      # also when cancelled: the call ends


    async def _watch_here_or_at_owner(self, namespace: str, stream: str, pkey: bytes, key: bytes,
                                      range_end: bytes | None, *, start_revision: int, started):
        """Tables.watch here; if another server owns the range, that server's watch. (Only a
        watch that has not started moves: one that NotOwner ends later, its range handed over,
        ends with that error, and its client watches again from where it was.)"""
        is_started = False

        def started_here(revision: int) -> None:
            nonlocal is_started
            is_started = True
            started(revision)
        try:
            async for event in self._tables.watch(namespace, stream, pkey, key, range_end,
                                                  start_revision=start_revision, started=started_here):
                yield event
            return
        except NotOwner as exc:
            if is_started:
                raise
            owner = exc.owner
        async for event in self._peers.watch(owner, namespace, stream, pkey, key, range_end,
                                             start_revision=start_revision, started=started):
            yield event


class GrpcGateway:
    def __init__(self, bk, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT, threads: int = 32,
                 checkpoint_every: int | None = None, index_dir: str | None = None,
                 shared_port: int | None = None, peer_port: int = 0) -> None:
        """index_dir: where the table ranges served here keep their lmdb indexes (rebuilt from
        the range journals whenever a range is opened); None keeps them in memory.

        port is this server's own (its id among the servers, where the others forward what it
        owns: no other process may listen there); shared_port, when given, is also listened on
        with SO_REUSEPORT, by every server of the cluster, so that clients that know one address
        (the stock client) are spread over them by the kernel, one connection at a time.
        peer_port is where the other servers send the calls for ranges this one owns
        (streamstorage.peer_calls; 0: a free port, in self.peer_port once listening)."""
        self._bk = bk
        self._index_dir = index_dir
        self.host, self.port = host, port
        self.shared_port = shared_port
        self.peer_port = peer_port
        self._threads = threads
        self._checkpoint_every = checkpoint_every
        self._pool: futures.ThreadPoolExecutor | None = None
        self.tables: Tables | None = None
        # The servers' own channel, once running: calls for ranges owned elsewhere go out on
        # `peers`, the other servers' come in on `peer_server` (their statistics() say how many).
        self.peers: PeerClient | None = None
        self.peer_server: PeerServer | None = None

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled, then stop in order: the watches and the other servers'
        calls at once (each watch stream ends, as when its range moves), the gRPC server (other calls in flight get a second to
        finish), then the ranges (sealing their journals). The last two need the tasks that
        serve the ranges, so those run in a service nursery, stopped only after that."""
        streams = self._bk.streams
        try:
            await streams.create_namespace(DEFAULT_NAMESPACE)
        except NamespaceExists:
            pass
        loop_thread = await AsyncioThread.of_process()
        server = None
        try:
            # The watches stop first, at once (their tasks are not in the service nursery): a
            # watch stream still open would hold the server's stop for its whole grace. So do
            # the calls from and to the other servers (those waiting fail; clients retry).
            async with open_service_nursery() as nursery, trio.open_nursery() as watches:
                try:
                    server = await loop_thread.run(self._listen)
                    self.tables = Tables(self._bk, nursery, checkpoint_every=self._checkpoint_every,
                                         server_id=f"{self.host}:{self.port}",
                                         indexes=LmdbRangeIndexes(self._index_dir) if self._index_dir else None)
                    self.peer_server = await watches.start(PeerServer(self.tables, host=self.host,
                                                                      port=self.peer_port).run)
                    self.peer_port = self.peer_server.port
                    self.peers = peers = PeerClient(store=self._bk.store, root=self._bk.layout.root,
                                                    nursery=watches)
                    trio_bridge = TrioBridge(trio.lowlevel.current_trio_token())
                    self._add_services(server, trio_bridge, AsyncioBridge(trio_bridge, loop_thread.loop),
                                       watches, peers)
                    await loop_thread.run(server.start)
                    await self.tables.register(peer_address=f"{self.host}:{self.peer_port}")
                    task_status.started(self)
                    await trio.sleep_forever()
                finally:
                    with trio.CancelScope(shield=True):
                        if server is not None:
                            await loop_thread.run(server.stop, 1)
                        if self.tables is not None:
                            await self.tables.close()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=False)

    async def _listen(self):
        """In the asyncio loop: a grpc.aio server bound to the port (not serving yet)."""
        self._pool = futures.ThreadPoolExecutor(max_workers=self._threads)     # for the plain (sync) handlers
        # gRPC turns SO_REUSEPORT on by default: left on, a second server started on a port in
        # use would share it (and this server's id) silently. Only the shared port needs it.
        server = grpc.aio.server(migration_thread_pool=self._pool,
                                 options=[("grpc.so_reuseport", 1 if self.shared_port else 0)])
        bound = server.add_insecure_port(f"{self.host}:{self.port}")
        if bound == 0:
            raise OSError(f"cannot listen on {self.host}:{self.port} for gRPC (is another server there?)")
        if self.shared_port and server.add_insecure_port(f"{self.host}:{self.shared_port}") == 0:
            raise OSError(f"cannot listen on the shared port {self.host}:{self.shared_port} (is another "
                          f"program there?)")
        self.port = bound
        return server

    def _add_services(self, server, trio_bridge: TrioBridge, asyncio_bridge: AsyncioBridge,
                      watches: trio.Nursery, peers: PeerClient) -> None:
        streams = self._bk.streams
        storage_pb2_grpc.add_RootRangeServiceServicer_to_server(
            RootRangeServicer(trio_bridge, streams, self.tables), server)
        storage_pb2_grpc.add_StorageContainerServiceServicer_to_server(
            StorageContainerServicer(self.host, self.shared_port or self.port), server)
        storage_pb2_grpc.add_MetaRangeServiceServicer_to_server(MetaRangeServicer(trio_bridge, streams), server)
        kv_rpc_pb2_grpc.add_TableServiceServicer_to_server(TableServicer(asyncio_bridge, streams, self.tables, peers),
                                                           server)
        watch = grpc.unary_stream_rpc_method_handler(
            _WatchHandler(trio_bridge, streams, self.tables, peers, watches).watch,
            request_deserializer=lambda data: msgpack.unpackb(data, raw=False),
            response_serializer=lambda item: msgpack.packb(item, use_bin_type=True))
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("bk.table.Watch", {"Watch": watch})])


__all__ = ["GrpcGateway", "DEFAULT_PORT", "WATCH_METHOD", "range_of"]
