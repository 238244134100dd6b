"""Journal records: round trips, torn tails tolerated and reported, corruption in the middle
named by offset and never skipped."""

import pytest
from hypothesis import given, settings, strategies as st

from bkcore.bookie.journal import (
    EntryRecord, FenceRecord, ForceRecord, JournalCorrupted, LacRecord, MasterKeyRecord,
    RECORD_HEADER, encode_record, scan_records,
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
