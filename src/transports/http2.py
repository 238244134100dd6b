"""The server side of HTTP/2 as gRPC uses it, sans I/O: bytes in, callbacks out; frames out
into a buffer the owner writes (bktransports.grpc_trio).

    server = Http2Server(owner)              # owner: on_request, on_data, on_reset, on_window, on_goaway
    server.receive(data)                     # frames in (ProtocolError: send server.out, then close)
    server.send_headers(stream_id, block, end_stream=False)
    sent = server.send_data(stream_id, data) # as much as the flow-control windows allow
    socket.write(server.take_output())

It does what a gRPC server needs and no more: the client's preface, SETTINGS and their
acknowledgement, PING answers, flow control both ways (the client's windows bound what is sent;
ours are given back as the owner's streams take data), HEADERS with CONTINUATION, padding and
priority fields skipped, RST_STREAM, GOAWAY. Header blocks are decoded with the `hpack`
library (its dynamic table, Huffman codes); the blocks sent use no dynamic table at all: the
usual ones are constants, the rest literals (encode_literal). It is a fraction of the CPU of a
general HTTP/2 state machine per call: h2 spent nearly half of the stream-storage server's
Python time.
"""

from __future__ import annotations

import struct

import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
FLAG_END_STREAM = FLAG_ACK = 0x1
FLAG_END_HEADERS = 0x4
FLAG_PADDED = 0x8
FLAG_PRIORITY = 0x20
SETTING_INITIAL_WINDOW_SIZE = 0x4
SETTING_MAX_FRAME_SIZE = 0x5
SETTING_MAX_CONCURRENT_STREAMS = 0x3
NO_ERROR, PROTOCOL_ERROR, FLOW_CONTROL_ERROR, FRAME_SIZE_ERROR, COMPRESSION_ERROR = 0x0, 0x1, 0x3, 0x6, 0x9

DEFAULT_WINDOW = 65_535
DEFAULT_FRAME_SIZE = 16_384
WINDOW_MAX = 2**31 - 1
# Header blocks of indexed fields only remembered per connection (Http2Server._decoded).
INDEXED_BLOCKS_KEPT = 64
# Our receive windows are given back once this much of them is used: a stream's before the
# client has our SETTINGS may be only DEFAULT_WINDOW.
STREAM_WINDOW_REFILL = 32 * 1024

_FRAME_HEADER = struct.Struct(">HBBBI")     # length (24 bits: 16 + 8), type, flags, stream id


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    length = len(payload)
    return _FRAME_HEADER.pack(length >> 8, length & 0xFF, kind, flags, stream_id) + payload


