"""bkspark.planning without a JVM or a cluster: how far segments are planned, how spans split,
what startingOffsets/endingOffsets resolve to, data loss, admission control. The stream of most
tests is described in stream_views.py."""

from hypothesis import given
from hypothesis import strategies as st

from bkcore.stream.records import DLSN
from bkcore.stream.segments import SegmentMetadata, SegmentState
from bkspark.offsets import UNKNOWN_LEDGER, OffsetSpec, StreamOffset
from bkspark.planning import (
    TXID_MAX, Backlog, DataLoss, ReadSpan, backlog, earliest, end_of, extent_of, find_data_loss, ledger_spans,
    limit_end, offset_after, plan_spans, resolve_end, resolve_start,
)
from stream_views import SEALED, SEGMENT_1, SEGMENT_2, SEGMENT_3, STREAM, completed, in_progress, truncated, view


def span(seqno, first, last, **bounds) -> ReadSpan:
    return ReadSpan("ns/s", seqno, 10 + seqno, first, last, **bounds)


# -- how far a segment is planned --------------------------------------------------------------

def test_an_in_progress_segment_is_read_up_to_its_lac_and_no_further():
    assert SEGMENT_3.readable_last_entry_id == 6
    assert end_of(STREAM) == StreamOffset(DLSN(3, 7, 0), 13)
    whole = [span(1, 0, 9), span(2, 0, 4), span(3, 0, 6)]
    assert plan_spans(STREAM, DLSN(1, 0, 0), end_of(STREAM).position, max_entries=1000) == whole
    # An end past the LAC (a stale or hand-written offset) still stops at the LAC.
    assert plan_spans(STREAM, DLSN(1, 0, 0), DLSN(3, 100, 0), max_entries=1000) == whole
    assert plan_spans(STREAM, DLSN(1, 0, 0), DLSN(3, 100, 2), max_entries=1000) == whole
    assert plan_spans(STREAM, DLSN(1, 0, 0), DLSN(9, 0, 0), max_entries=1000) == whole


def test_an_in_progress_segment_with_nothing_confirmed_is_not_planned():
    empty = view(SEGMENT_1, in_progress(2, 12, -1, -1))
    assert empty.extent(2).readable_last_entry_id == -1
    assert end_of(empty) == StreamOffset(DLSN(2, 0, 0), 12)
    assert plan_spans(empty, DLSN(1, 0, 0), DLSN(2, 5, 0), max_entries=1000) == [span(1, 0, 9)]


def test_a_completed_segment_is_read_to_its_last_entry_whatever_lac_is_given():
    sealed = SegmentMetadata(4, 14, SegmentState.COMPLETED, 0, 9, 20, record_count=10, size=2100)
    extent = extent_of(sealed, lac=3)
    assert (extent.readable_last_entry_id, extent.entry_count, extent.entry_size_estimate) == (20, 21, 100)
    assert truncated(5, 15).readable_last_entry_id == -1
    assert end_of(SEALED) == StreamOffset(DLSN(3, 0, 0), UNKNOWN_LEDGER)


# -- splitting ---------------------------------------------------------------------------------

def test_max_entries_per_partition_splits_segments_but_spans_never_cross_one():
    assert plan_spans(STREAM, DLSN(1, 0, 0), DLSN(3, 0, 0), max_entries=4) == [
        span(1, 0, 3), span(1, 4, 7), span(1, 8, 9), span(2, 0, 3), span(2, 4, 4)]
    assert len(plan_spans(STREAM, DLSN(1, 0, 0), DLSN(3, 7, 0), max_entries=1)) == 10 + 5 + 7


