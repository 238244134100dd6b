"""The bytes of stream entries: format 2 (columns) written and read, format 1 (a list of
records, as written before) still read exactly as its first decoder read it, LZ4-compressed
bodies, and damaged entries of every kind refused with a RecordFormatError, never anything else."""

import contextlib
import struct

import cramjam
import msgpack
import pytest
from hypothesis import given, settings, strategies as st

from bkcore.stream import entry_format
from bkcore.stream.entry_format import (
    COLUMNS_FORMAT, DECOMPRESSED_SIZE_MAX, END_OF_STREAM_FLAG, LIST_FORMAT, EntryColumns, RecordFormatError,
    codec_code, pack_buffers, pack_columns, pack_entry, unpack_buffers, unpack_columns, unpack_entry,
)
from bkcore.stream.records import Record, StreamEntry

@contextlib.contextmanager
def _fields_first():
    """Entries of any size decoded as large ones are: the fields before the body read from the
    first bytes, the body not copied (small ones are decoded whole)."""
    saved, entry_format._BODY_COPY_SIZE_MAX = entry_format._BODY_COPY_SIZE_MAX, 0
    try:
        yield
    finally:
        entry_format._BODY_COPY_SIZE_MAX = saved


def _read_fields_first(decode):
    def run(payload):
        with _fields_first():
            return decode(payload)
    run.__name__ = f"{decode.__name__} (fields first)"
    return run


# Every decoder, on both of its paths.
_DECODERS = [unpack_columns, unpack_buffers, _read_fields_first(unpack_columns), _read_fields_first(unpack_buffers)]

_compressible = st.builds(lambda prefix, n: prefix + b"x" * n, st.binary(max_size=8), st.integers(0, 300))
_items = st.lists(st.tuples(st.integers(0, 2**62), st.one_of(st.binary(max_size=60), _compressible)), max_size=30)
_counters = (st.booleans(), st.integers(0, 2**40), st.integers(0, 2**40), st.integers(-1, 2**62))


def _body(txids, payloads) -> bytes:
    """Format 2's body, written out by hand from the module docstring."""
    offsets = [0]
    for payload in payloads:
        offsets.append(offsets[-1] + len(payload))
    return struct.pack(f"<{len(txids)}q", *txids) + struct.pack(f"<{len(offsets)}i", *offsets) + b"".join(payloads)


@given(_items, *_counters)
def test_entries_round_trip_in_format_2_as_its_description_says(items, is_end, records_before, bytes_before,
                                                                last_txid):
    entry = StreamEntry(tuple(Record(t, p) for t, p in items), records_before, bytes_before, last_txid, is_end)
    packed = pack_entry(entry)
    txids, payloads = [t for t, _ in items], [p for _, p in items]
    assert msgpack.unpackb(packed) == [COLUMNS_FORMAT, int(is_end), records_before, bytes_before, last_txid,
                                       len(items), _body(txids, payloads)]
    assert unpack_entry(packed) == entry
    assert pack_columns(txids, payloads, records_before=records_before, bytes_before=bytes_before,
                        last_txid=last_txid, is_end_of_stream=is_end) == packed
    parts = unpack_buffers(packed)
    assert (parts.count, bytes(parts.txids) + bytes(parts.offsets) + bytes(parts.values)) == \
        (len(items), _body(txids, payloads))
    again = pack_buffers(parts.count, parts.txids, parts.offsets, parts.values, records_before=records_before,
                         bytes_before=bytes_before, last_txid=last_txid, is_end_of_stream=is_end)
    assert again == packed
    with _fields_first():
        assert unpack_entry(packed) == entry and unpack_buffers(packed) == parts
    assert entry.records_through == records_before + len(items)
    assert entry.bytes_through == bytes_before + sum(len(p) for _, p in items)


@given(_items, *_counters)
def test_format_1_entries_written_before_still_read_the_same_both_ways(items, is_end, records_before,
                                                                       bytes_before, last_txid):
    old = msgpack.packb([LIST_FORMAT, int(is_end), records_before, bytes_before, last_txid, [list(i) for i in items]],
                        use_bin_type=True)
    entry = StreamEntry(tuple(Record(t, p) for t, p in items), records_before, bytes_before, last_txid, is_end)
    assert unpack_entry(old) == entry
    assert unpack_buffers(old) == unpack_buffers(pack_entry(entry))


