"""Codec round trips, framing, and fuzzing: malformed input is rejected, never crashes."""

import pytest
from hypothesis import given, settings, strategies as st

from bkcore import wire
from bkcore.wire import (
    AddRequest, AddResponse, FrameDecoder, MalformedFrame, ReadLacResponse, ReadRequest,
    decode_messages, encode_frame, encode_messages,
)

SAMPLES = [
    AddRequest(request_id=1, ledger_id=7, entry_id=0, master_key=b"k" * 32, body=b"xyz", is_recovery=True),
    AddResponse(request_id=1, code=0, ledger_id=7, entry_id=0),
    ReadRequest(request_id=2, ledger_id=7, entry_id=-1, master_key=b"k", is_fencing=True),
    ReadRequest(request_id=3, ledger_id=7, entry_id=5, previous_lac=4, long_poll_timeout_ns=10**9),
    ReadLacResponse(request_id=4, code=2, ledger_id=7),
    wire.ErrorResponse(code=8, reason="bad frame"),
    wire.ReadBatchRequest(request_id=5, ledger_id=7, first_entry_id=10, count_max=100, size_max=1 << 20),
    wire.ReadBatchResponse(request_id=5, code=0, ledger_id=7, first_entry_id=10, lac=11, bodies=[b"a", b"b"]),
    wire.ReadBatchResponse(request_id=6, code=2, ledger_id=7, first_entry_id=10, lac=11, bodies=[]),
]


def test_messages_round_trip_through_frames():
    frame = encode_frame(SAMPLES)
    decoder = FrameDecoder()
    decoder.feed(frame[:5])
    assert decoder.next_frame() is None
    decoder.feed(frame[5:] + frame)
    assert decoder.next_frame() == SAMPLES
    assert decoder.next_frame() == SAMPLES
    assert decoder.next_frame() is None


def test_a_frame_is_its_length_crc32c_and_msgpack_body():
    # encode_frame builds the frame from the packer's buffer: the bytes must be frame_body's.
    big = wire.AddBatchRequest(request_id=9, ledger_id=7, first_entry_id=0, master_key=b"k" * 32,
                               bodies=[bytes([i % 256]) * 1000 for i in range(300)])
    for messages in (SAMPLES, [big], [big, *SAMPLES]):
        frame = encode_frame(messages)
        assert type(frame) is bytes and frame == wire.frame_body(encode_messages(messages))
    with pytest.raises(ValueError):
        encode_frame([AddRequest(request_id=1, ledger_id=7, entry_id=0, master_key=b"k", body=bytes(wire.FRAME_SIZE_MAX))])


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(min_value=1, max_value=5000), max_size=40),
       size_min=st.integers(min_value=1, max_value=3000), decode_every=st.integers(min_value=1, max_value=4))
def test_frames_received_in_place_in_any_pieces_come_out_whole(cuts, size_min, decode_every):
    """receive_buffer()/received() as a socket's recv_into uses them: pieces of any size, a
    frame larger than the buffer, decoding after every few receives (the unfinished frame is
    moved, or the buffer grown, in between) and a caller holding on to an old room."""
    messages = [AddRequest(request_id=n, ledger_id=7, entry_id=n, master_key=b"k", body=bytes([n]) * (n * 97))
                for n in range(30)]
    stream = b"".join(encode_frame(messages[n:n + step]) for n, step in ((0, 1), (1, 20), (21, 3), (24, 6)))
    decoder = FrameDecoder()
    decoded, position, old_rooms = [], 0, []
    for index, cut in enumerate(cuts + [len(stream)] * (len(stream) // size_min + 1)):
        if position == len(stream):
            break
        room = decoder.receive_buffer(size_min)
        assert len(room) >= size_min
        count = min(cut, len(room), len(stream) - position)
        room[:count] = stream[position:position + count]
        old_rooms.append(room)                  # never released: the buffer must not resize
        decoder.received(count)
        position += count
        if index % decode_every == 0:
            while (frame := decoder.next_frame()) is not None:
                decoded.extend(frame)
    while (frame := decoder.next_frame()) is not None:
        decoded.extend(frame)
    assert decoded == messages


def test_checksum_mismatch_is_rejected():
    frame = bytearray(encode_frame(SAMPLES[:1]))
    frame[-1] ^= 0x01
    decoder = FrameDecoder()
    decoder.feed(bytes(frame))
    with pytest.raises(MalformedFrame, match="checksum"):
        decoder.next_frame()


def test_huge_length_prefix_is_rejected_before_the_body_arrives():
    decoder = FrameDecoder(frame_size_max=1024)
    decoder.feed((10**6).to_bytes(4, "big") + b"\0\0\0\0")
    with pytest.raises(MalformedFrame, match="length"):
        decoder.next_frame()


@pytest.mark.parametrize("item", [
    [99, 1, 2],                                  # unknown tag
    [AddResponse.TAG, 1, 0, 7],                  # too few fields
    [AddResponse.TAG, 1, 0, 7, "zero"],          # wrong type
    [AddResponse.TAG, 1, 0, 7, True],            # bool is not an entry id
    [AddResponse.TAG, 1, 12345, 7, 0],           # unknown code
    [wire.AddBatchRequest.TAG, 1, 7, 0, b"k", []],          # a batch of no adds
    [wire.ReadBatchResponse.TAG, 1, 0, 7, 0, 0, [b"a", 5]],  # a body that is not bytes
    "not a list",
])
def test_ill_formed_messages_are_rejected(item):
    import msgpack
    with pytest.raises(MalformedFrame):
        decode_messages(msgpack.packb([item]))


def test_oversized_frame_cannot_be_encoded():
    big = AddRequest(request_id=1, ledger_id=1, entry_id=0, master_key=b"", body=b"x" * wire.FRAME_SIZE_MAX)
    with pytest.raises(ValueError, match="FRAME_SIZE_MAX"):
        encode_frame([big])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=256))
def test_random_bodies_are_accepted_or_rejected_never_crash(data):
    try:
        messages = decode_messages(data)
    except MalformedFrame:
        return
    assert encode_messages(messages) is not None


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64), st.integers(min_value=0, max_value=60))
def test_random_byte_streams_never_crash_the_frame_decoder(data, cut):
    decoder = FrameDecoder(frame_size_max=4096)
    decoder.feed(encode_frame(SAMPLES[:2])[:cut] + data)
    try:
        while decoder.next_frame() is not None:
            pass
    except MalformedFrame:
        pass
