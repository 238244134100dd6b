"""The gRPC endpoint of stream storage (default 127.0.0.1:4181), speaking BookKeeper's own
services so the stock `apache-bookkeeper-client` package works against it, and `bk stream` /
`bk table` use it too:

    RootRangeService         namespaces and streams (create/get/delete)
    StorageContainerService  where a storage container is served: always here
    MetaRangeService         a stream's hash ranges
    TableService             range (get), put, delete, txn, increment on a table
    bk.table.Watch/Watch     ours (BookKeeper's protos have no watch): a server stream of changes,
                             msgpack-encoded, from a revision
    bk.storage.Catalog       ours (BookKeeper's protos cannot list): the namespaces, and the
                             streams of one, msgpack-encoded (CatalogLister)

The gRPC server is bktransports.grpc_trio's, in the trio loop where the Tables and Streams objects
live: a call never leaves the loop, and nothing needs a lock. The table calls take no task of
their own when they can: a put, delete, increment or txn whose range is served here is queued
straight into that range (Tables.submit_here) and answered by a callback once its journal entry
is durable; a get whose range is served here is answered at once from a snapshot of the range's
index (Tables.read_in_thread); a call for a range whose owner elsewhere is known is sent there at
once (PeerClient.submit) and answered by the callback its answer runs. Anything else (a range
still to open or to look up, being handed over; the rarer calls on namespaces and streams) runs
as a task. A watch is a task that
sends each change as it comes.
Routing is by the stream id (a hash of the stream's name) and routing key the client sends; a
table key is (r_key, key), BookKeeper's (pKey, lKey).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from typing import Awaitable, Callable

import msgpack
import trio
from bookkeeper.proto import common_pb2, kv_rpc_pb2, storage_pb2, stream_pb2

from bkcore.errors import BKException
from bkcore.stream.errors import (
    NamespaceExists, NamespaceNotEmpty, NamespaceNotFound, StreamException, StreamExists, StreamNotFound,
)
from bkcore.stream.segments import StreamSettings, stream_id_of
from bkcore.table.commands import KeyNotFound, TableError, Txn, unfold_key
from bkcore.table.ownership import NotOwner
from bkcore.table.range import WatchTooSlow
from bkcore.table.watch_rpc import (
    ERROR_MESSAGE_HEADER, LIST_NAMESPACES_METHOD, LIST_STREAMS_METHOD, OWNER_HEADER, OWNER_ONLY_HEADER,
    PREFIX_HEADER, PUT_TTL_MS_HEADER, TO_PKEY_END_HEADER, WATCH_METHOD,
)
from bkcore.table.service import Tables, range_of
from streamstorage.lmdb_kv import LmdbRangeIndexes
from streamstorage.peer_calls import PeerClient, PeerServer
from streamstorage.table_protocol import (
    RangeOptions, compare_of, delete_fields, delete_of, increment_of, put_fields, put_of, range_fields,
    range_read_of, response_op, txn_op_of,
)
from bktransports.grpc_trio import GrpcServer, ServerStream, Unary
from bktransports.service_nursery import open_service_nursery

DEFAULT_PORT = 4181
DEFAULT_NAMESPACE = "default"
# How long calls in flight may take to finish once the server stops (new ones are refused).
STOP_GRACE_S = 1.0

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


def _pkey_of(request) -> bytes:
    """The routing key of a table call: its header's, else its key (a TxnRequest has none: an
    empty routing key routes it by b"")."""
    return request.header.r_key or getattr(request, "key", b"")


def refused(response, error: BaseException, call):
    """`response` (which carries the status code), with the reason in the trailing metadata
    (and, for NotOwner, the owner: OWNER_HEADER)."""
    call.trailers.append((ERROR_MESSAGE_HEADER, str(error).encode()))
    if isinstance(error, NotOwner):
        call.trailers.append((OWNER_HEADER, error.owner))
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


class RootRangeServicer:
    def __init__(self, streams, tables: Tables) -> None:
        self._streams, self._tables = streams, tables

    async def _call(self, response_cls, fn, *args, fields, call):
        try:
            return response_cls(code=storage_pb2.SUCCESS, **fields(await fn(*args)))
        except (StreamException, BKException, ValueError, OSError) as exc:
            return refused(response_cls(code=status_of(exc)), exc, call)

    async def CreateNamespace(self, request, call):
        settings = settings_from_conf(request.ns_conf.default_stream_conf)

        async def create():
            await self._streams.create_namespace(request.name, settings)
            return settings
        return await self._call(storage_pb2.CreateNamespaceResponse, create,
                                fields=lambda s: {"ns_props": _namespace_properties(request.name, s)}, call=call)

    async def GetNamespace(self, request, call):
        return await self._call(storage_pb2.GetNamespaceResponse, self._streams.catalog.namespace_settings,
                                request.name, fields=lambda s: {"ns_props": _namespace_properties(request.name, s)},
                                call=call)

    async def DeleteNamespace(self, request, call):
        return await self._call(storage_pb2.DeleteNamespaceResponse, self._streams.delete_namespace, request.name,
                                fields=lambda _: {}, call=call)

    async def CreateStream(self, request, call):
        namespace, stream = request.ns_name or DEFAULT_NAMESPACE, request.name

        async def create():
            base = await self._streams.catalog.namespace_settings(namespace)
            settings = settings_from_conf(request.stream_conf, base)
            await self._streams.create_stream(namespace, stream, settings)
            return settings
        return await self._call(storage_pb2.CreateStreamResponse, create,
                                fields=lambda s: {"stream_props": stream_properties(namespace, stream, s)}, call=call)

    async def _stream(self, namespace: str, stream: str):
        """The stream's metadata; NamespaceNotFound when its namespace is missing too
        (RootRangeStoreImpl.getStream and deleteStream answer NAMESPACE_NOT_FOUND first)."""
        try:
            return await self._streams.catalog.get_stream(namespace, stream)
        except StreamNotFound:
            await self._streams.catalog.namespace_settings(namespace)
            raise

    async def GetStream(self, request, call):
        async def get():
            if request.HasField("stream_name"):
                namespace = request.stream_name.namespace_name or DEFAULT_NAMESPACE
                stream = request.stream_name.stream_name
            else:
                namespace, stream = await self._streams.catalog.stream_by_id(request.stream_id)
            metadata = await self._stream(namespace, stream)
            return namespace, stream, metadata.settings
        return await self._call(storage_pb2.GetStreamResponse, get,
                                fields=lambda r: {"stream_props": stream_properties(*r)}, call=call)

    async def DeleteStream(self, request, call):
        namespace, stream = request.ns_name or DEFAULT_NAMESPACE, request.name

        async def delete():
            await self._stream(namespace, stream)
            await self._tables.drop_table(namespace, stream)
            await self._streams.delete_stream(namespace, stream)
        return await self._call(storage_pb2.DeleteStreamResponse, delete, fields=lambda _: {}, call=call)


def _namespace_properties(name: str, settings: StreamSettings) -> stream_pb2.NamespaceProperties:
    return stream_pb2.NamespaceProperties(namespace_id=stream_id_of(name, ""), namespace_name=name,
                                          default_stream_conf=conf_from_settings(settings))


class StorageContainerServicer:
    def __init__(self, host: str, port: int) -> None:
        self._endpoint = common_pb2.Endpoint(hostname=host, port=port)

    async def GetStorageContainerEndpoint(self, request, call):
        return storage_pb2.GetStorageContainerEndpointResponse(status_code=storage_pb2.SUCCESS, responses=[
            storage_pb2.OneStorageContainerEndpointResponse(
                status_code=storage_pb2.SUCCESS, endpoint=storage_pb2.StorageContainerEndpoint(
                    storage_container_id=one.storage_container, revision=one.revision,
                    rw_endpoint=self._endpoint, ro_endpoint=self._endpoint))
            for one in request.requests])


class MetaRangeServicer:
    def __init__(self, streams) -> None:
        self._streams = streams

    async def GetActiveRanges(self, request, call):
        try:
            namespace, stream = await self._streams.catalog.stream_by_id(request.stream_id)
            count = (await self._streams.catalog.get_stream(namespace, stream)).settings.table_ranges
        except (StreamException, BKException) as exc:
            return storage_pb2.GetActiveRangesResponse(code=status_of(exc))
        span = 2**64 // count
        return storage_pb2.GetActiveRangesResponse(code=storage_pb2.SUCCESS, ranges=[
            storage_pb2.RelatedRanges(props=stream_pb2.RangeProperties(
                start_hash_key=-2**63 + i * span, end_hash_key=2**63 - 1 if i == count - 1 else -2**63 + (i + 1) * span,
                range_id=i, storage_container_id=0)) for i in range(count)])


class TableServicer:
    """TableService: each call becomes our command (streamstorage.table_protocol), run in the
    loop. A refusal answers BookKeeper's status code in the response header, and its reason in
    the trailing metadata ERROR_MESSAGE_HEADER (which the stock client does not read).

    A call for a range another server owns goes there over the servers' own channel
    (streamstorage.peer_calls: many calls per frame). Where a range is served is remembered for
    a while (Tables: OWNER_KNOWN_S), not asked of the metastore at each call. When the server a
    call reaches has lost the range meanwhile, the owner is looked up again and the call sent
    once more (see _here_or_at_owner); when that fails too, the client gets
    INTERNAL_SERVER_ERROR, which it retries. A thick client's call (OWNER_ONLY_HEADER) is not
    forwarded: the refusal names the owner instead (OWNER_HEADER), and the client goes there
    itself.

    Every method here is a callback-style handler (grpc_trio's `start`): it answers at once
    when it can, else from a task of `nursery`, the service nursery, so calls in flight finish
    while the server stops."""

    CALLBACK_METHODS = frozenset({"Range", "Put", "Delete", "Increment", "Txn"})

    def __init__(self, streams, tables: Tables, peers: PeerClient, nursery: trio.Nursery) -> None:
        self._streams, self._tables, self._peers, self._nursery = streams, tables, peers, nursery
        self._names: dict[int, tuple[str, str]] = {}     # ids are hashes of names: never stale

    async def _stream_of(self, stream_id: int) -> tuple[str, str]:
        name = self._names.get(stream_id)
        if name is None:
            name = self._names[stream_id] = await self._streams.catalog.stream_by_id(stream_id)
        return name

    def _later(self, answer, afn, *args) -> None:
        """Answer from a task: afn(*args)'s result, or its error."""
        async def run() -> None:
            try:
                response = await afn(*args)
            except Exception as exc:      # noqa: BLE001 - the call's outcome
                answer(None, exc)
                return
            answer(response, None)
        self._nursery.start_soon(run)

    async def _run(self, request, response_cls, operate: Callable[[str, str, bytes, bool], Awaitable[dict]], call):
        """Resolve the table and pkey from the routing header, run `operate(ns, stream, pkey,
        forward)` and build the response (with its header) from what it returns. forward:
        whether a range owned elsewhere is served through its owner (False for a thick
        client's call: NotOwner answers it)."""
        header = request.header
        try:
            namespace, stream = await self._stream_of(header.stream_id)
            fields = await operate(namespace, stream, _pkey_of(request), _forwards(call))
            return response_cls(header=_response_header(header, storage_pb2.SUCCESS), **fields)
        except _REFUSED_TABLE_ERRORS as exc:
            # (NotOwner here: the owner the call was sent to no longer owns the range.)
            return refused(response_cls(header=_response_header(header, status_of(exc))), exc, call)

    def _command(self, request, call, answer, response_cls, command_of: Callable[[bytes], object],
                 fields_of: Callable[[object, object], dict]) -> None:
        """A command of the routing header's table: command_of(pkey), queued straight into its
        range when that is served here (answered by the range's callback), sent straight to
        its owner when that is known (_forward_now), else run by a task (_execute); the
        response built from fields_of(command, result)."""
        header = request.header
        command = None
        on_done = _responder(answer, call, response_cls, header, lambda result: fields_of(command, result))
        name = self._names.get(header.stream_id)
        pkey = _pkey_of(request)

        async def execute() -> None:
            try:
                namespace, stream = await self._stream_of(header.stream_id)
                result = await self._execute(namespace, stream, pkey, command, _forwards(call))
            except Exception as exc:      # noqa: BLE001 - the call's outcome
                on_done(None, exc)
                return
            on_done(result, None)

        def later() -> None:
            self._nursery.start_soon(execute)
        try:
            command = command_of(pkey)
            if name is not None and (self._tables.submit_here(*name, pkey, command, on_done)
                                     or self._forward_now(name, pkey, command, call, on_done, later)):
                return
        except NotOwner:
            pass            # (handed over meanwhile: _execute waits for the handover, then forwards)
        except _REFUSED_TABLE_ERRORS as exc:
            on_done(None, exc)
            return
        later()

    def _forward_now(self, name: tuple[str, str], pkey: bytes, operation, call, on_done,
                     later: Callable[[], None], *, is_read: bool = False) -> bool:
        """Send a call for a range served elsewhere straight to its owner, without a task, when
        Tables knows the owner without waiting and the connection to it is open
        (PeerClient.submit); on_done(result, error) gets the answer. A refusal saying that the
        range moved, or for a read no answer at all, forgets the owner and calls later(): the
        task's way, which looks the owner up again (_here_or_at_owner). False: nothing sent."""
        if not _forwards(call):
            return False
        namespace, stream = name
        owner = self._tables.owner_elsewhere(namespace, stream, pkey)
        if owner is None:
            return False

        def on_answer(result, error: BaseException | None) -> None:
            if isinstance(error, (NotOwner, ConnectionError)):
                self._tables.forget_owner(namespace, stream, pkey)
                if is_read or isinstance(error, NotOwner):
                    try:
                        later()
                        return
                    except RuntimeError:      # (the server is stopping: no new tasks) the error stands
                        pass
            on_done(result, error)
        return self._peers.submit(owner, namespace, stream, pkey, operation, on_answer)

    async def _execute(self, namespace: str, stream: str, pkey: bytes, command, forward: bool):
        """Tables.execute here, or at the range's owner (if `forward`)."""
        return await self._here_or_at_owner(self._tables.execute, self._peers.execute, namespace, stream, pkey,
                                            command, forward)

    async def _read(self, namespace: str, stream: str, pkey: bytes, read, forward: bool):
        """Tables.read here, or at the range's owner (if `forward`)."""
        return await self._here_or_at_owner(self._tables.read, self._peers.read, namespace, stream, pkey, read,
                                            forward, is_read=True)

    async def _here_or_at_owner(self, here, at_owner, namespace: str, stream: str, pkey: bytes, operation,
                                forward: bool, *, is_read: bool = False):
        """here(namespace, stream, pkey, operation); when another server owns the range and
        `forward`, at_owner(that server, namespace, stream, pkey, operation) instead.

        Tables remembers where a range is served for a while (OWNER_KNOWN_S), so the server
        sent to may have lost the range meanwhile. When it refuses (NotOwner, given before
        anything ran) or, for a read, cannot answer, Tables forgets it and the call goes round
        once more, from looking the owner up again. A command that went unanswered is not sent
        again: it may have been carried out, and the client decides."""
        for is_last_round in (False, True):
            try:
                return await here(namespace, stream, pkey, operation)
            except NotOwner as exc:
                if not forward:
                    raise
                owner = exc.owner
            try:
                return await at_owner(owner, namespace, stream, pkey, operation)
            except (NotOwner, ConnectionError) as exc:
                self._tables.forget_owner(namespace, stream, pkey)
                if is_last_round or not (is_read or isinstance(exc, NotOwner)):
                    raise

    def Range(self, request, call, answer) -> None:
        options = _range_options(call)
        response = self._range_now(request, options)
        if response is not None:
            answer(response, None)
            return

        async def operate(namespace, stream, pkey, forward):
            read = range_read_of(pkey, request, options)
            return range_fields(await self._read(namespace, stream, pkey, read, forward))

        def later() -> None:
            self._later(answer, self._run, request, kv_rpc_pb2.RangeResponse, operate, call)
        name = self._names.get(request.header.stream_id)
        if name is not None:
            pkey = _pkey_of(request)
            on_done = _responder(answer, call, kv_rpc_pb2.RangeResponse, request.header, range_fields)
            with contextlib.suppress(TableError):     # (a bad read: the task's way says why)
                if self._forward_now(name, pkey, range_read_of(pkey, request, options), call, on_done, later,
                                     is_read=True):
                    return
        later()

    def _range_now(self, request, options: RangeOptions) -> kv_rpc_pb2.RangeResponse | None:
        """A read answered at once, without a task, when the table's range is served here
        (Tables.read_in_thread); None leaves it to a task."""
        header = request.header
        name = self._names.get(header.stream_id)
        if name is None:
            return None
        pkey = _pkey_of(request)
        try:
            read = range_read_of(pkey, request, options)
        except TableError:
            return None             # the task's path answers it
        result = self._tables.read_in_thread(*name, pkey, read)
        if result is None:
            return None
        return kv_rpc_pb2.RangeResponse(header=_response_header(header, storage_pb2.SUCCESS), **range_fields(result))

    def Put(self, request, call, answer) -> None:
        self._command(request, call, answer, kv_rpc_pb2.PutResponse,
                      lambda pkey: put_of(pkey, request, _ttl_ms(call)), lambda put, result: put_fields(result))

    def Delete(self, request, call, answer) -> None:
        self._command(request, call, answer, kv_rpc_pb2.DeleteRangeResponse,
                      lambda pkey: delete_of(pkey, request, _range_options(call)), delete_fields)

    def Increment(self, request, call, answer) -> None:
        self._command(request, call, answer, kv_rpc_pb2.IncrementResponse, lambda pkey: increment_of(pkey, request),
                      lambda increment, result: {"total_amount": result.total or 0})

    def Txn(self, request, call, answer) -> None:
        def txn_of(pkey: bytes) -> Txn:
            return Txn(tuple(compare_of(pkey, c) for c in request.compare),
                       tuple(txn_op_of(pkey, op) for op in request.success),
                       tuple(txn_op_of(pkey, op) for op in request.failure))

        def fields_of(txn: Txn, result) -> dict:
            ops = txn.success if result.succeeded else txn.failure
            return {"succeeded": result.succeeded,
                    "responses": [response_op(op, r, request.header, status_of) for op, r in zip(ops, result.results)]}
        self._command(request, call, answer, kv_rpc_pb2.TxnResponse, txn_of, fields_of)


# What a table call answers as a refusal with its status code (status_of), not as a gRPC error.
_REFUSED_TABLE_ERRORS = (StreamException, BKException, TableError, NotOwner, ValueError, OSError, RuntimeError)


def _responder(answer, call, response_cls, header: kv_rpc_pb2.RoutingHeader,
               fields_of: Callable[[object], dict]) -> Callable[[object, BaseException | None], None]:
    """on_done(result, error) for a table call answered by a callback: the response with
    SUCCESS and fields_of(result); a refusal with its status code (refused); any other error
    as the call's gRPC error."""
    def on_done(result, error: BaseException | None) -> None:
        if error is None:
            answer(response_cls(header=_response_header(header, storage_pb2.SUCCESS), **fields_of(result)), None)
        elif isinstance(error, _REFUSED_TABLE_ERRORS):
            answer(refused(response_cls(header=_response_header(header, status_of(error))), error, call), None)
        else:
            answer(None, error)
    return on_done


def _range_options(call) -> RangeOptions:
    return RangeOptions(to_pkey_end=TO_PKEY_END_HEADER in call.metadata, prefix=PREFIX_HEADER in call.metadata)


def _ttl_ms(call) -> int:
    """A put's TTL (PUT_TTL_MS_HEADER; 0: none). A value that is not a whole number refuses the
    put (ValueError: BAD_REQUEST)."""
    text = call.metadata.get(PUT_TTL_MS_HEADER, "0")
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"the TTL of a put is a whole number of milliseconds, not {text!r}") from None