def test_bad_payloads_are_refused():
    good = pack_entry(StreamEntry((Record(1, b"x"),)))
    for junk in [b"", b"\x01\x02", b"\x93\x01\x02\x03", good.replace(b"\x02", b"\x07", 1), good[:-1], good + b"\x00",
                 pack_entry(StreamEntry(()))[:-1], msgpack.packb({"a": 1}), msgpack.packb([]), msgpack.packb(7)]:
        for decode in (unpack_entry, *_DECODERS):
            with pytest.raises(RecordFormatError):
                decode(junk)


def _format_2(count, body, *, flags=0, counters=(0, 0, 5), extra=()):
    return msgpack.packb([COLUMNS_FORMAT, flags, *counters, count, body, *extra], use_bin_type=True)


def test_format_2_entries_whose_parts_do_not_add_up_are_refused():
    good = _body([1, 2], [b"ab", b"c"])
    assert unpack_columns(_format_2(2, good)).payloads == [b"ab", b"c"]
    refused = {
        "a count past the body": _format_2(3, good),
        "a count below it": _format_2(1, good),
        "a negative count": _format_2(-1, good),
        "a count not an int": _format_2("2", good),
        "a body cut short": _format_2(2, good[:-1]),
        "a body too long": _format_2(2, good + b"z"),
        "offsets not from 0": _format_2(2, struct.pack("<2q3i", 1, 2, 1, 3, 3) + b"abc"),
        "offsets going down": _format_2(2, struct.pack("<2q3i", 1, 2, 0, 3, 2) + b"abc"),
        "a text body": msgpack.packb([COLUMNS_FORMAT, 0, 0, 0, 5, 2, "text"]),
        "no body": msgpack.packb([COLUMNS_FORMAT, 0, 0, 0, 5, 2]),
        "a size without a codec": _format_2(2, good, extra=(len(good),)),
        "a text counter": _format_2(2, good, counters=(0, "0", 5)),
        "a bool for flags": _format_2(2, good, flags=True),
        "a ninth field": _format_2(2, good, extra=(1, 2)),
        "an unknown format": msgpack.packb([3, 0, 0, 0, 5, 2, good]),
    }
    for name, payload in refused.items():
        for decode in _DECODERS:
            with pytest.raises(RecordFormatError):
                decode(payload)
                pytest.fail(f"{name}: accepted by {decode.__name__}")


# -- format 1: unpack_columns against the plain decoder it was first written as -------------


def _reference_unpack_columns(payload: bytes) -> EntryColumns:
    """The decoder as first written: lists, a comprehension per column, a check per record."""
    try:
        version, flags, records_before, bytes_before, last_txid, items = msgpack.unpackb(payload, raw=False)
        txids = [item[0] for item in items]
        payloads = [item[1] for item in items]
        flags = int(flags)
    except (ValueError, TypeError, IndexError, KeyError, msgpack.UnpackException) as exc:
        raise RecordFormatError(f"not a batch of stream records: {exc}") from None
    if version != LIST_FORMAT:
        raise RecordFormatError(f"stream record format {version} is not {LIST_FORMAT}")
    if not (all(len(item) == 2 for item in items) and all(type(t) is int for t in txids)
            and all(type(p) is bytes for p in payloads)) or \
            not all(type(n) is int for n in (records_before, bytes_before, last_txid)):
        raise RecordFormatError("stream records must be (int txid, bytes payload) with int counters")
    return EntryColumns(txids, payloads, records_before, bytes_before, last_txid, bool(flags & END_OF_STREAM_FLAG))


def _decoded(decode, payload: bytes):
    try:
        return decode(payload)
    except RecordFormatError:
        return "refused"


_non_ints = st.one_of(st.binary(max_size=4), st.text(max_size=3), st.booleans(), st.none(), st.floats(allow_nan=False),
                      st.lists(st.integers(0, 9), max_size=2))
