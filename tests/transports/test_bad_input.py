"""A bookie on real TCP facing bad input: garbage, truncated and oversized frames, wrong keys,
unknown ledgers, adds to a readonly bookie. Each gets a clear answer, nothing crashes, nothing
stored changes, and the bookie keeps serving everyone else."""

import struct

import pytest
import trio

import bkclient
from bkcore.digest import Digester, DigestType, master_key
from bkcore.errors import Code
from bkcore.wire import (
    AddRequest, AddResponse, ErrorResponse, FrameDecoder, ReadRequest, ReadResponse, encode_frame,
)

URI = "memory://badinput"


@pytest.fixture
async def cluster(start_cluster):
    return await start_cluster(URI, 3)


async def exchange(bookie_id: str, data: bytes, *, expect_close: bool) -> list:
    """Send raw bytes; return the messages answered until the bookie closes (or 2 s pass)."""
    host, port = bookie_id.split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    decoder = FrameDecoder()
    messages = []
    await stream.send_all(data)
    with trio.move_on_after(2) as waited:
        while chunk := await stream.receive_some(65536):
            decoder.feed(chunk)
            while (frame := decoder.next_frame()) is not None:
                messages.extend(frame)
            if not expect_close and messages:
                break
    await stream.aclose()
    if expect_close:
        assert not waited.cancelled_caught, "the bookie should have closed the connection"
    return messages


async def bookie_still_serves(cluster) -> None:
    async with bkclient.connect(URI) as bk:
        ledger = await bk.create_ledger(password=b"pw")
        assert await ledger.add(b"still fine") == 0


@pytest.mark.parametrize("data, reason", [
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"\0" * 64, "frame length"),
    (struct.pack(">II", 0x7FFFFFFF, 0) + b"x", "frame length"),
    (struct.pack(">II", 20, 12345) + b"0123456789abcdef", "checksum"),
    (encode_frame([])[:4] + b"\0\0\0\0" + encode_frame([])[8:], "checksum"),
    (struct.pack(">II", 5, __import__("crc32c").crc32c(b"\xc1")) + b"\xc1", "msgpack"),
])
async def test_malformed_frames_get_an_error_and_a_close(cluster, data, reason):
    bookie = cluster.bookies[0]
    messages = await exchange(bookie.bookie_id, data, expect_close=True)
    assert len(messages) == 1 and isinstance(messages[0], ErrorResponse), messages
    assert messages[0].code == Code.BAD_REQUEST and reason in messages[0].reason
    with trio.fail_after(2):
        while bookie.server.counts["malformed_frames"] < 1:   # counted as the connection ends
            await trio.sleep(0.01)
    await bookie_still_serves(cluster)


