"""bktransports.http2, the sans-I/O HTTP/2 server side under gRPC: header blocks any HPACK decoder
reads, the preface, SETTINGS and PING answers, header blocks split over CONTINUATION, flow
control both ways, resets and GOAWAY. (test_grpc_trio.py drives it with the real grpcio client.)"""

from __future__ import annotations

import struct

import hpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bktransports.http2 import (
    CONTINUATION, DATA, FLAG_ACK, FLAG_END_HEADERS, FLAG_END_STREAM, GOAWAY, HEADERS, PING, PREFACE,
    RESPONSE_HEADER_BLOCK, RST_STREAM, SETTINGS, SETTING_INITIAL_WINDOW_SIZE, WINDOW_UPDATE, Http2Server,
    ProtocolError, encode_literal, frame,
)


class Owner:
    def __init__(self) -> None:
        self.events: list = []

    def on_request(self, stream_id, headers, end_stream):
        self.events.append(("request", stream_id, [(bytes(n), bytes(v)) for n, v in headers], end_stream))

    def on_data(self, stream_id, data, end_stream):
        self.events.append(("data", stream_id, bytes(data), end_stream))

    def on_reset(self, stream_id):
        self.events.append(("reset", stream_id))

    def on_window(self, stream_id):
        self.events.append(("window", stream_id))

    def on_goaway(self):
        self.events.append(("goaway",))


def frames_of(data: bytes) -> list[tuple[int, int, int, bytes]]:
    out, offset = [], 0
    while offset < len(data):
        high, low, kind, flags, stream_id = struct.unpack_from(">HBBBI", data, offset)
        length = (high << 8) | low
        out.append((kind, flags, stream_id, data[offset + 9:offset + 9 + length]))
        offset += 9 + length
    return out


def connected(initial_window: int = 1 << 20) -> tuple[Http2Server, Owner]:
    owner = Owner()
    server = Http2Server(owner, initial_window=initial_window, connection_window=1 << 24, max_concurrent_streams=100)
    server.receive(PREFACE + frame(SETTINGS, 0, 0))
    return server, owner


def request_headers(encoder: hpack.Encoder, path: bytes = b"/s.S/M") -> bytes:
    return encoder.encode([(b":method", b"POST"), (b":scheme", b"http"), (b":path", path),
                           (b":authority", b"x"), (b"content-type", b"application/grpc"), (b"te", b"trailers")])


def test_the_blocks_sent_decode_with_any_hpack_decoder():
    decoder = hpack.Decoder()
    assert decoder.decode(RESPONSE_HEADER_BLOCK) == [(":status", "200"), ("content-type", "application/grpc")]
    long_value = "x" * 300
    block = encode_literal(b"grpc-status", b"5") + encode_literal(b"grpc-message", long_value.encode())
    assert decoder.decode(block) == [("grpc-status", "5"), ("grpc-message", long_value)]
    assert len(decoder.header_table.dynamic_entries) == 0     # nothing was entered in its table


def test_settings_are_acknowledged_and_pings_answered_and_our_settings_go_first():
    owner = Owner()
    server = Http2Server(owner, initial_window=1 << 20, connection_window=1 << 24, max_concurrent_streams=100)
    kinds = [(kind, flags) for kind, flags, _, _ in frames_of(server.take_output())]
    assert kinds == [(SETTINGS, 0), (WINDOW_UPDATE, 0)]
    server.receive(PREFACE + frame(SETTINGS, 0, 0) + frame(PING, 0, 0, b"12345678"))
    assert [(k, f, p) for k, f, _, p in frames_of(server.take_output())] == [
        (SETTINGS, FLAG_ACK, b""), (PING, FLAG_ACK, b"12345678")]


def test_a_client_without_the_preface_is_refused_with_goaway():
    server = Http2Server(Owner(), initial_window=1 << 20, connection_window=1 << 24, max_concurrent_streams=100)
    server.take_output()
    with pytest.raises(ProtocolError):
        server.receive(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert frames_of(server.take_output())[0][0] == GOAWAY


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([b"/a.A/Put", b"/a.A/Get", b"/b.B/Range"]),
                          st.sampled_from([b"", b"x", b"yy"]), st.booleans()), min_size=1, max_size=30))