_scalars = st.one_of(st.integers(-2**63, 2**64 - 1), _non_ints)
_CHANGES = ["none", "field", "txid", "payload", "longer", "shorter", "record", "top-level count"]


@settings(max_examples=300)
@given(st.lists(st.tuples(st.integers(0, 2**62), st.binary(max_size=8)).map(list), min_size=1, max_size=6),
       st.sampled_from(_CHANGES), st.integers(0, 5), _scalars, st.data())
def test_unpack_columns_accepts_and_refuses_format_1_as_the_plain_decoder_does(records, change, index, scalar,
                                                                               data):
    """A good format 1 entry with at most one thing changed: a top-level field, a record's
    txid or payload, a record's field count, a whole record, or the number of top-level fields.
    (A version changed to 2 is read as format 2, which refuses such fields too.)"""
    fields = [LIST_FORMAT, 0, 5, 9, 7, records]
    at = index % len(records)
    if change == "field":
        fields[index] = scalar
    elif change == "top-level count":
        fields = fields + [0] if index % 2 else fields[:index]
    elif change == "txid":
        records[at][0] = data.draw(_non_ints)
    elif change == "payload":
        records[at][1] = data.draw(st.one_of(st.integers(), _non_ints.filter(lambda v: type(v) is not bytes)))
    elif change == "longer":
        records[at].append(scalar)
    elif change == "shorter":
        del records[at][index % 2]
    elif change == "record":
        records[at] = data.draw(st.one_of(_scalars, st.dictionaries(st.text(max_size=2), _scalars, max_size=2)))
    payload = msgpack.packb(fields, use_bin_type=True)
    assert _decoded(unpack_columns, payload) == _decoded(_reference_unpack_columns, payload)


def test_malformed_format_1_records_are_refused():
    def entry(items, counters=(0, 0, -1)):
        return msgpack.packb([LIST_FORMAT, 0, *counters, items], use_bin_type=True)
    assert unpack_columns(entry([])).txids == []
    assert unpack_columns(entry([[5, b"a"], [6, b""]])).payloads == [b"a", b""]
    for items in ([[1, b"x", 3]], [[1]], [[1, b"x"], [2]], [[1, b"x"], [2, b"y", 3]], [[1, "text"]], [[True, b"x"]],
                  [[1.0, b"x"]], [[None, b"x"]], [{"a": 1, "b": 2}], [b"ab"], ["ab"], 7, None, [[1, [b"x"]]]):
        with pytest.raises(RecordFormatError):
            unpack_columns(entry(items))
    with pytest.raises(RecordFormatError):
        unpack_columns(entry([[1, b"x"]], counters=(0, "0", -1)))


# -- compressed entries (DistributedLog's compressionType lz4) ---------------------------------


@given(_items, *_counters)
def test_compressed_entries_round_trip_and_are_never_larger_than_plain_ones(items, is_end, records_before,
                                                                          bytes_before, last_txid):
    entry = StreamEntry(tuple(Record(t, p) for t, p in items), records_before, bytes_before, last_txid, is_end)
    plain, compressed = pack_entry(entry), pack_entry(entry, compression="lz4")
    assert unpack_entry(compressed) == entry
    assert unpack_buffers(compressed) == unpack_buffers(plain)
    codec = msgpack.unpackb(compressed)[1] >> 1 & 3
    # An entry LZ4 would not shrink is written plain, byte for byte what no compression writes.
    assert (codec, compressed) == (0, plain) if codec == 0 else (codec == 1 and len(compressed) < len(plain))


def test_an_entry_of_repeated_records_is_compressed_and_keeps_its_counters_outside_the_block():
    entry = StreamEntry(tuple(Record(i, b"row-payload " * 80) for i in range(400)), 7, 90, 399)
    packed = pack_entry(entry, compression="lz4")
    fields = msgpack.unpackb(packed)
    assert fields[:6] == [COLUMNS_FORMAT, 1 << 1, 7, 90, 399, 400] and len(fields) == 8
    assert len(packed) * 20 < len(pack_entry(entry))
    assert unpack_entry(packed) == entry
    # The end-of-stream flag and the codec share the flags field.
    end = StreamEntry(entry.records, 7, 90, 399, is_end_of_stream=True)
    assert msgpack.unpackb(pack_entry(end, compression="lz4"))[1] == 1 | 1 << 1
    assert unpack_entry(pack_entry(end, compression="lz4")).is_end_of_stream


