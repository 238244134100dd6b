"""A thin blocking client of the stream storage gRPC endpoint (what `bk stream` and `bk table`
use): any server answers anything, so it needs only an address.

    client = StorageClient("127.0.0.1:4181")
    client.create_namespace("apps")                       # and get/delete/list_namespaces
    client.create_stream("default", "counters")           # and get/delete_stream, list_streams
    table = client.table("default", "counters")
    table.increment(b"visits", 1)
    for event in table.watch(b"visits"):      # blocks; yields dicts of changes
        ...

Failures raise StorageError with BookKeeper's status name (STREAM_NOT_FOUND, BAD_REQUEST, ...)
and the server's reason (which names the key and the rule) when it gave one; a call the server
did not answer raises ConnectionError, saying why where the client can tell: the server asks for
the secret, or (a client without tls_ca) it speaks TLS, which a handshake of the client's own
finds out after the failure. Tables follow
BookKeeper's protocol (streamstorage.table_protocol): versions count from 0 and range ends are
inclusive.
"""

from __future__ import annotations

import socket
import ssl
import time
from typing import Iterator

import grpc
import msgpack
from bookkeeper.proto import kv_rpc_pb2, kv_rpc_pb2_grpc, storage_pb2, storage_pb2_grpc, stream_pb2

from bkclient.table_txn import TxnCompare, TxnOp, txn_request
from bkcore.stream.segments import stream_id_of
from bkcore.table.commands import prefix_end
from bkcore.table.watch_resume import WatchResume
from bkcore.table.ownership import NotOwner
from bkcore.table.watch_rpc import (
    ERROR_MESSAGE_HEADER, LIST_NAMESPACES_METHOD, LIST_STREAMS_METHOD, OWNER_HEADER, OWNER_ONLY_HEADER, PREFIX_HEADER,
    PUT_TTL_MS_HEADER, TO_PKEY_END_HEADER, WATCH_METHOD,
)

DEFAULT_SERVER = "127.0.0.1:4181"
CALL_TIMEOUT_S = 30.0
TLS_PROBE_TIMEOUT_S = 2.0       # (a server that got no answer is asked whether it speaks TLS)


def status_name(status: int) -> str:
    """BookKeeper's name of a status code (the number itself if it has none)."""
    return storage_pb2.StatusCode.Name(status) if status in storage_pb2.StatusCode.values() else str(status)


class StorageError(Exception):
    def __init__(self, status: int, what: str, reason: str = "") -> None:
        self.status = status
        self.status_name = status_name(status)
        self.reason = reason
        super().__init__(f"{what}: {reason} ({self.status_name})" if reason else f"{what}: {self.status_name}")


def _check(code: int, what: str, reason: str = "") -> None:
    if code != storage_pb2.SUCCESS:
        raise StorageError(code, what, reason)


def _trailing(call) -> dict[str, str]:
    """What the server put in the trailing metadata: the refusal's reason (ERROR_MESSAGE_HEADER),
    the range's owner (OWNER_HEADER)."""
    return {key: value.decode("utf-8", "replace") if isinstance(value, bytes) else value
            for key, value in call.trailing_metadata() or ()}


def speaks_tls(server: str, *, timeout_s: float = TLS_PROBE_TIMEOUT_S) -> bool:
    """Whether the endpoint at `server` ("host:port") completes a TLS handshake offering gRPC's
    ALPN "h2". Its certificate is not checked: the answer words an error, nothing more."""
    host, _, port = server.rpartition(":")
    if not host or not port.isdigit():
        return False
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as plain:
            with context.wrap_socket(plain, server_hostname=host.strip("[]")):
                return True             # (wrap_socket does the handshake)
    except (OSError, ValueError):       # (ssl.SSLError is an OSError)
        return False