def _forwards(call) -> bool:
    """Whether a call for a range owned elsewhere is served through its owner: not for a thick
    client's (OWNER_ONLY_HEADER), which NotOwner answers."""
    return OWNER_ONLY_HEADER not in call.metadata


def _response_header(header: kv_rpc_pb2.RoutingHeader, code: int) -> kv_rpc_pb2.ResponseHeader:
    """The request's routing header (stream id, range id, routing key) echoed, with the code."""
    return kv_rpc_pb2.ResponseHeader(code=code, routing_header=header)


class CatalogLister:
    """bk.storage.Catalog (LIST_NAMESPACES_METHOD, LIST_STREAMS_METHOD): the names the catalog
    holds, sorted; a namespace that does not exist answers {"error", "code"}
    (NAMESPACE_NOT_FOUND)."""

    def __init__(self, streams) -> None:
        self._streams = streams

    async def _answer(self, names) -> dict:
        try:
            return {"names": await names}
        except (StreamException, BKException, OSError) as exc:
            return {"error": str(exc), "code": status_of(exc)}

    async def list_namespaces(self, request: dict, call) -> dict:
        return await self._answer(self._streams.catalog.list_namespaces())

    async def list_streams(self, request: dict, call) -> dict:
        namespace = request.get("namespace") or DEFAULT_NAMESPACE
        return await self._answer(self._streams.catalog.list_streams(namespace))


