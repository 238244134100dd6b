"""Stream records: packing into entries, DLSN order and text form, batching by size, LZ4
compression of an entry's records, and the columnar decoder against the plain one it replaced."""

import cramjam
import msgpack
import pytest
from hypothesis import given, settings, strategies as st

from bkcore.stream.records import (
    DECOMPRESSED_SIZE_MAX, DLSN, END_OF_STREAM_FLAG, RECORDS_FORMAT, ColumnBatcher, EntryColumns, Record,
    RecordBatcher, RecordFormatError, StreamEntry, codec_code, pack_columns, pack_entry, positioned, unpack_columns,
    unpack_entry,
)


@given(st.lists(st.tuples(st.integers(0, 2**62), st.binary(max_size=50)), max_size=30), st.booleans(),
       st.integers(0, 2**40), st.integers(0, 2**40), st.integers(-1, 2**62))
def test_entries_round_trip(items, is_end, records_before, bytes_before, last_txid):
    entry = StreamEntry(tuple(Record(t, p) for t, p in items), records_before, bytes_before, last_txid, is_end)
    assert unpack_entry(pack_entry(entry)) == entry
    assert entry.records_through == records_before + len(items)
    assert entry.bytes_through == bytes_before + sum(len(p) for _, p in items)


def test_bad_payloads_are_refused():
    good = pack_entry(StreamEntry((Record(1, b"x"),)))
    for junk in [b"", b"\x01\x02", good.replace(b"\x01", b"\x07", 1), pack_entry(StreamEntry(()))[:-1],
                 good.replace(b"\xc4\x01x", b"\xa1x")]:
        with pytest.raises(RecordFormatError):
            unpack_entry(junk)


def test_dlsn_orders_and_parses():
    assert DLSN(1, 5, 2) < DLSN(1, 6, 0) < DLSN(2, 0, 0)
    assert DLSN.parse(str(DLSN(3, 14, 15))) == DLSN(3, 14, 15)
    with pytest.raises(ValueError):
        DLSN.parse("3:14")


def test_batcher_fills_entries_up_to_the_limit_and_keeps_order():
    batcher = RecordBatcher(entry_size_max=200)
    entries = []
    for txid in range(20):
        full = batcher.add(Record(txid, b"x" * 40))
        if full:
            entries.append(pack_entry(StreamEntry(tuple(full), 2**40, 2**40, 2**62)))
    entries.append(pack_entry(StreamEntry(tuple(batcher.flush()), 2**40, 2**40, 2**62)))
    assert batcher.flush() == [] and batcher.pending_count == 0
    assert all(len(entry) <= 200 for entry in entries) and len(entries) > 1
    txids = [r.txid for payload in entries for r in unpack_entry(payload).records]
    assert txids == list(range(20))
    first = unpack_entry(entries[0])
    assert [p.dlsn for p in positioned(7, 3, first)][:2] == [DLSN(7, 3, 0), DLSN(7, 3, 1)]
    with pytest.raises(ValueError):
        batcher.add(Record(99, b"y" * 500))


@given(st.lists(st.lists(st.binary(max_size=120), max_size=40), max_size=6), st.integers(150, 600),
       st.integers(1, 12))
def test_the_column_batcher_cuts_the_entries_the_record_batcher_cuts(chunks, size_max, count_max):
    """Spark's sink hands records over a column chunk at a time; the entries must be those the
    stream writer would make of the same records one by one."""
    by_record = RecordBatcher(entry_size_max=size_max, record_count_max=count_max)
    by_column = ColumnBatcher(entry_size_max=size_max, record_count_max=count_max)
    expected, got, txid = [], [], 0
    for chunk in chunks:
        txids = list(range(txid, txid + len(chunk)))
        txid += len(chunk)
        for record in map(Record, txids, chunk):
            full = by_record.add(record)
            if full:
                expected.append(([r.txid for r in full], [r.payload for r in full]))
        got += by_column.add(txids, chunk)
        assert by_column.pending_count == by_record.pending_count
    rest = by_record.flush()
    assert got == expected
    assert by_column.flush() == ([r.txid for r in rest], [r.payload for r in rest])
    assert by_column.flush() == ([], []) and by_column.pending_count == 0