def test_unknown_compression_names_are_refused_naming_the_choices():
    assert codec_code("none") == 0 and codec_code("lz4") == 1
    for name in ("zstd", "LZ4x", None, 1):
        with pytest.raises(ValueError, match=r"compression .* is not one of none, lz4"):
            codec_code(name)
        with pytest.raises(ValueError):
            pack_entry(StreamEntry((Record(1, b"x"),)), compression=name)


def _compressed(body: bytes, count: int, *, flags: int = 1 << 1, size: int | None = None, block: object = None,
                extra: tuple = ()) -> bytes:
    block = bytes(cramjam.lz4.compress_block(body, store_size=False)) if block is None else block
    return _format_2(count, block, flags=flags, extra=(len(body) if size is None else size, *extra))


def test_damaged_compressed_entries_are_refused_with_a_format_error():
    body = _body(range(6), [b"abc" * 50] * 6)
    assert unpack_columns(_compressed(body, 6)).txids == list(range(6))
    block = bytes(cramjam.lz4.compress_block(body, store_size=False))
    refused = {
        "size claimed too large": _compressed(body, 6, size=len(body) + 10),
        "size claimed too small": _compressed(body, 6, size=len(body) - 10),
        "size zero": _compressed(body, 6, size=0),
        "size past the bound": _compressed(body, 6, size=DECOMPRESSED_SIZE_MAX + 1),
        "size not an int": _compressed(body, 6, size=str(len(body))),
        "block cut short": _compressed(body, 6, block=block[:-5]),
        "block of junk": _compressed(body, 6, block=b"\xff" * 40),
        "block not bytes": _compressed(body, 6, block="text"),
        "unknown codec 2": _compressed(body, 6, flags=2 << 1),
        "unknown codec 3": _compressed(body, 6, flags=3 << 1),
        "a ninth field": _compressed(body, 6, extra=(0,)),
        "no size": _format_2(6, block, flags=1 << 1),
        "a body that does not add up": _compressed(body, 5),
        "a body of junk": _compressed(b"\xc1" * 30, 1),
    }
    for name, payload in refused.items():
        for decode in _DECODERS:
            with pytest.raises(RecordFormatError):
                decode(payload)
                pytest.fail(f"{name}: accepted by {decode.__name__}")


@settings(max_examples=300)
@given(st.integers(0, 10_000), st.integers(1, 255), st.booleans())
def test_a_byte_changed_anywhere_in_an_entry_decodes_or_is_refused_never_anything_else(where, change, compress):
    entry = StreamEntry(tuple(Record(i, b"%d-" % i + b"y" * 90) for i in range(20)), 3, 4, 19)
    packed = bytearray(pack_entry(entry, compression="lz4" if compress else "none"))
    packed[where % len(packed)] ^= change
    for decode in (unpack_entry, *_DECODERS):
        try:
            decode(bytes(packed))
        except RecordFormatError:
            pass


def test_entries_hold_plain_lz4_blocks_that_another_implementation_reads_and_writes():
    """The block is LZ4's raw block format (no size prefix, no frame): pyarrow's codec, an
    implementation of its own, decodes what the writer packed and packs what the reader takes."""
    pa = pytest.importorskip("pyarrow")
    codec = pa.Codec("lz4_raw")
    records = [(i, b"record %d " % i + b"z" * 200) for i in range(50)]
    body = _body([t for t, _ in records], [p for _, p in records])
    entry = pack_entry(StreamEntry(tuple(Record(t, p) for t, p in records), 0, 0, 49), compression="lz4")
    block, size = msgpack.unpackb(entry)[6:]
    assert codec.decompress(block, decompressed_size=size, asbytes=True) == body
    theirs = _compressed(body, 50, block=codec.compress(body, asbytes=True))
    assert unpack_columns(theirs).payloads == [p for _, p in records]