def encode_integer(value: int, prefix_bits: int, first_byte: int = 0) -> bytes:
    """HPACK's integer with an N-bit prefix (RFC 7541 5.1), the prefix's other bits given."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first_byte | value])
    out = bytearray([first_byte | limit])
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_literal(name: bytes, value: bytes) -> bytes:
    """A header as a literal never entered into the dynamic table (RFC 7541 6.2.2), name and
    value as plain strings: any decoder reads it, whatever its table holds."""
    return b"\x00" + encode_integer(len(name), 7) + name + encode_integer(len(value), 7) + value


# ":status: 200" (static entry 8), then "content-type: application/grpc" as a literal with the
# static name 31 (RFC 7541 6.2.2).
RESPONSE_HEADER_BLOCK = b"\x88" + encode_integer(31, 4) + encode_integer(16, 7) + b"application/grpc"


class ProtocolError(Exception):
    """The client broke the protocol: the connection ends (a GOAWAY is in the output)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class Http2Server:
    """One connection. The owner gets, from receive():

        on_request(stream_id, headers, end_stream)   headers: ((name, value), ...) as bytes
        on_data(stream_id, data, end_stream)
        on_reset(stream_id)                           the client cancelled the stream
        on_window(stream_id)                          more may be sent there (0: on every stream)
        on_goaway()                                   the client is leaving
    """

    def __init__(self, owner, *, initial_window: int, connection_window: int, max_concurrent_streams: int) -> None:
        self._owner = owner
        self._in = bytearray()
        self._out = bytearray()
        self._seen_preface = False
        self._decoder = hpack.Decoder()
        # Decoded header blocks made of indexed fields only (a client repeating a call sends its
        # headers as the same few bytes): such a block reads the dynamic table and does not
        # change it, so while no other block has been decoded its headers are the same again.
        self._indexed_blocks: dict[bytes, tuple] = {}
        self._peer_initial_window = DEFAULT_WINDOW
        self.peer_max_frame_size = DEFAULT_FRAME_SIZE
        self._connection_send_window = DEFAULT_WINDOW
        self._send_windows: dict[int, int] = {}       # open streams: what we may still send
        self._receiving: dict[int, int] = {}          # streams the client may still send on: unrefilled bytes
        self._connection_unrefilled = 0
        self._connection_window = connection_window
        self._last_stream_id = 0
        self._headers_pending: tuple[int, int, bytearray] | None = None   # (stream, flags, block) until END_HEADERS
        settings = struct.pack(">HIHI", SETTING_INITIAL_WINDOW_SIZE, initial_window,
                               SETTING_MAX_CONCURRENT_STREAMS, max_concurrent_streams)
        self._out += frame(SETTINGS, 0, 0, settings)
        if connection_window > DEFAULT_WINDOW:
            self._out += frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", connection_window - DEFAULT_WINDOW))

    # -- output -----------------------------------------------------------------------------

    def take_output(self) -> bytes:
        out = bytes(self._out)
        self._out.clear()
        return out

    def send_headers(self, stream_id: int, block: bytes, *, end_stream: bool) -> None:
        """A header block; one that ends the stream also stops the client sending on it."""
        limit = self.peer_max_frame_size
        flags = FLAG_END_STREAM if end_stream else 0
        if len(block) <= limit:
            self._out += frame(HEADERS, flags | FLAG_END_HEADERS, stream_id, block)
        else:
            self._out += frame(HEADERS, flags, stream_id, block[:limit])
            for start in range(limit, len(block), limit):
                last = start + limit >= len(block)
                self._out += frame(CONTINUATION, FLAG_END_HEADERS if last else 0, stream_id, block[start:start + limit])
        if end_stream:
            self._send_windows.pop(stream_id, None)
            if stream_id in self._receiving:      # (it has not finished sending: it need not)
                self.send_reset(stream_id, NO_ERROR)

    def window(self, stream_id: int) -> int:
        """How much may be sent on the stream now (0 for one that is gone)."""
        window = self._send_windows.get(stream_id)
        if window is None:
            return 0
        return min(window, self._connection_send_window)

    def send_data(self, stream_id: int, data) -> int:
        """Sends what the windows allow of `data`, in frames of the client's size; returns how
        many bytes went."""
        room = min(self.window(stream_id), len(data))
        limit = self.peer_max_frame_size
        for start in range(0, room, limit):
            self._out += frame(DATA, 0, stream_id, bytes(data[start:min(start + limit, room)]))
        if room:
            self._send_windows[stream_id] -= room
            self._connection_send_window -= room
        return room

    def send_reset(self, stream_id: int, code: int) -> None:
        self._out += frame(RST_STREAM, 0, stream_id, struct.pack(">I", code))
        self.forget(stream_id)

    def forget(self, stream_id: int) -> None:
        self._send_windows.pop(stream_id, None)
        self._receiving.pop(stream_id, None)

    def _go_away(self, code: int, message: str) -> ProtocolError:
        self._out += frame(GOAWAY, 0, 0, struct.pack(">II", self._last_stream_id, code) + message.encode()[:256])
        return ProtocolError(code, message)

    # -- input ------------------------------------------------------------------------------

    def receive(self, data: bytes) -> None:
        buffer = self._in
        buffer += data
        if not self._seen_preface:
            if len(buffer) < len(PREFACE):
                return
            if buffer[:len(PREFACE)] != PREFACE:
                raise self._go_away(PROTOCOL_ERROR, "not an HTTP/2 client (no connection preface)")
            del buffer[:len(PREFACE)]
            self._seen_preface = True
        offset = 0
        try:
            while len(buffer) - offset >= 9:
                high, low, kind, flags, stream_id = _FRAME_HEADER.unpack_from(buffer, offset)
                length = (high << 8) | low
                if length > DEFAULT_FRAME_SIZE:
                    raise self._go_away(FRAME_SIZE_ERROR, f"a frame of {length} bytes (the limit is {DEFAULT_FRAME_SIZE})")
                end = offset + 9 + length
                if end > len(buffer):
                    break
                payload = bytes(buffer[offset + 9:end])
                offset = end
                self._on_frame(kind, flags, stream_id & 0x7FFFFFFF, payload)
        finally:
            del buffer[:offset]

    def _on_frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if self._headers_pending is not None and kind != CONTINUATION:
            raise self._go_away(PROTOCOL_ERROR, "a header block was interrupted")
        if kind == DATA:
            self._on_data(flags, stream_id, payload)
        elif kind == HEADERS:
            if flags & FLAG_PADDED:
                payload = payload[1:len(payload) - payload[0]]
            if flags & FLAG_PRIORITY:
                payload = payload[5:]
            self._headers_pending = (stream_id, flags, bytearray(payload))
            if flags & FLAG_END_HEADERS:
                self._end_headers()
        elif kind == CONTINUATION:
            pending = self._headers_pending
            if pending is None or pending[0] != stream_id:
                raise self._go_away(PROTOCOL_ERROR, "CONTINUATION without its HEADERS")
            pending[2].extend(payload)
            if flags & FLAG_END_HEADERS:
                self._end_headers()
        elif kind == WINDOW_UPDATE:
            (increment,) = struct.unpack(">I", payload)
            increment &= 0x7FFFFFFF
            if stream_id == 0:
                self._connection_send_window += increment
            elif stream_id in self._send_windows:
                self._send_windows[stream_id] += increment
            else:
                return
            self._owner.on_window(stream_id)
        elif kind == SETTINGS:
            if not flags & FLAG_ACK:
                self._on_settings(payload)
        elif kind == PING:
            if not flags & FLAG_ACK:
                self._out += frame(PING, FLAG_ACK, 0, payload)
        elif kind == RST_STREAM:
            if stream_id in self._send_windows or stream_id in self._receiving:
                self.forget(stream_id)
                self._owner.on_reset(stream_id)
        elif kind == GOAWAY:
            self._owner.on_goaway()
        elif kind == PUSH_PROMISE:
            raise self._go_away(PROTOCOL_ERROR, "a client may not push")
        # PRIORITY and unknown kinds: nothing to do

    def _decoded(self, block: bytes) -> tuple:
        """The header block's (name, value) pairs. hpack's decoder costs a good part of a small
        call's CPU, so blocks of indexed fields only are remembered (INDEXED_BLOCKS_KEPT), until
        a block of any other kind, which may change the dynamic table, is decoded."""
        known = self._indexed_blocks.get(block)
        if known is not None:
            return known
        try:
            headers = tuple(self._decoder.decode(block, raw=True))
        except hpack.HPACKError as exc:
            raise self._go_away(COMPRESSION_ERROR, f"a header block that does not decode: {exc}") from None
        # Every byte with its top bit set: each is an indexed field (1xxxxxxx, index < 127; a
        # longer index would need a last byte without it). Its decoding succeeded, so it held
        # no other kind of field.
        if min(block, default=0) >= 0x80:
            if len(self._indexed_blocks) < INDEXED_BLOCKS_KEPT:
                self._indexed_blocks[block] = headers
        else:
            self._indexed_blocks.clear()
        return headers

    def _end_headers(self) -> None:
        stream_id, flags, block = self._headers_pending
        self._headers_pending = None
        headers = self._decoded(bytes(block))
        end_stream = bool(flags & FLAG_END_STREAM)
        if stream_id in self._receiving:          # trailers from the client: nothing in them for us
            if end_stream:
                del self._receiving[stream_id]
                self._owner.on_data(stream_id, b"", True)
            return
        if stream_id <= self._last_stream_id or stream_id % 2 == 0:
            raise self._go_away(PROTOCOL_ERROR, f"stream {stream_id} opened out of order")
        self._last_stream_id = stream_id
        self._send_windows[stream_id] = self._peer_initial_window
        if not end_stream:
            self._receiving[stream_id] = 0
        self._owner.on_request(stream_id, headers, end_stream)

    def _on_data(self, flags: int, stream_id: int, payload: bytes) -> None:
        size = len(payload)
        if flags & FLAG_PADDED:
            payload = payload[1:len(payload) - payload[0]]
        self._connection_unrefilled += size
        if self._connection_unrefilled >= self._connection_window // 2:
            self._out += frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self._connection_unrefilled))
            self._connection_unrefilled = 0
        unrefilled = self._receiving.get(stream_id)
        if unrefilled is None:
            return                                # (a stream already ended or reset: dropped)
        end_stream = bool(flags & FLAG_END_STREAM)
        if end_stream:
            del self._receiving[stream_id]
        else:
            unrefilled += size
            if unrefilled >= STREAM_WINDOW_REFILL:
                self._out += frame(WINDOW_UPDATE, 0, stream_id, struct.pack(">I", unrefilled))
                unrefilled = 0
            self._receiving[stream_id] = unrefilled
        self._owner.on_data(stream_id, payload, end_stream)

    def _on_settings(self, payload: bytes) -> None:
        if len(payload) % 6:
            raise self._go_away(FRAME_SIZE_ERROR, "a SETTINGS frame of a length not a multiple of 6")
        more_room = False
        for offset in range(0, len(payload), 6):
            key, value = struct.unpack_from(">HI", payload, offset)
            if key == SETTING_INITIAL_WINDOW_SIZE:
                if value > WINDOW_MAX:
                    raise self._go_away(FLOW_CONTROL_ERROR, "an initial window over 2^31-1")
                delta = value - self._peer_initial_window
                self._peer_initial_window = value
                for open_id in self._send_windows:
                    self._send_windows[open_id] += delta
                more_room = more_room or delta > 0
            elif key == SETTING_MAX_FRAME_SIZE:
                if not DEFAULT_FRAME_SIZE <= value <= 2**24 - 1:
                    raise self._go_away(PROTOCOL_ERROR, f"a maximum frame size of {value}")
                self.peer_max_frame_size = value
        self._out += frame(SETTINGS, FLAG_ACK, 0)
        if more_room:
            self._owner.on_window(0)
