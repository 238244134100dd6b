"""bktransports.grpc_trio against the real grpcio client: unary calls answered by a task or by a
callback, metadata both ways, statuses and their messages, unknown methods, malformed and
compressed requests, messages larger than HTTP/2's flow-control windows, server streams,
deadlines and cancellations that reach the handler, and many calls at once."""

from __future__ import annotations

import time

import grpc
import pytest
import trio

from bktransports.grpc_trio import NOT_FOUND, GrpcError, GrpcServer, ServerStream, Unary



def unary(**handler) -> Unary:
    return Unary(bytes, bytes, **handler)


@pytest.fixture
async def serve(nursery):
    """serve(methods) -> "127.0.0.1:port" of a GrpcServer on a free port."""
    async def start(methods: dict) -> str:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        await nursery.start(GrpcServer(methods).serve, listeners)
        return f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"
    return start


# Past grpcio's default 4 MiB, for the large-message test.
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]


async def call(address: str, path: str, request: bytes, *, metadata=(), timeout=10.0, with_call=False):
    def blocking():
        with grpc.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
            method = channel.unary_unary(path, request_serializer=None, response_deserializer=None)
            if with_call:
                return method.with_call(request, metadata=metadata, timeout=timeout)
            return method(request, metadata=metadata, timeout=timeout)
    return await trio.to_thread.run_sync(blocking)


async def test_unary_calls_by_task_and_by_callback_with_metadata_both_ways(serve):
    async def echo(request: bytes, call) -> bytes:
        await trio.sleep(0)
        call.trailers.append(("x-seen", call.header("x-tag") or "none"))
        return b"task:" + request

    def start(request: bytes, call, answer) -> None:
        answer(b"callback:" + request + call.metadata["x-tag"].encode())

    address = await serve({"/t.S/Echo": unary(handle=echo), "/t.S/Start": unary(start=start)})
    response, outcome = await call(address, "/t.S/Echo", b"hi", metadata=[("x-tag", "blue")], with_call=True)
    assert response == b"task:hi"
    assert ("x-seen", "blue") in outcome.trailing_metadata()
    assert await call(address, "/t.S/Start", b"hi", metadata=[("x-tag", "red")]) == b"callback:hired"


async def test_a_later_answer_from_a_callback(serve):
    pending = []

    def start(request: bytes, call, answer) -> None:
        pending.append((request, answer))

    address = await serve({"/t.S/Later": unary(start=start)})
    async with trio.open_nursery() as nursery:
        results = []

        async def client():
            results.append(await call(address, "/t.S/Later", b"q"))
        nursery.start_soon(client)
        while not pending:
            await trio.sleep(0.01)
        request, answer = pending.pop()
        answer(request + b"!", None)
    assert results == [b"q!"]


async def test_statuses_and_messages_reach_the_client(serve):
    async def missing(request: bytes, call) -> bytes:
        raise GrpcError(NOT_FOUND, "no key 'ä b%c' in table t", trailers=(("x-why", "gone"),))

    async def broken(request: bytes, call) -> bytes:
        raise ValueError("a bug")

    def refuses(request: bytes, call, answer) -> None:
        answer(None, GrpcError(NOT_FOUND, "refused at once"))

    address = await serve({"/t.S/Missing": unary(handle=missing), "/t.S/Broken": unary(handle=broken),
                           "/t.S/Refuses": unary(start=refuses)})
    with pytest.raises(grpc.RpcError) as missing_error:
        await call(address, "/t.S/Missing", b"")
    assert missing_error.value.code() is grpc.StatusCode.NOT_FOUND
    assert missing_error.value.details() == "no key 'ä b%c' in table t"
    assert ("x-why", "gone") in missing_error.value.trailing_metadata()
    with pytest.raises(grpc.RpcError) as broken_error:
        await call(address, "/t.S/Broken", b"")
    assert broken_error.value.code() is grpc.StatusCode.INTERNAL and "ValueError: a bug" in broken_error.value.details()
    with pytest.raises(grpc.RpcError) as refused_error:
        await call(address, "/t.S/Refuses", b"")
    assert refused_error.value.code() is grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as unknown_error:
        await call(address, "/t.S/Nothing", b"")
    assert unknown_error.value.code() is grpc.StatusCode.UNIMPLEMENTED and "/t.S/Nothing" in unknown_error.value.details()


async def test_a_request_that_does_not_decode_is_invalid_argument(serve):
    def decode(data: bytes) -> bytes:
        raise ValueError("not a request")

    address = await serve({"/t.S/Strict": Unary(decode, bytes, start=lambda r, c, answer: answer(r))})
    with pytest.raises(grpc.RpcError) as error:
        await call(address, "/t.S/Strict", b"junk")
    assert error.value.code() is grpc.StatusCode.INVALID_ARGUMENT and "not a request" in error.value.details()


async def test_messages_larger_than_the_flow_control_windows(serve):
    async def double(request: bytes, call) -> bytes:
        return request + request

    address = await serve({"/t.S/Double": unary(handle=double)})
    request = bytes(range(256)) * (20 * 1024)         # 5 MiB in, 10 MiB out
    assert await call(address, "/t.S/Double", request) == request + request
    with pytest.raises(grpc.RpcError) as error:
        await call(address, "/t.S/Double", bytes(17 << 20))
    assert error.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED and "16777216" in error.value.details()
    assert await call(address, "/t.S/Double", b"still") == b"stillstill"      # the connection carries on


async def test_many_calls_at_once_on_one_channel(serve):
    address = await serve({"/t.S/Echo": unary(start=lambda request, call, answer: answer(request))})

    def blocking():
        with grpc.insecure_channel(address) as channel:
            method = channel.unary_unary("/t.S/Echo")
            futures = [method.future(b"%d" % i, timeout=10) for i in range(300)]
            return [future.result() for future in futures]
    assert await trio.to_thread.run_sync(blocking) == [b"%d" % i for i in range(300)]