def test_the_column_batcher_refuses_an_oversized_record_before_taking_any():
    batcher = ColumnBatcher(entry_size_max=200)
    batcher.add([1], [b"a"])
    with pytest.raises(ValueError, match="record of 500 bytes exceeds the entry size limit 200"):
        batcher.add([2, 3], [b"b", b"y" * 500])
    assert batcher.flush() == ([1], [b"a"])


@given(st.lists(st.tuples(st.integers(0, 2**62), st.binary(max_size=50)), max_size=30), st.booleans(),
       st.integers(0, 2**40), st.integers(0, 2**40), st.integers(-1, 2**62))
def test_columns_pack_to_the_bytes_records_pack_to(items, is_end, records_before, bytes_before, last_txid):
    entry = StreamEntry(tuple(Record(t, p) for t, p in items), records_before, bytes_before, last_txid, is_end)
    packed = pack_columns([t for t, _ in items], [p for _, p in items], records_before=records_before,
                          bytes_before=bytes_before, last_txid=last_txid, is_end_of_stream=is_end)
    assert packed == pack_entry(entry)
    assert unpack_columns(packed).payloads == [p for _, p in items]


# -- unpack_columns against the plain decoder it replaced -----------------------------------


def _reference_unpack_columns(payload: bytes) -> EntryColumns:
    """The decoder as first written: lists, a comprehension per column, a check per record."""
    try:
        version, flags, records_before, bytes_before, last_txid, items = msgpack.unpackb(payload, raw=False)
        txids = [item[0] for item in items]
        payloads = [item[1] for item in items]
        flags = int(flags)
        if version == RECORDS_FORMAT and flags >> 1 & 3:
            raise ValueError("a compressed entry's records are not a list (see the compression tests)")
    except (ValueError, TypeError, IndexError, KeyError, msgpack.UnpackException) as exc:
        raise RecordFormatError(f"not a batch of stream records: {exc}") from None
    if version != RECORDS_FORMAT:
        raise RecordFormatError(f"stream record format {version} is not {RECORDS_FORMAT}")
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
def test_unpack_columns_accepts_and_refuses_what_the_plain_decoder_does(records, change, index, scalar, data):
    """A good entry with at most one thing changed: a top-level field, a record's txid or
    payload, a record's field count, a whole record, or the number of top-level fields."""
    fields = [RECORDS_FORMAT, 0, 5, 9, 7, records]
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


def test_malformed_records_are_refused():
    def entry(items, counters=(0, 0, -1)):
        return msgpack.packb([RECORDS_FORMAT, 0, *counters, items], use_bin_type=True)
    assert unpack_columns(entry([])).txids == []
    assert unpack_columns(entry([[5, b"a"], [6, b""]])).payloads == [b"a", b""]
    for items in ([[1, b"x", 3]], [[1]], [[1, b"x"], [2]], [[1, b"x"], [2, b"y", 3]], [[1, "text"]], [[True, b"x"]],
                  [[1.0, b"x"]], [[None, b"x"]], [{"a": 1, "b": 2}], [b"ab"], ["ab"], 7, None, [[1, [b"x"]]]):
        with pytest.raises(RecordFormatError):
            unpack_columns(entry(items))
    with pytest.raises(RecordFormatError):
        unpack_columns(entry([[1, b"x"]], counters=(0, "0", -1)))


# -- compressed entries (DistributedLog's compressionType lz4) ---------------------------------

_compressible = st.builds(lambda prefix, n: prefix + b"x" * n, st.binary(max_size=8), st.integers(0, 300))


@given(st.lists(st.tuples(st.integers(0, 2**62), st.one_of(st.binary(max_size=60), _compressible)), max_size=30),
       st.booleans(), st.integers(0, 2**40), st.integers(0, 2**40), st.integers(-1, 2**62))
def test_compressed_entries_round_trip_and_are_never_larger_than_plain_ones(items, is_end, records_before,
                                                                          bytes_before, last_txid):
    entry = StreamEntry(tuple(Record(t, p) for t, p in items), records_before, bytes_before, last_txid, is_end)
    plain, compressed = pack_entry(entry), pack_entry(entry, compression="lz4")
    assert unpack_entry(compressed) == entry
    codec = msgpack.unpackb(compressed)[1] >> 1 & 3
    # An entry LZ4 would not shrink is written plain, byte for byte what no compression writes.
    assert (codec, compressed) == (0, plain) if codec == 0 else (codec == 1 and len(compressed) < len(plain))