class _WatchHandler:
    """bk.table.Watch/Watch: request {"stream_id" | "namespace"+"stream", "pkey", "key",
    "range_end", "start_revision"}; answers first {"created": True, "revision": r} (every change
    above revision r follows), then one dict per change, or {"error": ..., "code": ..., "kind": ...}.

    watch() is a task for as long as the call lasts; it ends when the client goes away or the
    server stops (and the client watches again from where it was). A watcher that does not
    take what is sent to it is told to watch again once grpc_trio says it has fallen behind.

    A watch of a range owned elsewhere is that owner's watch, over the servers' own channel
    (PeerClient.watch): its changes come from the owner as they happen."""

    def __init__(self, streams, tables: Tables, peers: PeerClient) -> None:
        self._streams, self._tables, self._peers = streams, tables, peers

    async def watch(self, request: dict, call, send) -> None:
        try:
            if "stream_id" in request:
                namespace, stream = await self._streams.catalog.stream_by_id(request["stream_id"])
            else:
                namespace, stream = request.get("namespace") or DEFAULT_NAMESPACE, request["stream"]
            key = request["key"]
            started = lambda revision: send({"created": True, "revision": revision})  # noqa: E731

            def deliver(event) -> bool:
                if call.is_backed_up:
                    return False
                send({"type": event.kind, "key": unfold_key(event.kv.key)[1], "value": event.kv.value,
                      "revision": event.revision,
                      # BookKeeper's version, from 0 (streamstorage.table_protocol)
                      "version": event.kv.version - 1 if event.kind == "put" else 0,
                      "is_number": event.kv.is_number, "number": event.kv.number,
                      "prev_value": event.prev_kv.value if event.prev_kv else None})
                return True
            # A range served here hands its changes to deliver as it applies them; one served
            # elsewhere comes through the iteration.
            async for event in self._watch_here_or_at_owner(
                    namespace, stream, request.get("pkey") or key, key, request.get("range_end"),
                    start_revision=request.get("start_revision", 0), started=started, deliver=deliver):
                if not deliver(event):
                    raise WatchTooSlow("the watcher fell too far behind (its connection backed up); watch again "
                                       "from the revision after the last change it got")
        except Exception as exc:      # noqa: BLE001 - any failure ends the watch with its reason
            send({"error": str(exc), "code": status_of(exc), "kind": type(exc).__name__})

    async def _watch_here_or_at_owner(self, namespace: str, stream: str, pkey: bytes, key: bytes,
                                      range_end: bytes | None, *, start_revision: int, started, deliver):
        """Tables.watch here (its changes go to `deliver`); if another server owns the range,
        that server's watch (its changes are yielded). (Only a watch that has not started
        moves: one that NotOwner ends later, its range handed over, ends with that error, and
        its client watches again from where it was.)"""
        is_started = False

        def started_here(revision: int) -> None:
            nonlocal is_started
            is_started = True
            started(revision)
        try:
            async for event in self._tables.watch(namespace, stream, pkey, key, range_end,
                                                  start_revision=start_revision, started=started_here,
                                                  deliver=deliver):
                yield event
            return
        except NotOwner as exc:
            if is_started:
                raise
            owner = exc.owner
        try:
            async for event in self._peers.watch(owner, namespace, stream, pkey, key, range_end,
                                                 start_revision=start_revision, started=started):
                yield event
        except (NotOwner, ConnectionError):
            self._tables.forget_owner(namespace, stream, pkey)
            raise