async def test_a_server_stream_then_its_status(serve):
    async def count(request: bytes, call, send):
        for i in range(int(request)):
            send(b"%d" % i)
            await trio.sleep(0)
        if int(request) == 3:
            raise GrpcError(NOT_FOUND, "stopped after three")

    address = await serve({"/t.S/Count": ServerStream(bytes, bytes, handle=count)})

    def blocking(n: int):
        with grpc.insecure_channel(address) as channel:
            items = []
            try:
                for item in channel.unary_stream("/t.S/Count")(b"%d" % n, timeout=10):
                    items.append(item)
            except grpc.RpcError as error:
                return items, error.code(), error.details()
            return items, grpc.StatusCode.OK, None
    assert await trio.to_thread.run_sync(blocking, 5) == ([b"0", b"1", b"2", b"3", b"4"], grpc.StatusCode.OK, None)
    assert await trio.to_thread.run_sync(blocking, 3) == ([b"0", b"1", b"2"], grpc.StatusCode.NOT_FOUND,
                                                          "stopped after three")


async def test_a_deadline_or_a_cancelled_stream_cancels_the_handler(serve):
    ended = {}

    async def slow(request: bytes, call) -> bytes:
        try:
            await trio.sleep(30)
        finally:
            ended["slow"] = trio.current_time()
        return b""

    async def forever(request: bytes, call, send):
        try:
            while True:
                send(b"tick")
                await trio.sleep(0.01)
        finally:
            ended["forever"] = True

    address = await serve({"/t.S/Slow": unary(handle=slow), "/t.S/Forever": ServerStream(bytes, bytes, handle=forever)})
    started = trio.current_time()
    with pytest.raises(grpc.RpcError) as error:
        await call(address, "/t.S/Slow", b"", timeout=0.3)
    assert error.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    with trio.fail_after(5):
        while "slow" not in ended:
            await trio.sleep(0.01)
    assert ended["slow"] - started < 3

    def read_three_then_cancel():
        with grpc.insecure_channel(address) as channel:
            responses = channel.unary_stream("/t.S/Forever")(b"", timeout=10)
            items = [next(responses) for _ in range(3)]
            responses.cancel()
            return items
    assert await trio.to_thread.run_sync(read_three_then_cancel) == [b"tick"] * 3
    with trio.fail_after(5):
        while "forever" not in ended:
            await trio.sleep(0.01)


async def test_binary_metadata_travels_base64_both_ways(serve):
    def start(request: bytes, call, answer) -> None:
        call.trailers.append(("x-echo-bin", call.metadata["x-raw-bin"] + b"\x00\xff"))
        answer(request)

    address = await serve({"/t.S/Bin": unary(start=start)})
    _, outcome = await call(address, "/t.S/Bin", b"", metadata=[("x-raw-bin", b"\x01\x02")], with_call=True)
    assert ("x-echo-bin", b"\x01\x02\x00\xff") in outcome.trailing_metadata()


async def test_stopping_ends_streams_lets_unary_calls_finish_and_refuses_new_ones(nursery):
    release = trio.Event()

    async def slow(request: bytes, call) -> bytes:
        await release.wait()
        return b"finished"

    async def forever(request: bytes, call, send):
        send(b"first")
        await trio.sleep_forever()

    server = GrpcServer({"/t.S/Slow": unary(handle=slow), "/t.S/Forever": ServerStream(bytes, bytes, handle=forever)})
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    await nursery.start(server.serve, listeners)
    address = f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"

    def stream_until_it_ends():
        with grpc.insecure_channel(address) as channel:
            responses = channel.unary_stream("/t.S/Forever")(b"", timeout=10)
            items = []
            try:
                for item in responses:
                    items.append(item)
            except grpc.RpcError as error:
                return items, error.code()
            return items, grpc.StatusCode.OK

    results = {}
    async with trio.open_nursery() as clients:
        async def unary_client():
            results["slow"] = await call(address, "/t.S/Slow", b"")

        async def stream_client():
            results["stream"] = await trio.to_thread.run_sync(stream_until_it_ends)
        clients.start_soon(unary_client)
        clients.start_soon(stream_client)
        await trio.sleep(0.3)                      # both calls in flight
        async with trio.open_nursery() as stopping:
            stopping.start_soon(server.stop, 5.0)
            await trio.sleep(0.2)
            release.set()
    assert results == {"slow": b"finished", "stream": ([b"first"], grpc.StatusCode.UNAVAILABLE)}


async def test_an_answer_after_the_client_gave_up_or_left_is_dropped_quietly(serve):
    """A callback handler's answer may come long after: the call's deadline passed (the client
    reset the stream), or its connection is gone. The answer raises nothing in whoever calls it."""
    pending = []
    address = await serve({"/t.S/Later": unary(start=lambda request, call, answer: pending.append(answer))})
    with pytest.raises(grpc.RpcError) as error:
        await call(address, "/t.S/Later", b"", timeout=0.2)
    assert error.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    await trio.sleep(0.2)                          # the reset reaches the server; the channel closes
    assert len(pending) == 1
    pending[0](b"too late", None)
    pending[0](None, ValueError("and again"))

    def leave_with_a_call_pending():
        channel = grpc.insecure_channel(address)
        future = channel.unary_unary("/t.S/Later").future(b"", timeout=10)
        while len(pending) < 2:
            time.sleep(0.01)
        channel.close()
        return future
    await trio.to_thread.run_sync(leave_with_a_call_pending)
    await trio.sleep(0.2)                          # the connection's end reaches the server
    pending[1](b"nobody is there", None)
