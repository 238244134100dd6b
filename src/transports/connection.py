"""FramedConnection: bkcore.wire frames over one trio stream, both directions batched.

Receiving: every read takes what the socket has (up to RECEIVE_SIZE bytes, or the rest of a
larger frame), decodes every complete frame in it and hands the whole batch of messages to the
owner in one call, so a bookie or client handles a receive buffer at a time, not a message at
a time. Over plain TCP the socket receives straight into the FrameDecoder's buffer (recv_into),
where frames are decoded in place: no copy of the received bytes is made.

Sending: send() only queues (it never blocks the caller); one writer task drains the queue and
packs everything queued since its last write into as few frames as FRAME_SIZE_MAX allows, so
replies produced by one batch leave in one write. An owner that has queued all it has for now
may call flush(): over a plain TCP socket, with the writer task idle, the queue is framed and
written right away by a non-blocking write, sparing the hop to the writer task (some 40 us of
a small answer's latency); the writer task sends whatever the socket did not take. Messages
are framed as given: nothing here joins or rewrites them. is_writing says whether something
sent now would wait behind an earlier write; on_writable is called when that is over, so an
owner that holds messages back meanwhile (a client core's adds) can hand them over then.

Backpressure: while more than send_queue_size_max bytes wait to be sent, the connection stops
reading, so a peer that does not read its answers fills its own TCP window instead of this
process's memory (the bookie core's own limits answer TOO_MANY_REQUESTS before that).

A ReceiveGate shared by many connections stops them all reading while it is shut: a bookie
shuts it while its write cache is full, until a checkpoint has made room.

Malformed input (bad checksum, oversized length, undecodable message) gets one ErrorResponse
naming the problem, then the connection closes; the process carries on.

The messages are bookie messages (bkcore.wire) unless a FrameCodec says otherwise: another
protocol that shares the framing (table calls between stream storage servers) passes its own.
"""

from __future__ import annotations

import errno
import math
import os
import time
from dataclasses import dataclass
from typing import Callable

import trio

from bkcore.errors import Code
from bkcore.wire import FRAME_SIZE_MAX, ErrorResponse, FrameDecoder, MalformedFrame, decode_messages, encode_frame

RECEIVE_SIZE = 256 * 1024
# Queued messages encoded into frames at a time, in bytes (at least one message): a queue grown
# to tens of MiB (a slow bookie of a larger write quorum than ack quorum falls behind while the
# others' acks let the writer go on) is written in slices, each followed by a checkpoint, rather
# than encoded in one go that held the loop for hundreds of milliseconds.
WRITE_SLICE_SIZE = 1024 * 1024
# Messages handed to the owner at once; between slices the reader waits out a full send queue.
DELIVERY_SLICE_COUNT = 64
# A receive's messages are handed over in one loop step until this long has gone on them; then
# the reader lets the loop run (a checkpoint) before the next slice. One 256 KiB receive can
# hold ten thousand small answers, as when a disk that stopped for 100 ms goes on (the answers
# of every add waiting behind it arrive at once): handled in one step they held a client's loop
# for 13 ms, its timers and other connections waiting (`bk bench ledger`, quarter peak).
DELIVERY_STEP_S = 0.002
SEND_QUEUE_SIZE_MAX_DEFAULT = 64 * 1024 * 1024
# A conservative size for one message in the queue when it has no body (ids, codes, keys).
MESSAGE_OVERHEAD_SIZE = 64


def message_size(message: object) -> int:
    body = getattr(message, "body", None)
    if type(body) is bytes:
        return MESSAGE_OVERHEAD_SIZE + len(body)
    bodies = getattr(message, "bodies", None)
    return MESSAGE_OVERHEAD_SIZE + (sum(map(len, bodies)) if type(bodies) is list else 0)


