"""Journal records: round trips, torn tails tolerated and reported, corruption in the middle
named by offset and never skipped."""

import crc32c
import msgpack
import pytest
from hypothesis import given, settings, strategies as st

from bkcore.bookie.journal import (
    _KIND_OF, LARGE_BODY_SIZE, EntriesRecord, EntryRecord, FenceRecord, ForceRecord, JournalCorrupted, LacRecord,
    MasterKeyRecord, RECORD_HEADER, RecordEncoder, encode_record, scan_records,
)

RECORDS = [MasterKeyRecord(1, b"k" * 32), EntryRecord(1, 0, b"body-0"), EntryRecord(1, 1, b"body-1"),
           FenceRecord(1), LacRecord(1, 1, b"lac"), ForceRecord(1)]


def stream(records=RECORDS) -> bytes:
    return b"".join(encode_record(r) for r in records)


def test_round_trip():
    result = scan_records(stream())
    assert result.records == RECORDS
    assert result.valid_size == len(stream()) and result.tail_problem is None


def test_empty_journal():
    result = scan_records(b"")
    assert result.records == [] and result.tail_problem is None


def test_torn_length_header():
    data = stream() + b"\x01\x02"
    result = scan_records(data)
    assert result.records == RECORDS and "header" in result.tail_problem
    assert result.valid_size == len(stream())


def test_torn_body():
    last = encode_record(EntryRecord(1, 2, b"x" * 100))
    result = scan_records(stream() + last[:-10])
    assert result.records == RECORDS and "torn record" in result.tail_problem


def test_junk_tail():
    result = scan_records(stream() + b"\xff" * 40)
    assert result.records == RECORDS and result.tail_problem is not None


def test_bad_checksum_in_the_middle_names_the_offset():
    data = bytearray(stream())
    second = len(encode_record(RECORDS[0]))
    data[second + RECORD_HEADER.size + 2] ^= 0xFF
    with pytest.raises(JournalCorrupted) as excinfo:
        scan_records(bytes(data))
    assert excinfo.value.offset == second
    assert f"offset {second}" in str(excinfo.value)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=len(stream())))
def test_any_truncation_replays_a_prefix(cut):
    result = scan_records(stream()[:cut])
    assert result.records == RECORDS[:len(result.records)]
    assert result.valid_size <= cut


def test_zero_padding_is_the_end_of_data_not_a_problem():
    result = scan_records(stream() + bytes(4096))
    assert result.records == RECORDS and result.tail_problem is None
    assert result.valid_size == len(stream())


def test_torn_record_followed_by_padding_is_a_torn_tail():
    torn = encode_record(EntryRecord(1, 2, b"x" * 100))[:30]
    result = scan_records(stream() + torn + bytes(512))
    assert result.records == RECORDS and result.tail_problem is not None


def test_zero_length_followed_by_data_is_corruption():
    with pytest.raises(JournalCorrupted):
        scan_records(stream() + bytes(8) + stream())


def test_oversized_length_in_the_middle_is_corruption_and_at_the_end_a_torn_tail():
    big = encode_record(EntryRecord(1, 2, b"x" * 200))
    with pytest.raises(JournalCorrupted, match="exceeds 100"):
        scan_records(stream() + big + stream(), record_size_max=100)
    result = scan_records(stream() + big, record_size_max=100)
    assert result.records == RECORDS and "exceeds 100" in result.tail_problem
    result = scan_records(stream() + RECORD_HEADER.pack(2**32 - 1, 0) + b"\x01" * 10)
    assert result.records == RECORDS and "torn record" in result.tail_problem


def test_a_length_field_damaged_in_the_middle_is_corruption_not_a_torn_tail():
    """A huge length runs past the data, as a torn tail's would; the good records after it
    show that it is damage, and acknowledged records are never dropped as a tail."""
    data = bytearray(stream() + stream())
    third = len(encode_record(RECORDS[0])) + len(encode_record(RECORDS[1]))
    data[third] = 0x7F                       # the length's high byte: 2 GiB declared
    with pytest.raises(JournalCorrupted) as excinfo:
        scan_records(bytes(data))
    assert excinfo.value.offset == third and "good record follows" in str(excinfo.value)


@pytest.mark.parametrize("tail", [b"\xff" * 3, b"\x9c" * 4096, bytes(range(256)) * 8])
def test_junk_with_an_impossible_length_at_the_end_is_still_a_torn_tail(tail):
    result = scan_records(stream() + b"\xee" + tail + bytes(1024))
    assert result.records == RECORDS and "torn record" in result.tail_problem


