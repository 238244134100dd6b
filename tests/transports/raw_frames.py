"""Talking to a real bookie process with raw frames, for tests that look at what it does on
disk: one frame sent, its answer awaited."""

import trio

from bkcore.errors import Code
from bkcore.wire import FrameDecoder


async def expect_ok(stream: trio.abc.Stream, decoder: FrameDecoder, frame: bytes) -> None:
    """Send `frame` and wait for the answer to its first message, which must be OK."""
    await stream.send_all(frame)
    answer = None
    while answer is None:
        decoder.feed(await stream.receive_some(65536))
        answer = decoder.next_frame()
    assert answer[0].code == Code.OK, answer