class _Authorization(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds "authorization: Bearer <secret>" to every call (the server's auth_secret)."""

    def __init__(self, secret: bytes) -> None:
        self._header = ("authorization", "Bearer " + secret.decode("utf-8", "surrogateescape"))

    def _with_header(self, details):
        return _CallDetails(details.method, details.timeout, (*(details.metadata or ()), self._header),
                            details.credentials, getattr(details, "wait_for_ready", None),
                            getattr(details, "compression", None))

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return continuation(self._with_header(client_call_details), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        return continuation(self._with_header(client_call_details), request)


class _CallDetails(grpc.ClientCallDetails):
    def __init__(self, method, timeout, metadata, credentials, wait_for_ready, compression) -> None:
        self.method, self.timeout, self.metadata = method, timeout, metadata
        self.credentials, self.wait_for_ready, self.compression = credentials, wait_for_ready, compression


class StorageClient:
    def __init__(self, server: str = DEFAULT_SERVER, *, tls_ca: str | None = None, auth_secret: bytes = b"") -> None:
        """tls_ca: a PEM file of the CA that signed the servers' certificates: talk TLS to them.
        auth_secret: the secret the servers ask for (their --grpc-auth-secret-file)."""
        self.server = server
        # A connection of its own (gRPC otherwise shares one per address in a process): clients
        # of an address several servers listen on (SO_REUSEPORT) are then spread over them.
        options = [("grpc.use_local_subchannel_pool", 1)]
        self._is_tls = bool(tls_ca)
        if tls_ca:
            try:
                with open(tls_ca, "rb") as file:
                    credentials = grpc.ssl_channel_credentials(root_certificates=file.read())
            except OSError as exc:
                raise ValueError(f"cannot read the CA file {tls_ca}: {exc.strerror}") from None
            self._channel = grpc.secure_channel(server, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(server, options=options)
        if auth_secret:
            self._channel = grpc.intercept_channel(self._channel, _Authorization(auth_secret))
        self._root = storage_pb2_grpc.RootRangeServiceStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> StorageClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _call(self, method, request, metadata=()):
        """(answer, the refusal's reason or "")."""
        answer, trailing = self._call_with_trailing(method, request, metadata)
        return answer, trailing.get(ERROR_MESSAGE_HEADER, "")

    def _call_with_trailing(self, method, request, metadata=()):
        """(answer, the trailing metadata)."""
        try:
            answer, call = method.with_call(request, timeout=CALL_TIMEOUT_S, metadata=metadata)
            return answer, _trailing(call)
        except grpc.RpcError as exc:
            raise self._failure(exc.code()) from None

    def _failure(self, code: grpc.StatusCode) -> ConnectionError:
        """What a call that got no answer from the server raises, saying why where it can tell."""
        if code is grpc.StatusCode.UNAUTHENTICATED:
            return ConnectionError(f"stream storage at {self.server} refused the call: it asks for the cluster's "
                                   f"secret (--auth-secret-file, or BK_AUTH_SECRET)")
        # A server that speaks TLS closes a client in the clear at once: gRPC says only UNAVAILABLE
        # ("Socket closed"), as for a server that is down. A handshake of our own tells them apart.
        if code is grpc.StatusCode.UNAVAILABLE and not self._is_tls and speaks_tls(self.server):
            return ConnectionError(f"stream storage at {self.server} speaks TLS and this client does not: pass "
                                   f"the CA that signed its certificate with --tls-ca (StorageClient's tls_ca)")
        return ConnectionError(f"stream storage at {self.server} did not answer ({code.name}); "
                               f"is it running (bk standalone, or bk stream-storage)?")

    def create_namespace(self, namespace: str) -> stream_pb2.NamespaceProperties:
        answer, reason = self._call(self._root.CreateNamespace, storage_pb2.CreateNamespaceRequest(
            name=namespace, ns_conf=stream_pb2.NamespaceConfiguration()))
        _check(answer.code, f"creating namespace {namespace}", reason)
        return answer.ns_props

    def get_namespace(self, namespace: str) -> stream_pb2.NamespaceProperties:
        answer, reason = self._call(self._root.GetNamespace, storage_pb2.GetNamespaceRequest(name=namespace))
        _check(answer.code, f"getting namespace {namespace}", reason)
        return answer.ns_props

    def delete_namespace(self, namespace: str) -> None:
        answer, reason = self._call(self._root.DeleteNamespace, storage_pb2.DeleteNamespaceRequest(name=namespace))
        _check(answer.code, f"deleting namespace {namespace}", reason)

    def list_namespaces(self) -> list[str]:
        return self._list(LIST_NAMESPACES_METHOD, {}, "listing namespaces")

    def list_streams(self, namespace: str) -> list[str]:
        return self._list(LIST_STREAMS_METHOD, {"namespace": namespace}, f"listing the streams of {namespace}")

    def _list(self, method: str, request: dict, what: str) -> list[str]:
        """One of our catalog listings (BookKeeper's protos have none): the names, sorted."""
        call = self._channel.unary_unary(method, request_serializer=msgpack.packb,
                                         response_deserializer=lambda data: msgpack.unpackb(data, raw=False))
        answer, _ = self._call_with_trailing(call, request)
        if "error" in answer:
            raise StorageError(answer["code"], what, answer["error"])
        return answer["names"]

    def create_stream(self, namespace: str, stream: str, *, ranges: int | None = None) -> stream_pb2.StreamProperties:
        """ranges: its hash ranges as a table (None: the server's default)."""
        conf = stream_pb2.StreamConfiguration()
        if ranges is not None:
            conf.initial_num_ranges = conf.min_num_ranges = ranges
        answer, reason = self._call(self._root.CreateStream, storage_pb2.CreateStreamRequest(
            ns_name=namespace, name=stream, stream_conf=conf))
        _check(answer.code, f"creating stream {namespace}/{stream}", reason)
        return answer.stream_props

    def get_stream(self, namespace: str, stream: str) -> stream_pb2.StreamProperties:
        answer, reason = self._call(self._root.GetStream, storage_pb2.GetStreamRequest(
            stream_name=stream_pb2.StreamName(namespace_name=namespace, stream_name=stream)))
        _check(answer.code, f"getting stream {namespace}/{stream}", reason)
        return answer.stream_props

    def delete_stream(self, namespace: str, stream: str) -> None:
        answer, reason = self._call(self._root.DeleteStream,
                                    storage_pb2.DeleteStreamRequest(ns_name=namespace, name=stream))
        _check(answer.code, f"deleting stream {namespace}/{stream}", reason)

    def table(self, namespace: str, stream: str, *, owner_only: bool = False) -> TableClient:
        return TableClient(self, namespace, stream, owner_only=owner_only)


class TableClient:
    """Keys are bytes; `pkey` defaults to the key itself (BookKeeper's Table). With owner_only
    (a thick client, which routes by itself) a server that does not own the key's range raises
    NotOwner(owner) here instead of serving the call through the owner."""

    def __init__(self, client: StorageClient, namespace: str, stream: str, *, owner_only: bool = False) -> None:
        self._client = client
        self.namespace, self.stream = namespace, stream
        self._owner_only = owner_only
        self._metadata = ((OWNER_ONLY_HEADER, "1"),) if owner_only else ()
        self._stub = kv_rpc_pb2_grpc.TableServiceStub(client._channel)
        self._stream_id = stream_id_of(namespace, stream)

    def _header(self, key: bytes, pkey: bytes | None) -> kv_rpc_pb2.RoutingHeader:
        return kv_rpc_pb2.RoutingHeader(stream_id=self._stream_id, r_key=pkey or key)

    def _send(self, method, request, what: str, metadata=()):
        answer, trailing = self._client._call_with_trailing(method, request, (*metadata, *self._metadata))
        what = f"{what} on table {self.namespace}/{self.stream}"
        if self._owner_only and answer.header.code != storage_pb2.SUCCESS and OWNER_HEADER in trailing:
            raise NotOwner(trailing[OWNER_HEADER], what)
        _check(answer.header.code, what, trailing.get(ERROR_MESSAGE_HEADER, ""))
        return answer

    def put(self, key: bytes, value: bytes, *, pkey: bytes | None = None, ttl_ms: int = 0):
        """The previous kv (None if there was none). With ttl_ms the key expires that long
        after the put (our addition: PUT_TTL_MS_HEADER)."""
        request = kv_rpc_pb2.PutRequest(key=key, value=value, prev_kv=True, header=self._header(key, pkey))
        metadata = ((PUT_TTL_MS_HEADER, str(ttl_ms)),) if ttl_ms else ()
        answer = self._send(self._stub.Put, request, "put", metadata)
        return answer.prev_kv if answer.HasField("prev_kv") else None

    def get(self, key: bytes, *, pkey: bytes | None = None):
        answer = self._send(self._stub.Range, kv_rpc_pb2.RangeRequest(key=key, header=self._header(key, pkey)), "get")
        return answer.kvs[0] if answer.kvs else None

    def range(self, key: bytes, end: bytes = b"", *, pkey: bytes, limit: int = 0, prefix: bool = False) -> list:
        """Keys of `pkey` from `key` up to and including `end` (b"": to the end of the pkey),
        or, with `prefix`, every key of `pkey` starting with `key`."""
        return list(self.range_response(key, end, pkey=pkey, limit=limit, prefix=prefix).kvs)

    def range_response(self, key: bytes, end: bytes = b"", *, pkey: bytes, limit: int = 0,
                       prefix: bool = False) -> kv_rpc_pb2.RangeResponse:
        """range's whole answer: kvs, count and `more` (keys past the limit)."""
        request = kv_rpc_pb2.RangeRequest(key=key, range_end=end, limit=limit, header=self._header(key, pkey))
        metadata = ((PREFIX_HEADER, "1"),) if prefix else () if end else ((TO_PKEY_END_HEADER, "1"),)
        return self._send(self._stub.Range, request, "range", metadata)

    def increment(self, key: bytes, amount: int, *, pkey: bytes | None = None) -> int:
        request = kv_rpc_pb2.IncrementRequest(key=key, amount=amount, get_total=True, header=self._header(key, pkey))
        return self._send(self._stub.Increment, request, "increment").total_amount

    def delete(self, key: bytes, *, pkey: bytes | None = None, prefix: bool = False) -> int:
        """How many keys it deleted (asking for the previous kvs: BookKeeper counts no others);
        with `prefix`, every key of the pkey starting with `key`."""
        request = kv_rpc_pb2.DeleteRangeRequest(key=key, prev_kv=True, header=self._header(key, pkey))
        metadata = ((PREFIX_HEADER, "1"),) if prefix else ()
        return self._send(self._stub.Delete, request, "delete", metadata).deleted

    def txn(self, compares: list[TxnCompare], success: list[TxnOp], failure: list[TxnOp], *,
            pkey: bytes) -> kv_rpc_pb2.TxnResponse:
        """One txn within `pkey` (every key named is a key of it): BookKeeper's answer, with
        `succeeded` and one response per operation that ran (see bkclient.table_txn)."""
        request = txn_request(compares, success, failure, self._header(pkey, pkey))
        return self._send(self._stub.Txn, request, "txn")

    def watch(self, key: bytes, *, pkey: bytes | None = None, start_revision: int = 0,
              prefix: bool = False) -> WatchStream:
        """Every change of the key (with `prefix`: of every key of the pkey starting with it)
        from `start_revision` (0: from now on), as they happen; the watch resumes by itself
        where it left off when its stream breaks (see WatchStream)."""
        call = self._client._channel.unary_stream(WATCH_METHOD, request_serializer=msgpack.packb,
                                                  response_deserializer=lambda data: msgpack.unpackb(data, raw=False))
        request = {"stream_id": self._stream_id, "pkey": pkey or key, "key": key}
        if prefix:
            request["range_end"] = _lkey_prefix_end(key)
        return WatchStream(lambda revision: call({**request, "start_revision": revision}), key, start_revision)


def _lkey_prefix_end(prefix: bytes) -> bytes:
    """The exclusive end of the lkeys starting with `prefix`, as a watch takes it (b"": to the
    end of the pkey, where a prefix of nothing or of 0xff bytes only reaches)."""
    return prefix_end(prefix) if prefix.rstrip(b"\xff") else b""


# Watch errors that another attempt cannot cure: they end the watch.
FINAL_WATCH_ERRORS = frozenset({"WatchCompacted", "StreamNotFound", "NamespaceNotFound", "TableError"})
WATCH_RESUME_TIMEOUT_S = 60.0
WATCH_RESUME_BACKOFF_MAX_S = 1.0


class WatchStream:
    """Iterate for change dicts (blocking); cancel() from any thread ends the iteration.

    A stream that breaks (the server restarts, the range changes owner, the connection drops)
    is opened again from the revision of the last change delivered, and the changes of that
    revision already delivered are skipped, so the iteration sees every change once, in order.
    It gives up with ConnectionError after WATCH_RESUME_TIMEOUT_S without a working stream."""

    def __init__(self, open_call, key: bytes, start_revision: int) -> None:
        self._open_call = open_call
        self._key = key
        self._resume = WatchResume(start_revision)
        self._call = None
        self._is_cancelled = False

    def __iter__(self) -> Iterator[dict]:
        backoff_s, broken_since = 0.05, None
        while not self._is_cancelled:
            self._call = call = self._open_call(self._resume.new_stream())
            if self._is_cancelled:
                call.cancel()
                return
            why = "the server ended it"
            try:
                for event in call:
                    if "created" in event:
                        self._resume.started(event["revision"])
                        broken_since, backoff_s = None, 0.05
                        continue
                    if "error" in event:
                        if event.get("kind") in FINAL_WATCH_ERRORS:
                            raise StorageError(event["code"], f"watching {self._key!r}: {event['error']}")
                        why = event["error"]
                        break
                    if self._resume.is_new(event["revision"]):
                        yield event
            except grpc.RpcError as exc:
                if exc.code() is grpc.StatusCode.CANCELLED and self._is_cancelled:
                    return
                why = exc.code().name
            finally:
                call.cancel()
            now = time.monotonic()
            broken_since = broken_since or now
            if now - broken_since > WATCH_RESUME_TIMEOUT_S:
                raise ConnectionError(f"the watch of {self._key!r} broke off ({why}) and could not be resumed "
                                      f"for {WATCH_RESUME_TIMEOUT_S:g}s; is stream storage running?")
            time.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, WATCH_RESUME_BACKOFF_MAX_S)

    def cancel(self) -> None:
        self._is_cancelled = True
        if self._call is not None:
            self._call.cancel()
