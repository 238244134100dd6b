"""FramedConnection.flush(): answers written at once from the caller over a real TCP socket, and
what the socket refuses left, in order, to the writer task."""

from __future__ import annotations

import time

import trio
import trio.testing

from bkcore.wire import AddResponse, FrameDecoder, ReadResponse, encode_frame
from bktransports.connection import (
    DELIVERY_SLICE_COUNT, MESSAGE_OVERHEAD_SIZE, WRITE_SLICE_SIZE, FramedConnection, ReceiveGate,
)


async def connected_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    client = await trio.open_tcp_stream("127.0.0.1", port)
    server = await listeners[0].accept()
    await listeners[0].aclose()
    return client, server


async def receive_messages(stream: trio.SocketStream, count: int) -> list:
    decoder, messages = FrameDecoder(), []
    with trio.fail_after(30):
        while len(messages) < count:
            decoder.feed(await stream.receive_some(1 << 20))
            while (frame := decoder.next_frame()) is not None:
                messages.extend(frame)
    return messages


async def first_frame(stream) -> list:
    decoder = FrameDecoder()
    with trio.fail_after(10):
        while (frame := decoder.next_frame()) is None:
            decoder.feed(await stream.receive_some(1 << 16))
    return frame


def answer(request_id: int) -> AddResponse:
    return AddResponse(request_id=request_id, code=0, ledger_id=7, entry_id=request_id)


async def test_flush_writes_what_is_queued_without_the_writer_task():
    near, far = await connected_pair()
    connection = FramedConnection(near, name="near", on_messages=lambda messages, connection: None)
    connection.send(answer(1))
    connection.send(answer(2))
    with trio.move_on_after(0.2):           # queued only: nothing runs the writer task
        await far.receive_some(1 << 16)
        raise AssertionError("a queued message left before flush()")
    connection.flush()
    assert connection.send_queue_size == 0
    assert await receive_messages(far, 2) == [answer(1), answer(2)]
    assert connection.sent_frame_count == 1


async def test_what_the_socket_refuses_goes_first_through_the_writer_task():
    near, far = await connected_pair()
    connection = FramedConnection(near, name="near", on_messages=lambda messages, connection: None)
    big = ReadResponse(request_id=1, code=0, ledger_id=7, entry_id=1, body=bytes(range(256)) * 16_384)  # 4 MiB
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        await trio.sleep(0)
        connection.send(big)
        connection.flush()                   # the peer reads nothing yet: the socket takes a part
        assert 0 < connection.send_queue_size < len(big.body)
        connection.send(answer(2))
        connection.flush()                   # must not jump ahead of the unsent rest
        connection.send(answer(3))
        messages = await receive_messages(far, 3)
        connection.close()
    assert messages == [big, answer(2), answer(3)]
    assert connection.send_queue_size == 0


async def test_flush_is_a_no_op_for_streams_that_are_not_tcp_sockets():
    near, far = trio.testing.memory_stream_pair()
    connection = FramedConnection(near, name="near", on_messages=lambda messages, connection: None)
    connection.send(answer(1))
    connection.flush()
    assert connection.send_queue_size > 0    # still queued for the writer task
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        assert await first_frame(far) == [answer(1)]
        connection.close()


