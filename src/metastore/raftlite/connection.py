"""The raft-lite wire: msgpack lists in length+crc32c frames (bkcore.wire's framing), and a
framed trio connection with a send queue drained by its own task. Shared by the raft-lite
client (metastore.raftlite.client) and the node's server (transports.raftlite_server).
"""

from __future__ import annotations

import msgpack
import trio

from bkcore.wire import FrameDecoder, MalformedFrame, frame_body

RECEIVE_SIZE = 256 * 1024


def encode(message: list) -> bytes:
    return frame_body(msgpack.packb(message, use_bin_type=True))


def decode(body: bytes):
    try:
        return [msgpack.unpackb(body, raw=False, strict_map_key=False)]
    except (ValueError, msgpack.UnpackException) as exc:
        raise MalformedFrame(f"not msgpack: {exc}") from None


CONNECTION_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError, trio.TooSlowError, MalformedFrame)


def is_connection_failure(exc: BaseException) -> bool:
    """A broken or bad connection (possibly inside an exception group from a nursery)."""
    if isinstance(exc, BaseExceptionGroup):
        return all(is_connection_failure(e) for e in exc.exceptions)
    return isinstance(exc, CONNECTION_ERRORS)


class RaftConnection:
    """A framed connection with a send queue drained by its own task."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.outbox: list[bytes] = []
        self.wakeup = trio.Event()
        self.is_closed = False

    def send(self, message: list) -> None:
        if not self.is_closed:
            self.outbox.append(encode(message))
            self.wakeup.set()

    async def write_loop(self) -> None:
        while True:
            await self.wakeup.wait()
            self.wakeup = trio.Event()
            data, self.outbox = b"".join(self.outbox), []
            if data:
                await self.stream.send_all(data)

    async def messages(self):
        decoder = FrameDecoder(decode=decode)
        while True:
            data = await self.stream.receive_some(RECEIVE_SIZE)
            if not data:
                return
            decoder.feed(data)
            while (frame := decoder.next_frame()) is not None:
                yield frame[0]
