"""What Python gRPC itself allows for the table service on this machine: `bk bench table
--ceiling` runs a TableService that keeps its keys in a dict (no journal, no bookies) in a
process of its own, in three styles, and drives it with the same 16-thread blocking client:

    sync        grpc.server with a thread pool, the handler answers in its thread
    sync_trio   the same, but each call is handed to a trio loop with trio.from_thread.run
                (the server's way until it had its own bridge): what that handoff costs
    sync_bridge the same through bkbench.grpc_bridge.TrioBridge (many calls per wakeup of
                the loop)
    aio         grpc.aio.server, handlers are coroutines of its asyncio loop
    aio_bridge  the same, the asyncio loop in a thread of its own, each call handed to a trio
                loop and its answer back (bkbench.grpc_bridge.AsyncioBridge): the real
                server's way until it served gRPC from trio
    trio_grpc   bktransports.grpc_trio.GrpcServer: gRPC over HTTP/2 (bktransports.http2) in the trio loop,
                each call answered by a callback (no task, no thread, no bridge): the real
                server's way now

The real server cannot beat the best of these; the gap between them and it is what the table
service's own work (routing, journal, state) costs.
"""

from __future__ import annotations

import multiprocessing

from bookkeeper.proto import kv_pb2, kv_rpc_pb2, kv_rpc_pb2_grpc, storage_pb2

CEILING_KINDS = ("sync", "sync_trio", "sync_bridge", "aio", "aio_bridge", "trio_grpc")
HANDLER_THREADS = 32


def _put(kvs: dict[bytes, bytes], request) -> kv_rpc_pb2.PutResponse:
    previous = kvs.get(request.key)
    kvs[request.key] = request.value
    header = kv_rpc_pb2.ResponseHeader(code=storage_pb2.SUCCESS, routing_header=request.header)
    if previous is None or not request.prev_kv:
        return kv_rpc_pb2.PutResponse(header=header)
    return kv_rpc_pb2.PutResponse(header=header, prev_kv=kv_pb2.KeyValue(key=request.key, value=previous))


def _range(kvs: dict[bytes, bytes], request) -> kv_rpc_pb2.RangeResponse:
    value = kvs.get(request.key)
    header = kv_rpc_pb2.ResponseHeader(code=storage_pb2.SUCCESS, routing_header=request.header)
    kvs_found = [] if value is None else [kv_pb2.KeyValue(key=request.key, value=value)]
    return kv_rpc_pb2.RangeResponse(header=header, kvs=kvs_found, count=len(kvs_found))


class _SyncTable(kv_rpc_pb2_grpc.TableServiceServicer):
    def __init__(self, run=None) -> None:
        self._kvs: dict[bytes, bytes] = {}
        self._run = run          # how a handler thread runs an operation in trio (None: in the thread)

    def _answer(self, operation, request):
        if self._run is None:
            return operation(self._kvs, request)

        async def in_trio():     # a coroutine, as the real server's operations are
            return operation(self._kvs, request)
        return self._run(in_trio)

    def Put(self, request, context):
        return self._answer(_put, request)

    def Range(self, request, context):
        return self._answer(_range, request)


class _AioTable(kv_rpc_pb2_grpc.TableServiceServicer):
    def __init__(self, bridge=None) -> None:
        self._kvs: dict[bytes, bytes] = {}
        self._bridge = bridge      # an AsyncioBridge to run each operation in trio (None: in asyncio)

    async def _answer(self, operation, request):
        if self._bridge is None:
            return operation(self._kvs, request)

        async def in_trio_loop():
            return operation(self._kvs, request)
        return await self._bridge.call(in_trio_loop)

    async def Put(self, request, context):
        return await self._answer(_put, request)

    async def Range(self, request, context):
        return await self._answer(_range, request)


def _serve_sync(kind: str, ready) -> None:
    from concurrent import futures

    import grpc
    import trio

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=HANDLER_THREADS))
    port = server.add_insecure_port("127.0.0.1:0")
    if kind == "sync":
        kv_rpc_pb2_grpc.add_TableServiceServicer_to_server(_SyncTable(), server)
        server.start()
        ready.send(port)
        server.wait_for_termination()
        return

    async def main() -> None:
        from bkbench.grpc_bridge import TrioBridge
        token = trio.lowlevel.current_trio_token()
        if kind == "sync_bridge":
            run = TrioBridge(token).run
        else:
            run = lambda fn, *args: trio.from_thread.run(fn, *args, trio_token=token)  # noqa: E731
        kv_rpc_pb2_grpc.add_TableServiceServicer_to_server(_SyncTable(run), server)
        server.start()
        ready.send(port)
        await trio.sleep_forever()
    trio.run(main)


def _serve_aio(ready, trio_bridge=None) -> None:
    import asyncio

    import grpc

    from bkbench.grpc_bridge import AsyncioBridge

    async def main() -> None:
        server = grpc.aio.server()
        port = server.add_insecure_port("127.0.0.1:0")
        bridge = None if trio_bridge is None else AsyncioBridge(trio_bridge, asyncio.get_running_loop())
        kv_rpc_pb2_grpc.add_TableServiceServicer_to_server(_AioTable(bridge), server)
        await server.start()
        ready.send(port)
        await server.wait_for_termination()
    asyncio.run(main())


def _serve_aio_bridge(ready) -> None:
    import threading

    import trio

    from bkbench.grpc_bridge import TrioBridge

    async def main() -> None:
        bridge = TrioBridge(trio.lowlevel.current_trio_token())
        threading.Thread(target=_serve_aio, args=(ready, bridge), daemon=True).start()
        await trio.sleep_forever()
    trio.run(main)


def _serve_trio_grpc(ready) -> None:
    import trio

    from bktransports.grpc_trio import GrpcServer, Unary

    kvs: dict[bytes, bytes] = {}

    def method(request_type, operation) -> Unary:
        return Unary(request_type.FromString, lambda response: response.SerializeToString(),
                     start=lambda request, call, answer: answer(operation(kvs, request)))

    async def main() -> None:
        server = GrpcServer({"/bookkeeper.proto.kv.rpc.TableService/Put": method(kv_rpc_pb2.PutRequest, _put),
                             "/bookkeeper.proto.kv.rpc.TableService/Range": method(kv_rpc_pb2.RangeRequest, _range)})
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve, listeners)
            ready.send(listeners[0].socket.getsockname()[1])
    trio.run(main)


def _serve(kind: str, ready) -> None:
    if kind == "trio_grpc":
        _serve_trio_grpc(ready)
    elif kind == "aio":
        _serve_aio(ready)
    elif kind == "aio_bridge":
        _serve_aio_bridge(ready)
    else:
        _serve_sync(kind, ready)


class CeilingServer:
    """A dict-backed TableService of one kind in a child process (its own GIL, as the real
    server has). `with CeilingServer("sync") as server:` then server.address, server.pid."""

    def __init__(self, kind: str) -> None:
        if kind not in CEILING_KINDS:
            raise ValueError(f"a ceiling server is one of {CEILING_KINDS}, not {kind!r}")
        self.kind = kind

    def __enter__(self) -> CeilingServer:
        context = multiprocessing.get_context("spawn")
        receive, send = context.Pipe(duplex=False)
        self._process = context.Process(target=_serve, args=(self.kind, send), daemon=True)
        self._process.start()
        if not receive.poll(30):
            self._process.kill()
            raise RuntimeError(f"the {self.kind} ceiling server did not start")
        self.address = f"127.0.0.1:{receive.recv()}"
        self.pid = self._process.pid
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._process.kill()
        self._process.join()