@dataclass(frozen=True, slots=True)
class FrameCodec:
    """What one protocol's messages are on a FramedConnection (the framing is bkcore.wire's)."""

    encode_frame: Callable[[list], bytes]     # messages -> one frame; ValueError if they do not fit
    decode: Callable[[memoryview], list]      # a frame's body -> messages; MalformedFrame otherwise
    size_of: Callable[[object], int]          # bytes a queued message counts for backpressure
    # The message that answers a malformed frame before the connection closes (None: none).
    refusal: Callable[[str], object] | None = None


def _bookie_refusal(reason: str) -> ErrorResponse:
    return ErrorResponse(code=int(Code.BAD_REQUEST), reason=reason[:200])


BOOKIE_CODEC = FrameCodec(encode_frame=encode_frame, decode=decode_messages, size_of=message_size,
                          refusal=_bookie_refusal)


class ReceiveGate:
    """Open, or shut for every connection that shares it: while shut they take nothing more
    from their sockets (what they have already received is still handed over first)."""

    def __init__(self) -> None:
        self.is_shut = False
        self.shut_count = 0
        self._opened = trio.Event()

    def shut(self) -> None:
        if not self.is_shut:
            self.is_shut = True
            self.shut_count += 1
            self._opened = trio.Event()

    def open(self) -> None:
        self.is_shut = False
        self._opened.set()

    async def wait_open(self) -> None:
        await self._opened.wait()