@given(st.lists(st.integers(-1, 30), min_size=1, max_size=5), st.integers(1, 8))
def test_spans_cover_every_readable_entry_once_in_order(last_entry_ids, max_entries):
    extents = [completed(seqno, 10 + seqno, last, 0, 0) if last >= 0 else in_progress(seqno, 10 + seqno, -1, -1)
               for seqno, last in enumerate(last_entry_ids, 1)]
    stream = view(*extents)
    spans = plan_spans(stream, DLSN(1, 0, 0), end_of(stream).position, max_entries=max_entries)
    covered = [(s.seqno, entry_id) for s in spans for entry_id in range(s.first_entry_id, s.last_entry_id + 1)]
    assert covered == [(seqno, entry_id) for seqno, last in enumerate(last_entry_ids, 1) for entry_id in
                       range(last + 1)]
    assert all(1 <= s.entry_count <= max_entries and s.ledger_id == 10 + s.seqno for s in spans)


def test_positions_inside_entries_become_slot_bounds_on_the_first_and_last_span_only():
    assert plan_spans(STREAM, DLSN(1, 3, 2), DLSN(2, 1, 1), max_entries=2) == [
        span(1, 3, 4, first_slot=2), span(1, 5, 6), span(1, 7, 8), span(1, 9, 9), span(2, 0, 1, end_slot=1)]
    # An end at slot 0 ends before its entry.
    assert plan_spans(STREAM, DLSN(2, 0, 0), DLSN(2, 2, 0), max_entries=10) == [span(2, 0, 1)]


def test_raw_ledgers_are_split_from_entry_0_to_their_last_readable_entry():
    assert ledger_spans([(7, 9, 0), (8, -1, 0), (9, 0, 0)], max_entries=4) == [
        ReadSpan(None, 0, 7, 0, 3), ReadSpan(None, 0, 7, 4, 7), ReadSpan(None, 0, 7, 8, 9), ReadSpan(None, 0, 9, 0, 0)]


def test_partitions_hold_about_max_bytes_at_each_ledgers_or_segments_entry_size():
    # 10 entries of 100 bytes and 10 of 30: 250 bytes a partition is 2 and 8 entries.
    assert ledger_spans([(7, 9, 100), (8, 9, 30)], max_entries=2**62, max_bytes=250) == [
        ReadSpan(None, 0, 7, first, min(9, first + 1)) for first in range(0, 10, 2)] + [
        ReadSpan(None, 0, 8, 0, 7), ReadSpan(None, 0, 8, 8, 9)]
    assert len(ledger_spans([(7, 9, 100)], max_entries=3, max_bytes=250)) == 5        # the bytes bind first
    assert len(ledger_spans([(7, 9, 100)], max_entries=1, max_bytes=250)) == 10       # the entry cap binds
    assert len(ledger_spans([(7, 9, 1000)], max_entries=2**62, max_bytes=250)) == 10  # never below one entry
    # STREAM's segments hold 10, 5 and (in progress, its size from the counters at its LAC) 7
    # entries of 1000 bytes.
    by_bytes = plan_spans(STREAM, DLSN(1, 0, 0), end_of(STREAM).position, max_entries=2**62, max_bytes=3000)
    assert [(s.seqno, s.entry_count) for s in by_bytes] == [(1, 3), (1, 3), (1, 3), (1, 1), (2, 3), (2, 2), (3, 3),
                                                            (3, 3), (3, 1)]


def test_txid_bounds_skip_completed_segments_outside_them_and_travel_with_each_span():
    bounds = {"txid_min": 120, "txid_max": 130}
    assert plan_spans(STREAM, DLSN(1, 0, 0), DLSN(3, 7, 0), max_entries=100, **bounds) == [
        span(2, 0, 4, **bounds), span(3, 0, 6, **bounds)]
    # An in-progress segment's last txid is not known yet: it is planned, its records filtered as read.
    assert [s.seqno for s in plan_spans(STREAM, DLSN(1, 0, 0), DLSN(3, 7, 0), max_entries=100, txid_max=99)] == [1, 3]


# -- startingOffsets and endingOffsets ---------------------------------------------------------