class GrpcGateway:
    def __init__(self, bk, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                 checkpoint_every: int | None = None, index_dir: str | None = None,
                 shared_port: int | None = None, peer_port: int = 0, tls=None, auth_secret: bytes = b"",
                 call_stats: dict | None = None, peer_tls=None) -> None:
        """index_dir: where the table ranges served here keep their lmdb indexes (rebuilt from
        the range journals whenever a range is opened); None keeps them in memory. tls: serve
        gRPC over TLS with this context (bktransports.grpc_trio.server_tls_context). auth_secret:
        answer only clients that prove it (StorageClient(auth_secret=...)). call_stats: where
        the gRPC calls are counted and timed (bktransports.grpc_trio.GrpcServer's). The channel
        between the servers asks for the same secret and, with tls, speaks TLS too: peer_tls is
        the client context this server verifies the others with (None: the system's CAs).

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
        self._tls = tls
        self._auth_secret = auth_secret
        self._call_stats = call_stats
        self._peer_tls = (peer_tls or ssl.create_default_context()) if tls is not None else None
        self._checkpoint_every = checkpoint_every
        self.tables: Tables | None = None
        # The servers' own channel, once running: calls for ranges owned elsewhere go out on
        # `peers`, the other servers' come in on `peer_server` (their statistics() say how many).
        self.peers: PeerClient | None = None
        self.peer_server: PeerServer | None = None

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled, then stop in order: the watches and the other servers'
        calls at once (each watch stream ends, as when its range moves), the gRPC server (other
        calls in flight get STOP_GRACE_S to finish), then the ranges (sealing their journals).
        The last two need the tasks that serve the ranges and the calls, so those run in a
        service nursery, stopped only after that."""
        streams = self._bk.streams
        try:
            await streams.create_namespace(DEFAULT_NAMESPACE)
        except NamespaceExists:
            pass
        listeners = await self._listen()
        server = None
        try:
            # The calls from and to the other servers stop at once (those waiting fail;
            # clients retry), and so do the watches (GrpcServer.stop ends them first).
            async with open_service_nursery() as nursery, trio.open_nursery() as peer_calls:
                try:
                    self.tables = Tables(self._bk, nursery, checkpoint_every=self._checkpoint_every,
                                         server_id=f"{self.host}:{self.port}",
                                         indexes=LmdbRangeIndexes(self._index_dir) if self._index_dir else None)
                    self.peer_server = await peer_calls.start(PeerServer(
                        self.tables, host=self.host, port=self.peer_port, tls=self._tls,
                        auth_secret=self._auth_secret).run)
                    self.peer_port = self.peer_server.port
                    self.peers = PeerClient(store=self._bk.store, root=self._bk.layout.root, nursery=peer_calls,
                                            tls=self._peer_tls, auth_secret=self._auth_secret)
                    server = GrpcServer(self._methods(nursery), tls=self._tls, auth_secret=self._auth_secret,
                                        call_stats=self._call_stats)
                    await nursery.start(server.serve, listeners)
                    listeners = []
                    await self.tables.register(peer_address=f"{self.host}:{self.peer_port}")
                    task_status.started(self)
                    await trio.sleep_forever()
                finally:
                    with trio.CancelScope(shield=True):
                        if server is not None:
                            await server.stop(STOP_GRACE_S)
                        if self.tables is not None:
                            await self.tables.close()
        finally:
            for listener in listeners:          # (never served: the server closes its own)
                listener.socket.close()

    async def _listen(self) -> list[trio.SocketListener]:
        """Listeners on this server's own port and, if given, the shared one (SO_REUSEPORT:
        every server of the cluster listens there). The own port must be this server's alone:
        a second server started on a port in use fails here rather than sharing it."""
        own = await self._listener(self.port, reuse_port=False)
        self.port = own.socket.getsockname()[1]
        if not self.shared_port:
            return [own]
        try:
            return [own, await self._listener(self.shared_port, reuse_port=True)]
        except BaseException:
            own.socket.close()
            raise

    async def _listener(self, port: int, *, reuse_port: bool) -> trio.SocketListener:
        what = "the shared port" if reuse_port else "its port"
        try:
            (family, kind, proto, _, address), *_ = await trio.socket.getaddrinfo(self.host, port,
                                                                                  type=socket.SOCK_STREAM)
        except OSError as exc:
            raise OSError(f"cannot listen on {self.host}:{port} for gRPC: {exc}") from None
        sock = trio.socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            await sock.bind(address)
            sock.listen(socket.SOMAXCONN)
        except OSError as exc:
            sock.close()
            raise OSError(f"cannot listen on {self.host}:{port} ({what}) for gRPC: {exc.strerror} (is another "
                          f"program there?)") from None
        return trio.SocketListener(sock)

    def _methods(self, nursery: trio.Nursery) -> dict:
        """Every method of BookKeeper's services this endpoint serves, and the watch."""
        streams = self._bk.streams
        servicers = {
            "bookkeeper.proto.storage.RootRangeService": RootRangeServicer(streams, self.tables),
            "bookkeeper.proto.storage.StorageContainerService":
                StorageContainerServicer(self.host, self.shared_port or self.port),
            "bookkeeper.proto.storage.MetaRangeService": MetaRangeServicer(streams),
            "bookkeeper.proto.kv.rpc.TableService": TableServicer(streams, self.tables, self.peers, nursery),
        }
        methods: dict = {}
        for module in (storage_pb2, kv_rpc_pb2):
            for service in module.DESCRIPTOR.services_by_name.values():
                servicer = servicers[service.full_name]
                callbacks = getattr(servicer, "CALLBACK_METHODS", frozenset())
                for method in service.methods:
                    handler = getattr(servicer, method.name)
                    decode = getattr(module, method.input_type.name).FromString
                    methods[f"/{service.full_name}/{method.name}"] = (
                        Unary(decode, _serialized, start=handler) if method.name in callbacks
                        else Unary(decode, _serialized, handle=handler))
        methods[WATCH_METHOD] = ServerStream(_unpacked, _packed,
                                             handle=_WatchHandler(streams, self.tables, self.peers).watch)
        lister = CatalogLister(streams)
        methods[LIST_NAMESPACES_METHOD] = Unary(_unpacked, _packed, handle=lister.list_namespaces)
        methods[LIST_STREAMS_METHOD] = Unary(_unpacked, _packed, handle=lister.list_streams)
        return methods


def _serialized(message) -> bytes:
    return message.SerializeToString()


def _unpacked(data: bytes):
    return msgpack.unpackb(data, raw=False)


def _packed(item) -> bytes:
    return msgpack.packb(item, use_bin_type=True)


__all__ = ["GrpcGateway", "DEFAULT_PORT", "WATCH_METHOD", "range_of"]