def test_header_blocks_decode_as_a_fresh_decoder_reads_them_whether_remembered_or_not(calls):
    """A client's requests, some of them the byte-for-byte block of an earlier request sent
    again: the headers that reach the owner are those a fresh hpack decoder reads from the same
    blocks, though blocks of indexed fields only are remembered (the dynamic table may have
    moved under an old block since)."""
    server, owner = connected()
    encoder, reference = hpack.Encoder(), hpack.Decoder()
    sent: list[bytes] = []
    for index, (path, value, again) in enumerate(calls):
        headers = [(b":method", b"POST"), (b":path", path), (b"content-type", b"application/grpc")]
        if value:
            headers.append((b"x-meta", value))
        block = sent[index // 2] if again and sent else encoder.encode(headers)
        sent.append(block)
        stream_id = 2 * index + 1
        server.receive(frame(HEADERS, FLAG_END_HEADERS | FLAG_END_STREAM, stream_id, block))
        request = owner.events.pop()
        assert request[:2] == ("request", stream_id)
        assert request[2] == [(bytes(n), bytes(v)) for n, v in reference.decode(block, raw=True)]


def test_a_request_split_over_continuation_and_data_frames_arrives_whole():
    server, owner = connected()
    block = request_headers(hpack.Encoder())
    server.receive(frame(HEADERS, 0, 1, block[:5]) + frame(CONTINUATION, 0, 1, block[5:9])
                   + frame(CONTINUATION, FLAG_END_HEADERS, 1, block[9:]))
    server.receive(frame(DATA, 0, 1, b"ab") + frame(DATA, FLAG_END_STREAM, 1, b"c"))
    (request, first, last) = owner.events
    assert request[:2] == ("request", 1) and (b":path", b"/s.S/M") in request[2] and request[3] is False
    assert (first, last) == (("data", 1, b"ab", False), ("data", 1, b"c", True))
    with pytest.raises(ProtocolError):
        server.receive(frame(HEADERS, FLAG_END_HEADERS, 1, request_headers(hpack.Encoder())))   # stream 1 again


def test_what_is_sent_keeps_to_the_client_windows_and_resumes_on_window_update():
    server, owner = connected()
    server.receive(frame(SETTINGS, 0, 0, struct.pack(">HI", SETTING_INITIAL_WINDOW_SIZE, 10)))
    server.receive(frame(HEADERS, FLAG_END_HEADERS | FLAG_END_STREAM, 1, request_headers(hpack.Encoder())))
    server.take_output()
    assert server.send_data(1, b"0123456789abcdef") == 10
    assert server.send_data(1, b"abcdef") == 0
    server.receive(frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", 4)))
    assert owner.events[-1] == ("window", 1)
    assert server.send_data(1, b"abcdef") == 4
    assert [p for k, _, _, p in frames_of(server.take_output()) if k == DATA] == [b"0123456789", b"abcd"]


def test_our_receive_windows_are_given_back_as_data_arrives():
    server, owner = connected()
    server.receive(frame(HEADERS, FLAG_END_HEADERS, 1, request_headers(hpack.Encoder())))
    server.take_output()
    for _ in range(3):
        server.receive(frame(DATA, 0, 1, bytes(16_000)))
    updates = [(stream_id, struct.unpack(">I", p)[0]) for k, _, stream_id, p in frames_of(server.take_output())
               if k == WINDOW_UPDATE]
    assert updates == [(1, 48_000)]          # the stream's, once 32 KiB of it were used


def test_a_reset_or_goaway_from_the_client_reaches_the_owner_and_ending_a_stream_early_resets_it():
    server, owner = connected()
    encoder = hpack.Encoder()
    server.receive(frame(HEADERS, FLAG_END_HEADERS, 1, request_headers(encoder))
                   + frame(HEADERS, FLAG_END_HEADERS, 3, request_headers(encoder)))
    server.receive(frame(RST_STREAM, 0, 1, struct.pack(">I", 8)))
    assert owner.events[-1] == ("reset", 1)
    server.take_output()
    server.send_headers(3, RESPONSE_HEADER_BLOCK + encode_literal(b"grpc-status", b"8"), end_stream=True)
    sent = frames_of(server.take_output())
    assert [(k, f & FLAG_END_STREAM) for k, f, _, _ in sent] == [(HEADERS, FLAG_END_STREAM), (RST_STREAM, 0)]
    assert server.send_data(3, b"late") == 0
    server.receive(frame(GOAWAY, 0, 0, struct.pack(">II", 3, 0)))
    assert owner.events[-1] == ("goaway",)