def test_earliest_and_latest():
    assert resolve_start(STREAM, OffsetSpec("earliest")) == (StreamOffset(DLSN(1, 0, 0), 11), 0)
    assert resolve_start(STREAM, OffsetSpec("latest")) == (StreamOffset(DLSN(3, 7, 0), 13), 0)
    assert resolve_end(STREAM, OffsetSpec("latest")) == (DLSN(3, 7, 0), TXID_MAX)
    assert resolve_end(STREAM, OffsetSpec("earliest")) == (DLSN(1, 0, 0), TXID_MAX)
    assert resolve_start(SEALED, OffsetSpec("latest")) == (StreamOffset(DLSN(3, 0, 0), UNKNOWN_LEDGER), 0)


def test_positions_name_their_segment_s_ledger_when_it_exists():
    assert resolve_start(STREAM, OffsetSpec("position", position=DLSN(2, 3, 1))) == \
        (StreamOffset(DLSN(2, 3, 1), 12), 0)
    assert resolve_start(STREAM, OffsetSpec("position", position=DLSN(7, 0, 0))) == \
        (StreamOffset(DLSN(7, 0, 0), UNKNOWN_LEDGER), 0)
    assert resolve_end(STREAM, OffsetSpec("position", position=DLSN(2, 3, 1))) == (DLSN(2, 3, 1), TXID_MAX)


def test_a_starting_txid_starts_at_the_segment_that_can_hold_it_and_filters_below_it():
    assert resolve_start(STREAM, OffsetSpec("txid", value=120)) == (StreamOffset(DLSN(2, 0, 0), 12), 120)
    assert resolve_start(STREAM, OffsetSpec("txid", value=99)) == (StreamOffset(DLSN(1, 0, 0), 11), 99)
    assert resolve_start(STREAM, OffsetSpec("txid", value=100)) == (StreamOffset(DLSN(2, 0, 0), 12), 100)
    assert resolve_start(STREAM, OffsetSpec("txid", value=10**9)) == (StreamOffset(DLSN(3, 0, 0), 13), 10**9)
    # Past every sealed txid with nothing in progress: the end, keeping the bound.
    assert resolve_start(SEALED, OffsetSpec("txid", value=10**9)) == \
        (StreamOffset(DLSN(3, 0, 0), UNKNOWN_LEDGER), 10**9)


def test_an_ending_txid_is_exclusive():
    assert resolve_end(STREAM, OffsetSpec("txid", value=120)) == (DLSN(3, 7, 0), 119)


def test_timestamps_go_by_segment_creation_times():
    def start_at(millis):
        return resolve_start(STREAM, OffsetSpec("timestamp", value=millis))

    assert start_at(250_000) == (StreamOffset(DLSN(2, 0, 0), 12), 0)
    assert start_at(300_000) == (StreamOffset(DLSN(3, 0, 0), 13), 0)
    assert start_at(50_000) == (StreamOffset(DLSN(1, 0, 0), 11), 0)          # before every segment
    assert resolve_end(STREAM, OffsetSpec("timestamp", value=250_000)) == (DLSN(3, 0, 0), TXID_MAX)
    assert resolve_end(STREAM, OffsetSpec("timestamp", value=10**12)) == (DLSN(3, 7, 0), TXID_MAX)


# -- truncated streams -------------------------------------------------------------------------

TRUNCATED = view(truncated(1, 11), SEGMENT_2, SEGMENT_3, truncated_to=DLSN(2, 2, 0))


def test_a_truncated_stream_starts_at_its_truncation_point():
    assert earliest(TRUNCATED) == StreamOffset(DLSN(2, 2, 0), 12)
    assert resolve_start(TRUNCATED, OffsetSpec("earliest")) == (StreamOffset(DLSN(2, 2, 0), 12), 0)
    # txid 10 was in the truncated segment: the first readable position holds what is left.
    assert resolve_start(TRUNCATED, OffsetSpec("txid", value=10)) == (StreamOffset(DLSN(2, 2, 0), 12), 10)
    assert plan_spans(TRUNCATED, DLSN(2, 2, 0), DLSN(3, 7, 0), max_entries=100) == [span(2, 2, 4), span(3, 0, 6)]