async def test_queued_without_waking_the_writer_still_leaves_when_flush_cannot_write_it():
    """send(wake_writer=False) then flush(): written by flush() when it can; when it cannot (a
    stream that is not a TCP socket, or earlier bytes still unsent) flush() wakes the writer."""
    near, far = trio.testing.memory_stream_pair()
    connection = FramedConnection(near, name="near", on_messages=lambda messages, connection: None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        await trio.sleep(0.05)
        connection.send(answer(1), wake_writer=False)
        await trio.sleep(0.05)
        assert connection.send_queue_size > 0      # not woken: still queued
        connection.flush()                         # cannot write a memory stream: wakes the writer
        assert await first_frame(far) == [answer(1)]
        connection.close()


async def test_queued_without_waking_the_writer_is_written_by_flush_over_tcp():
    near, far = await connected_pair()
    connection = FramedConnection(near, name="near", on_messages=lambda messages, connection: None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        await trio.sleep(0)
        connection.send(answer(1), wake_writer=False)
        connection.send(answer(2), wake_writer=False)
        connection.flush()
        assert connection.send_queue_size == 0
        assert await receive_messages(far, 2) == [answer(1), answer(2)]
        connection.close()


async def test_a_shut_gate_stops_every_connection_sharing_it_from_reading():
    gate = ReceiveGate()
    gate.shut()
    received: list = []
    pairs = [await connected_pair() for _ in range(2)]
    async with trio.open_nursery() as nursery:
        for index, (near, far) in enumerate(pairs):
            connection = FramedConnection(near, name=f"near-{index}", receive_gate=gate,
                                          on_messages=lambda messages, connection: received.extend(messages))
            nursery.start_soon(connection.run)
            await far.send_all(encode_frame([answer(index)]))
        await trio.sleep(0.2)
        assert received == []                     # sent, and left in the sockets
        gate.open()
        with trio.fail_after(10):
            while len(received) < 2:
                await trio.sleep(0.01)
        assert sorted(message.request_id for message in received) == [0, 1]
        nursery.cancel_scope.cancel()


async def test_is_writing_until_the_writer_task_is_done_then_on_writable():
    near, far = await connected_pair()
    writable = []
    connection = FramedConnection(near, name="near", on_messages=lambda messages, connection: None,
                                  on_writable=lambda c: writable.append(c.send_queue_size))
    big = ReadResponse(request_id=1, code=0, ledger_id=7, entry_id=1, body=bytes(range(256)) * 16_384)  # 4 MiB
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        await trio.sleep(0)
        assert not connection.is_writing
        connection.send(answer(1), wake_writer=False)
        assert not connection.is_writing           # queued by its owner's pump, which flushes
        connection.flush()
        assert not connection.is_writing and writable == []
        connection.send(big, wake_writer=False)
        connection.flush()                          # the peer reads nothing yet: the socket takes a part
        assert connection.is_writing
        messages = await receive_messages(far, 2)
        with trio.fail_after(10):
            while not writable:
                await trio.sleep(0.01)
        assert not connection.is_writing and writable == [0]
        connection.close()
    assert messages == [answer(1), big]


async def test_a_long_queue_is_written_in_slices_with_the_loop_running_between_them():
    """20 MiB of queued reads leave in frames of about WRITE_SLICE_SIZE, all in order, and the
    loop runs between slices: no single step of the writer encodes the whole queue (a slow
    bookie's queue once held the client's loop for 570 ms)."""
    near, far = await connected_pair()
    connection = FramedConnection(near, name="near", on_messages=lambda messages, connection: None)
    body = b"x" * 16_384
    count = 20 * (1 << 20) // len(body)
    for request_id in range(count):
        connection.send(ReadResponse(request_id=request_id, code=0, ledger_id=7, entry_id=request_id, body=body),
                        wake_writer=False)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        nursery.start_soon(tick)
        connection.flush()
        messages = await receive_messages(far, count)
        nursery.cancel_scope.cancel()
    assert [m.request_id for m in messages] == list(range(count))
    slices = count * (len(body) + MESSAGE_OVERHEAD_SIZE) / WRITE_SLICE_SIZE
    assert slices * 0.9 <= connection.sent_frame_count <= slices * 1.1 + 1, connection.sent_frame_count
    assert ticks >= connection.sent_frame_count


async def test_a_burst_of_answers_is_handed_over_in_steps_with_the_loop_running_between_them():
    """Ten thousand answers arriving at once (a disk that stopped goes on) reach the owner in
    order, a slice at a time; once a step has gone on DELIVERY_STEP_S the loop runs before the
    next slice, so another task (a timer, another connection) is not held for the whole burst."""
    near, far = await connected_pair()
    count = 10_000
    received: list[int] = []
    ticks_seen: list[int] = []
    ticks = 0

    def on_messages(messages, connection) -> None:
        ticks_seen.append(ticks)
        received.extend(m.request_id for m in messages)
        spin_until = time.perf_counter() + 0.0005                  # the owner's work on a slice
        while time.perf_counter() < spin_until:
            pass

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.lowlevel.checkpoint()

    connection = FramedConnection(near, name="near", on_messages=on_messages)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        nursery.start_soon(tick)
        await far.send_all(encode_frame([answer(request_id) for request_id in range(count)]))
        with trio.fail_after(30):
            while len(received) < count:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert received == list(range(count))
    slices = len(ticks_seen)
    assert slices >= count // DELIVERY_SLICE_COUNT
    # A step of DELIVERY_STEP_S (2 ms) holds about four slices: the loop ran after about every fourth.
    assert connection.delivery_yield_count >= slices // 8, (connection.delivery_yield_count, slices)
    assert len(set(ticks_seen)) > connection.delivery_yield_count // 2
