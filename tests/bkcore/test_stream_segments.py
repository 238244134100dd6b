"""Stream metadata: serialization, paths, txid search, truncation and retention choices."""

import msgpack
import pytest

from bkcore.stream.records import DLSN
from bkcore.stream.segments import (
    SegmentMetadata, SegmentState, StreamLayout, StreamMetadata, StreamMetadataError, StreamSettings,
    segment_for_txid, segments_before, segments_past_retention, start_of, stream_last_txid,
)

C, P = SegmentState.COMPLETED, SegmentState.IN_PROGRESS


def seg(seqno, first, last, state=C, size=100, ctime=0):
    return SegmentMetadata(seqno, 100 + seqno, state, first, last, 9, 10, size, ctime)


def test_round_trips_and_bad_bytes():
    s = seg(3, 10, 20)
    assert SegmentMetadata.from_bytes(s.to_bytes(), version=4) == SegmentMetadata(*[getattr(s, f) for f in (
        "seqno", "ledger_id", "state", "first_txid", "last_txid", "last_entry_id", "record_count", "size",
        "ctime_s", "is_end_of_stream")], version=4)
    m = StreamMetadata(StreamSettings(retention_s=60), DLSN(2, 5, 0))
    assert StreamMetadata.from_bytes(m.to_bytes(), version=1) == StreamMetadata(m.settings, m.truncated_to, 1)
    bad_records = [b"\x93\x07", b"\xc1", msgpack.packb(5), msgpack.packb([99, 1, 2]),    # torn, junk, a
                   msgpack.packb([1, "x"]), msgpack.packb([1, 1, 2, "NO_SUCH_STATE"])]     # number, format, fields
    for data in bad_records:
        for decoder in (SegmentMetadata.from_bytes, StreamMetadata.from_bytes):
            with pytest.raises(StreamMetadataError):
                decoder(data, version=0)
    with pytest.raises(ValueError):
        StreamSettings(ensemble_size=2, write_quorum_size=3)


def test_paths_and_names():
    layout = StreamLayout("/ledgers")
    assert layout.segment_path("ns", "s", 7) == "/ledgers/streams/ns/s/segments/0000000007"
    assert layout.cursor_path("ns", "s", "c1") == "/ledgers/streams/ns/s/cursors/c1"
    for bad in ["", "a/b", "..", "tab\tname", "x" * 201, None]:
        with pytest.raises(ValueError):
            layout.stream_path("ns", bad)


def test_txid_search_skips_truncated_and_finds_the_open_segment():
    segments = [seg(1, 0, 9, SegmentState.TRUNCATED), seg(2, 10, 19), seg(3, 20, 29), seg(4, -1, -1, P)]
    assert segment_for_txid(segments, 0).seqno == 2
    assert segment_for_txid(segments, 19).seqno == 2
    assert segment_for_txid(segments, 20).seqno == 3
    assert segment_for_txid(segments, 1000).seqno == 4


def test_truncation_and_retention():
    segments = [seg(1, 0, 9, ctime=0), seg(2, 10, 19, ctime=100), seg(3, 20, 29, ctime=200), seg(4, 30, -1, P)]
    assert [s.seqno for s in segments_before(segments, DLSN(3, 4, 0))] == [1, 2]
    settings = StreamSettings(retention_s=150)
    assert [s.seqno for s in segments_past_retention(segments, settings, now_s=300)] == [1, 2]
    assert [s.seqno for s in segments_past_retention(segments, settings, now_s=300, protect_from=DLSN(2, 0, 0))] == [1]
    by_size = StreamSettings(retention_size=250)
    assert [s.seqno for s in segments_past_retention(segments, by_size, now_s=0)] == [1, 2]


def test_an_empty_completed_segment_holds_no_txid():
    empty = SegmentMetadata(3, 103, C, -1, -1, -1, 0, 0, 0)
    segments = [seg(2, 10, 19), empty, seg(4, 20, 29)]
    assert segment_for_txid(segments, 20).seqno == 4
    assert segment_for_txid(segments, 30) is None
    assert stream_last_txid(segments) == 29
    assert stream_last_txid([seg(5, -1, -1, P)]) == -1


def test_reading_starts_at_the_next_live_segment():
    segments = [seg(1, 0, 9, SegmentState.TRUNCATED), seg(3, 10, 19), seg(4, 20, -1, P)]
    assert start_of(segments, DLSN(0, 0, 0)) == DLSN(3, 0, 0)
    assert start_of(segments, DLSN(1, 5, 2)) == DLSN(3, 0, 0)
    assert start_of(segments, DLSN(3, 5, 2)) == DLSN(3, 5, 2)
    assert start_of(segments, DLSN(5, 0, 0)) is None