def test_data_loss_names_the_truncated_ledgers_and_where_to_resume():
    loss = find_data_loss(TRUNCATED, StreamOffset(DLSN(1, 5, 0), 11))
    assert loss == DataLoss((11,), StreamOffset(DLSN(2, 2, 0), 12))
    assert loss.describe(TRUNCATED, StreamOffset(DLSN(1, 5, 0), 11)) == \
        "stream ns/s: records from 1:5:0 to 2:2:0 were truncated before they were read (lost ledgers: 11)"


def test_data_loss_inside_a_live_segment_loses_no_whole_ledger():
    start = StreamOffset(DLSN(2, 0, 0), 12)
    loss = find_data_loss(TRUNCATED, start)
    assert loss == DataLoss((), StreamOffset(DLSN(2, 2, 0), 12))
    assert "lost ledgers: none whole (truncated inside a segment)" in loss.describe(TRUNCATED, start)


def test_no_data_loss_at_or_after_the_truncation_point_or_before_a_segment_exists():
    assert find_data_loss(TRUNCATED, StreamOffset(DLSN(2, 2, 0), 12)) is None
    assert find_data_loss(TRUNCATED, StreamOffset(DLSN(3, 1, 0), 13)) is None
    assert find_data_loss(STREAM, StreamOffset(DLSN(4, 0, 0), UNKNOWN_LEDGER)) is None
    assert find_data_loss(STREAM, StreamOffset(DLSN(3, 0, 0), UNKNOWN_LEDGER)) is None


def test_a_segment_that_now_holds_another_ledger_means_the_old_one_was_lost():
    """The stream was deleted and made again: the offset's ledger is gone, whatever the position."""
    assert find_data_loss(STREAM, StreamOffset(DLSN(2, 0, 0), 99)) == DataLoss((99,), StreamOffset(DLSN(1, 0, 0), 11))


def test_when_everything_was_truncated_reading_resumes_at_the_next_segment():
    gone = view(truncated(1, 11), truncated(2, 12), truncated_to=DLSN(3, 0, 0))
    assert find_data_loss(gone, StreamOffset(DLSN(1, 0, 0), 11)) == \
        DataLoss((11, 12), StreamOffset(DLSN(3, 0, 0), UNKNOWN_LEDGER))
    assert earliest(gone) == end_of(gone) == StreamOffset(DLSN(3, 0, 0), UNKNOWN_LEDGER)


# -- admission control -------------------------------------------------------------------------

def test_backlog_counts_entries_and_estimates_bytes_from_segment_averages():
    assert backlog(STREAM, DLSN(1, 0, 0), DLSN(3, 7, 0)) == Backlog(22, 22 * 1000)
    assert backlog(STREAM, DLSN(2, 3, 0), DLSN(3, 2, 0)) == Backlog(4, 4000)


def test_limits_end_batches_on_entry_boundaries_and_always_make_progress():
    start, end = DLSN(1, 0, 0), DLSN(3, 7, 0)
    assert limit_end(STREAM, start, end, entry_count_max=12) == DLSN(2, 2, 0)
    assert limit_end(STREAM, start, end, entry_count_max=10) == DLSN(2, 0, 0)
    assert limit_end(STREAM, start, end, size_max=3500) == DLSN(1, 3, 0)
    assert limit_end(STREAM, start, end, size_max=10) == DLSN(1, 1, 0)       # less than one entry: one
    assert limit_end(STREAM, start, end) == end


def test_an_offset_past_a_completed_segment_names_the_next_one():
    assert offset_after(STREAM, DLSN(1, 10, 0)) == StreamOffset(DLSN(2, 0, 0), 12)
    assert offset_after(STREAM, DLSN(1, 4, 0)) == StreamOffset(DLSN(1, 4, 0), 11)
    assert offset_after(STREAM, DLSN(3, 7, 0)) == StreamOffset(DLSN(3, 7, 0), 13)
    assert offset_after(SEALED, DLSN(2, 5, 0)) == StreamOffset(DLSN(3, 0, 0), UNKNOWN_LEDGER)