@pytest.mark.parametrize("cut", [3, 5, 8, 20])
def test_a_record_cut_short_in_preallocated_space_is_a_torn_tail(cut):
    torn = encode_record(EntryRecord(1, 2, b"x" * 300))[:cut]
    result = scan_records(stream() + torn + bytes(4096))
    assert result.records == RECORDS and result.tail_problem is not None


def test_undecodable_records_follow_the_same_rule():
    import crc32c
    import msgpack
    for payload in (msgpack.packb([99, 1]), msgpack.packb([1, "not an int", 0, b""]), msgpack.packb({"a": 1}), b"\xc1"):
        bad = RECORD_HEADER.pack(len(payload), crc32c.crc32c(payload)) + payload
        bad_offset = len(stream())
        with pytest.raises(JournalCorrupted) as excinfo:
            scan_records(stream() + bad + stream())
        assert excinfo.value.offset == bad_offset
        result = scan_records(stream() + bad)
        assert result.records == RECORDS and result.valid_size == bad_offset and result.tail_problem


def test_scan_from_an_offset():
    first = len(encode_record(RECORDS[0]))
    result = scan_records(stream(), start_offset=first)
    assert result.records == RECORDS[1:] and result.valid_size == len(stream())


def test_a_long_stream_scans_in_linear_time():
    # A quadratic scan (checking for trailing zeros at every record) takes minutes here.
    records = [EntryRecord(1, i, b"e") for i in range(100_000)]
    result = scan_records(b"".join(map(encode_record, records)))
    assert len(result.records) == 100_000 and result.tail_problem is None


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=len(stream()) * 8 - 1), st.booleans())
def test_a_flipped_bit_is_never_returned_as_data(bit_index, should_truncate):
    data = bytearray(stream() + stream())
    data[bit_index // 8] ^= 1 << (bit_index % 8)
    if should_truncate:
        data = data[:len(data) - 3]
    try:
        result = scan_records(bytes(data))
    except JournalCorrupted as exc:
        assert 0 <= exc.offset < len(data)
        return
    assert result.records == (RECORDS + RECORDS)[:len(result.records)]
    assert result.tail_problem is not None


def reference_encoding(record) -> bytes:
    """A record as the format defines it, with a fresh msgpack.packb: the bytes RecordEncoder
    must give, whatever path it takes."""
    fields = [getattr(record, name) for name in record.__slots__]
    payload = msgpack.packb([int(_KIND_OF[type(record)]), *fields], use_bin_type=True)
    return RECORD_HEADER.pack(len(payload), crc32c.crc32c(payload)) + payload


# Body sizes on both sides of msgpack's bin 8/16/32 headers and of LARGE_BODY_SIZE.
EDGE_SIZES = [0, 1, 255, 256, 0xFFFF, 0x10000, LARGE_BODY_SIZE - 1, LARGE_BODY_SIZE, 1024 * 1024]
IDS = st.integers(min_value=0, max_value=2**63 - 1)


@settings(max_examples=200, deadline=None)
@given(ledger_id=IDS, entry_id=IDS, size=st.one_of(st.sampled_from(EDGE_SIZES), st.integers(0, 200_000)),
       byte=st.integers(0, 255))
def test_an_entry_record_is_encoded_as_the_format_says_on_either_path(ledger_id, entry_id, size, byte):
    """Large bodies take RecordEncoder's prefix path (no copy into the packer): byte for byte
    what packb gives, and read back by the scan."""
    record = EntryRecord(ledger_id, entry_id, bytes([byte]) * size)
    encoder = RecordEncoder()
    data = encoder.encode(record)
    assert data == encoder.encode_entry(ledger_id, entry_id, record.body) == reference_encoding(record)
    assert scan_records(data).records == [record]


def test_every_record_kind_is_encoded_as_the_format_says_from_a_kept_buffer():
    """The kept packer gives each record its own bytes, one after another (a reset after each,
    also after one that failed)."""
    encoder = RecordEncoder()
    records = [*RECORDS, EntriesRecord(3, 0, [b"a" * 1000] * 600), FenceRecord(4), *RECORDS]
    with pytest.raises(TypeError):
        encoder.encode(FenceRecord(object()))          # not packable: nothing of it stays behind
    assert [encoder.encode(record) for record in records] == [reference_encoding(r) for r in records]