async def test_truncated_frame_then_hangup_changes_nothing(cluster):
    bookie = cluster.bookies[0]
    frame = encode_frame([AddRequest(request_id=1, ledger_id=999, entry_id=0, master_key=b"k" * 32, body=b"x" * 100)])
    host, port = bookie.bookie_id.split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    await stream.send_all(frame[:len(frame) // 2])
    await stream.aclose()
    await trio.sleep(0.1)
    assert 999 not in bookie.server.stack.storage.ledger_ids()
    await bookie_still_serves(cluster)


async def test_wrong_key_unknown_ledger_and_unknown_entry_are_answered_by_code(cluster):
    async with bkclient.connect(URI) as bk:
        ledger = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=3, password=b"pw")
        await ledger.add(b"zero")
    bookie = cluster.bookies[0]
    digester = Digester(ledger_id=ledger.ledger_id, digest_type=DigestType.CRC32C, password=b"other")
    forged = AddRequest(request_id=7, ledger_id=ledger.ledger_id, entry_id=1, master_key=master_key(b"other"),
                        body=digester.pack_entry(entry_id=1, lac=0, length=10, payload=b"forged"))
    fence_attempt = ReadRequest(request_id=8, ledger_id=ledger.ledger_id, entry_id=0,
                                master_key=master_key(b"other"), is_fencing=True)
    unknown_ledger = ReadRequest(request_id=9, ledger_id=123456, entry_id=0)
    unknown_entry = ReadRequest(request_id=10, ledger_id=ledger.ledger_id, entry_id=50)
    answers = await exchange(bookie.bookie_id, encode_frame([forged, fence_attempt, unknown_ledger, unknown_entry]),
                             expect_close=False)
    with trio.move_on_after(2):
        while len(answers) < 4:
            answers += await exchange(bookie.bookie_id, b"", expect_close=False)
    by_id = {m.request_id: m for m in answers}
    assert isinstance(by_id[7], AddResponse) and by_id[7].code == Code.UNAUTHORIZED
    assert isinstance(by_id[8], ReadResponse) and by_id[8].code == Code.UNAUTHORIZED
    assert by_id[9].code == Code.NO_SUCH_LEDGER
    assert by_id[10].code == Code.NO_SUCH_ENTRY
    assert not bookie.server.core.storage.is_fenced(ledger.ledger_id)
    assert bookie.server.core.storage.get_entry(ledger.ledger_id, 1) is None


async def test_readonly_bookie_refuses_adds_but_serves_reads(cluster):
    async with bkclient.connect(URI) as bk:
        ledger = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=3, password=b"pw")
        await ledger.add(b"zero")
        bookie = cluster.bookies[0]
        await bookie.server.set_readonly(True)
        assert await bk.list_bookies(readonly=True) == [bookie.bookie_id]
        assert bookie.bookie_id not in await bk.list_bookies()
        digester = Digester(ledger_id=ledger.ledger_id, digest_type=DigestType.CRC32C, password=b"pw")
        add = AddRequest(request_id=1, ledger_id=ledger.ledger_id, entry_id=1, master_key=master_key(b"pw"),
                         body=digester.pack_entry(entry_id=1, lac=0, length=10, payload=b"x"))
        read = ReadRequest(request_id=2, ledger_id=ledger.ledger_id, entry_id=0)
        answers = await exchange(bookie.bookie_id, encode_frame([add, read]), expect_close=False)
        with trio.move_on_after(2):
            while len(answers) < 2:
                answers += await exchange(bookie.bookie_id, b"", expect_close=False)
        by_id = {m.request_id: m for m in answers}
        assert by_id[1].code == Code.READONLY
        assert by_id[2].code == Code.OK


async def test_a_client_that_does_not_read_its_answers_is_slowed_not_buffered(start_cluster):
    cluster = await start_cluster(URI, 3, connection_send_queue_size_max=1024 * 1024)
    async with bkclient.connect(URI) as bk:
        ledger = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=3, password=b"pw")
        await ledger.add_many([bytes([i]) * 60_000 for i in range(20)])
    bookie = cluster.bookies[0]
    host, port = bookie.bookie_id.split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    request_count = 3000                     # ~180 MB of answers if they were all queued
    frame = encode_frame([ReadRequest(request_id=i, ledger_id=ledger.ledger_id, entry_id=i % 20)
                          for i in range(request_count)])
    async with trio.open_nursery() as inner:
        inner.start_soon(stream.send_all, frame)
        await trio.sleep(1.0)                # the bookie answers until its queue is full, then waits
        (connection,) = bookie.server.connections.values()
        assert connection.backpressure_wait_count >= 1
        # At most the limit plus one slice of answers (64 x 60 kB) was ever queued.
        assert connection.send_queue_size_peak < 1024 * 1024 + 64 * 61_000
        decoder = FrameDecoder()
        answers = 0
        with trio.fail_after(60):
            while answers < request_count:
                decoder.feed(await stream.receive_some(1 << 20))
                while (messages := decoder.next_frame()) is not None:
                    answers += sum(1 for m in messages if m.code == Code.OK)
    await stream.aclose()