def test_an_entry_of_repeated_records_is_compressed_and_keeps_its_counters_outside_the_block():
    entry = StreamEntry(tuple(Record(i, b"row-payload " * 80) for i in range(400)), 7, 90, 399)
    packed = pack_entry(entry, compression="lz4")
    fields = msgpack.unpackb(packed)
    assert fields[:5] == [RECORDS_FORMAT, 1 << 1, 7, 90, 399] and len(fields) == 7
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


def _compressed(records: list, *, flags: int = 1 << 1, size: int | None = None, block: object = None,
                extra: tuple = ()) -> bytes:
    packed = msgpack.packb(records, use_bin_type=True)
    block = bytes(cramjam.lz4.compress_block(packed, store_size=False)) if block is None else block
    return msgpack.packb([RECORDS_FORMAT, flags, 0, 0, 5, block, len(packed) if size is None else size, *extra],
                         use_bin_type=True)


def test_damaged_compressed_entries_are_refused_with_a_format_error():
    records = [[i, b"abc" * 50] for i in range(6)]
    assert unpack_columns(_compressed(records)).txids == list(range(6))
    good_size = len(msgpack.packb(records, use_bin_type=True))
    block = bytes(cramjam.lz4.compress_block(msgpack.packb(records, use_bin_type=True), store_size=False))
    refused = {
        "size claimed too large": _compressed(records, size=good_size + 10),
        "size claimed too small": _compressed(records, size=good_size - 10),
        "size zero": _compressed(records, size=0),
        "size past the bound": _compressed(records, size=DECOMPRESSED_SIZE_MAX + 1),
        "size not an int": _compressed(records, size=str(good_size)),
        "block cut short": _compressed(records, block=block[:-5]),
        "block of junk": _compressed(records, block=b"\xff" * 40),
        "block not bytes": _compressed(records, block="text"),
        "unknown codec 2": _compressed(records, flags=2 << 1),
        "unknown codec 3": _compressed(records, flags=3 << 1),
        "an eighth field": _compressed(records, extra=(0,)),
        "no size": msgpack.packb([RECORDS_FORMAT, 1 << 1, 0, 0, 5, block]),
        "records not records": _compressed([[1, "text"], 7]),
        "block of no msgpack": _compressed([], block=bytes(cramjam.lz4.compress_block(b"\xc1" * 30, store_size=False)), size=30),
    }
    for name, payload in refused.items():
        with pytest.raises(RecordFormatError):
            unpack_columns(payload)
            pytest.fail(f"{name}: accepted")


@settings(max_examples=300)
@given(st.integers(0, 10_000), st.integers(1, 255))
def test_a_byte_changed_anywhere_in_a_compressed_entry_decodes_or_is_refused_never_anything_else(where, change):
    entry = StreamEntry(tuple(Record(i, b"%d-" % i + b"y" * 90) for i in range(20)), 3, 4, 19)
    packed = bytearray(pack_entry(entry, compression="lz4"))
    packed[where % len(packed)] ^= change
    try:
        unpack_entry(bytes(packed))
    except RecordFormatError:
        pass


def test_entries_hold_plain_lz4_blocks_that_another_implementation_reads_and_writes():
    """The block is LZ4's raw block format (no size prefix, no frame): pyarrow's codec, an
    implementation of its own, decodes what the writer packed and packs what the reader takes."""
    pa = pytest.importorskip("pyarrow")
    codec = pa.Codec("lz4_raw")
    records = [[i, b"record %d " % i + b"z" * 200] for i in range(50)]
    packed = msgpack.packb(records, use_bin_type=True)
    entry = pack_entry(StreamEntry(tuple(Record(t, p) for t, p in records), 0, 0, 49), compression="lz4")
    block, size = msgpack.unpackb(entry)[5:]
    assert codec.decompress(block, decompressed_size=size, asbytes=True) == packed
    theirs = _compressed(records, block=codec.compress(packed, asbytes=True))
    assert unpack_columns(theirs).payloads == [p for _, p in records]