class FramedConnection:
    def __init__(self, stream: trio.abc.Stream, *, name: str,
                 on_messages: Callable[[list, "FramedConnection"], None],
                 frame_size_max: int = FRAME_SIZE_MAX,
                 send_queue_size_max: int = SEND_QUEUE_SIZE_MAX_DEFAULT,
                 on_writable: Callable[["FramedConnection"], None] | None = None,
                 receive_gate: ReceiveGate | None = None, codec: FrameCodec = BOOKIE_CODEC) -> None:
        self.stream = stream
        self._codec = codec
        self._size_of = codec.size_of
        self._receive_gate = receive_gate or ReceiveGate()
        # Called by the writer task each time it has written everything it was given and
        # is_writing turned false: an owner that keeps messages back while the connection
        # writes (a client's held adds) hands them over then.
        self._on_writable = on_writable
        self.name = name
        self._on_messages = on_messages
        self._frame_size_max = frame_size_max
        self._send_queue: list = []
        self._send_queue_size = 0
        self.send_queue_size_max = send_queue_size_max
        self._send_wakeup = trio.Event()
        self._drained = trio.Event()           # set each time the writer takes the queue
        # flush() writes to this descriptor directly: plain TCP only (not TLS, not test streams).
        self._fd = stream.socket.fileno() if isinstance(stream, trio.SocketStream) else -1
        self._is_writing = False               # the writer task is inside send_all
        self._unsent = b""                     # what a flush() could not write: goes first
        self._last_receive_filled = False      # (see _receive_into)
        self.backpressure_wait_count = 0
        self.send_queue_size_peak = 0
        self.is_closed = False
        self.close_reason = ""
        self.received_frame_count = 0
        self.sent_frame_count = 0
        self.malformed_frame_count = 0
        self.delivery_yield_count = 0          # checkpoints between slices of one receive

    # -- sending ----------------------------------------------------------------------------

    def send(self, message: object, *, wake_writer: bool = True) -> bool:
        """Queue a message; False (and nothing queued) if the connection is closed. The queue
        may pass send_queue_size_max: reading stops until it drains below it again, so a peer
        that sends faster than it reads its answers is slowed by TCP itself.

        wake_writer=False is for a caller that calls flush() before it yields (the drivers'
        pumps do): flush() writes the queue itself, or wakes the writer task when it cannot,
        so the writer task is not woken only to find the queue empty (a task switch each)."""
        if self.is_closed:
            return False
        self._send_queue.append(message)
        self._send_queue_size += self._size_of(message)
        if self._send_queue_size > self.send_queue_size_peak:
            self.send_queue_size_peak = self._send_queue_size
        if wake_writer:
            self._send_wakeup.set()
        return True

    @property
    def is_writing(self) -> bool:
        """Whether what is sent now would wait for an earlier write: the writer task is writing
        or has been woken to, or a flush() left bytes unwritten. (Messages merely queued by
        the caller's own pump, which it flushes before yielding, do not count.)"""
        return self._is_writing or bool(self._unsent) or self._send_wakeup.is_set()

    @property
    def is_backed_up(self) -> bool:
        return self.send_queue_size > self.send_queue_size_max

    @property
    def send_queue_size(self) -> int:
        """Bytes queued or taken by flush() but not yet written."""
        return self._send_queue_size + len(self._unsent)

    def flush(self) -> None:
        """Write what is queued now, if the writer task is idle and this is a plain TCP socket;
        the socket's refusal (full, broken) leaves the rest to the writer task."""
        if not self._send_queue:
            return
        if self._is_writing or self._unsent or self._fd < 0 or self.is_closed:
            self._send_wakeup.set()           # the writer task's turn, however it was queued
            return
        data = b"".join(self._take_frames())
        try:
            written = os.write(self._fd, data)
        except OSError:               # would block, or broken: the writer task finds out which
            written = 0
        if written < len(data):
            self._unsent = memoryview(data)[written:]
            self._send_wakeup.set()
        elif self._send_queue:        # (more than a slice was queued: the writer task's turn)
            self._send_wakeup.set()

    def _take_frames(self) -> list[bytes]:
        """Frames of the messages at the front of the queue, about WRITE_SLICE_SIZE bytes of
        them; the rest stays queued."""
        queue = self._send_queue
        if self._send_queue_size <= WRITE_SLICE_SIZE:
            messages, self._send_queue, self._send_queue_size = queue, [], 0
        else:
            size_of, taken, count = self._size_of, 0, 0
            for message in queue:
                taken += size_of(message)
                count += 1
                if taken >= WRITE_SLICE_SIZE:
                    break
            messages = queue[:count]
            del queue[:count]
            self._send_queue_size -= taken
        self._wake_reader()
        frames = self._frames(messages)
        self.sent_frame_count += len(frames)
        return frames

    async def _write_loop(self) -> None:
        while True:
            await self._send_wakeup.wait()
            self._send_wakeup = trio.Event()
            if not self._send_queue and not self._unsent:
                if self.is_closed:
                    return
                self._writable()            # (a flush() wrote what it was woken for)
                continue
            self._is_writing = True
            if self._unsent:
                await self.stream.send_all(self._unsent)
                self._unsent = b""
                self._wake_reader()
            while self._send_queue:
                for frame in self._take_frames():
                    await self.stream.send_all(frame)
            self._is_writing = False
            if self.is_closed and not self._send_queue:
                return
            self._writable()

    def _writable(self) -> None:
        if self._on_writable is not None and not self.is_writing and not self.is_closed:
            self._on_writable(self)

    def _wake_reader(self) -> None:
        """The queue just shrank: a reader waiting out backpressure looks again."""
        self._drained.set()
        self._drained = trio.Event()

    def _frames(self, messages: list) -> list[bytes]:
        """Pack messages into frames under the size limit (one frame in the common case)."""
        try:
            return [self._codec.encode_frame(messages)]
        except ValueError:
            if len(messages) == 1:
                raise
        middle = math.ceil(len(messages) / 2)
        return self._frames(messages[:middle]) + self._frames(messages[middle:])

    # -- receiving --------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        decoder = FrameDecoder(frame_size_max=self._frame_size_max, decode=self._codec.decode)
        gate = self._receive_gate
        while True:
            while self.is_backed_up and not self.is_closed:
                self.backpressure_wait_count += 1
                await self._drained.wait()
            while gate.is_shut and not self.is_closed:
                await gate.wait_open()
            if not await self._receive_into(decoder):
                self.close_reason = "closed by peer"
                return
            step_started = time.perf_counter()
            batch: list = []
            try:
                while (messages := decoder.next_frame()) is not None:
                    self.received_frame_count += 1
                    batch.extend(messages)
            except MalformedFrame as exc:
                self.malformed_frame_count += 1
                if batch:
                    self._on_messages(batch, self)
                await self._refuse(str(exc))
                return
            # Hand the batch over in slices, pausing while the answers back up (one frame of
            # small requests can ask for far more bytes than it holds: reads of big entries),
            # and letting the loop run once a step has gone on DELIVERY_STEP_S. (Shielded: a
            # batch received is handed over whole, as before the connection was closed.)
            for start in range(0, len(batch), DELIVERY_SLICE_COUNT):
                while self.is_backed_up and not self.is_closed:
                    self.backpressure_wait_count += 1
                    await self._drained.wait()
                if start and time.perf_counter() - step_started >= DELIVERY_STEP_S:
                    self.delivery_yield_count += 1
                    await trio.lowlevel.cancel_shielded_checkpoint()
                    step_started = time.perf_counter()
                self._on_messages(batch[start:start + DELIVERY_SLICE_COUNT], self)

    async def _receive_into(self, decoder: FrameDecoder) -> int:
        """Receive what the stream has into the decoder; 0 when the peer has closed. A plain
        TCP socket receives straight into the decoder's buffer (no copy). After a receive that
        took all the socket had, the next one waits for the socket to be readable first and
        then reads with one system call: trio's recv_into would try the read (failing, with an
        exception), wait, read again, and yield once more after it, per message in a
        request-and-answer exchange. After a receive that filled the buffer (more may be
        there), trio's recv_into reads at once and yields after it, for fairness."""
        if self._fd < 0:
            data = await self.stream.receive_some(RECEIVE_SIZE)
            decoder.feed(data)
            return len(data)
        room = decoder.receive_buffer(RECEIVE_SIZE)
        room_size = len(room)
        try:
            if self._last_receive_filled:
                count = await self.stream.socket.recv_into(room)
            else:
                while True:
                    await trio.lowlevel.wait_readable(self._fd)
                    try:
                        count = os.readv(self._fd, (room,))
                        break
                    except BlockingIOError:      # woken, but another reader was faster
                        continue
        except OSError as exc:   # the errors trio.SocketStream.receive_some translates
            if exc.errno == errno.EBADF:
                raise trio.ClosedResourceError("this socket was already closed") from None
            raise trio.BrokenResourceError(f"socket connection broken: {exc}") from exc
        finally:
            room.release()
        self._last_receive_filled = count == room_size
        decoder.received(count)
        return count

    async def _refuse(self, reason: str) -> None:
        """Answer a malformed frame with the codec's refusal (an ErrorResponse) and stop reading."""
        self.close_reason = f"malformed frame: {reason}"
        if self._codec.refusal is not None:
            self.send(self._codec.refusal(reason))
        self.is_closed = True
        self._send_wakeup.set()

    # -- lifetime ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Read and write until the peer closes, the stream breaks, or close() is called. Queued
        messages are flushed (best effort) before the stream closes."""
        try:
            async with trio.open_nursery() as nursery:
                async def read_then_stop() -> None:
                    try:
                        await self._read_loop()
                    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                        self.close_reason = self.close_reason or f"broken: {exc!r}"
                    self.is_closed = True
                    self._send_wakeup.set()
                    if not self._send_queue and not self._unsent:
                        nursery.cancel_scope.cancel()

                async def write() -> None:
                    try:
                        await self._write_loop()
                    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                        self.close_reason = self.close_reason or f"broken while sending: {exc!r}"
                    nursery.cancel_scope.cancel()

                nursery.start_soon(read_then_stop)
                nursery.start_soon(write)
        finally:
            self.is_closed = True
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self.stream)

    def close(self, reason: str = "closed") -> None:
        """Stop after flushing what is queued."""
        if not self.is_closed:
            self.is_closed = True
            self.close_reason = reason
            self._send_wakeup.set()


