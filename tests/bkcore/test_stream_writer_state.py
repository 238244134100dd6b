"""A stream writer's segment state: txids, entry counters, rolling, completion and recovery."""

import pytest

from bkcore.stream.errors import TxidOutOfOrder
from bkcore.stream.entry_format import unpack_entry
from bkcore.stream.records import Record
from bkcore.stream.segments import SegmentMetadata, SegmentState, StreamSettings
from bkcore.stream.writer_state import SegmentWriteState, recovered_segment


def fresh(last_txid=-1, **settings):
    return SegmentWriteState(SegmentMetadata(4, 77, ctime_s=1000), StreamSettings(**settings), last_txid=last_txid)


def test_txids_are_assigned_and_never_go_backwards():
    state = fresh(last_txid=9)
    assert state.assign_txid(None) == 10
    assert state.assign_txid(10) == 10          # equal is allowed: non-decreasing
    assert state.assign_txid(50) == 50
    with pytest.raises(TxidOutOfOrder, match="below 50"):
        state.assign_txid(49)
    for bad in (-1, "7", 1.5):
        with pytest.raises(TxidOutOfOrder):
            state.assign_txid(bad)
    assert state.assign_txid(None) == 51
    assert fresh().assign_txid(None) == 0


def test_txids_of_a_column_are_assigned_or_checked_all_at_once():
    state = fresh(last_txid=9)
    assert state.assign_txids(None, 3) == [10, 11, 12]
    assert state.assign_txids([12, 12, 40], 3) == [12, 12, 40]
    for bad, rule in (([41, 39], "39 follows 41"), ([39], "below 40"), ([-1], "non-negative"),
                      ([41, True], "non-negative int, not True"), ([41, 1.5], "not 1.5")):
        with pytest.raises(TxidOutOfOrder, match=rule):
            state.assign_txids(bad, len(bad))
        assert state.assigned_txid == 40        # a refused column assigns nothing
    assert state.assign_txids(None, 0) == [] and state.assign_txids([], 0) == []
    assert state.assign_txid(None) == 41
    assert fresh().assign_txids(None, 2) == [0, 1]


def test_columns_pack_as_records_do():
    by_records, by_columns = fresh(last_txid=3), fresh(last_txid=3)
    for records in ([Record(4, b"ab"), Record(5, b"cde")], [Record(7, b"f")], []):
        packed = by_records.pack(records)
        assert by_columns.pack_columns([r.txid for r in records], [r.payload for r in records]) == packed
    assert by_columns.completed(2) == by_records.completed(2)


def test_entries_carry_the_segment_counters_and_completion_sums_them():
    state = fresh(last_txid=3)
    first = unpack_entry(state.pack([Record(4, b"ab"), Record(5, b"cde")]))
    second = unpack_entry(state.pack([Record(7, b"f")]))
    assert (first.records_before, first.bytes_before, first.last_txid) == (0, 0, 5)
    assert (second.records_before, second.bytes_before, second.last_txid) == (2, 5, 7)
    end = unpack_entry(state.pack_end_of_stream())
    assert end.is_end_of_stream and end.records == () and (end.records_before, end.last_txid) == (3, 7)
    done = state.completed(2, is_end_of_stream=True)
    assert (done.state, done.first_txid, done.last_txid, done.last_entry_id, done.record_count, done.size) == \
        (SegmentState.COMPLETED, 4, 7, 2, 3, 6)
    assert done.is_end_of_stream and done.ledger_id == 77


def test_rolling_by_size_and_by_age_but_never_an_empty_segment():
    by_size = fresh(segment_rolling_size=10)
    assert not by_size.should_roll(now_s=10**9)
    by_size.pack([Record(0, b"x" * 9)])
    assert not by_size.should_roll(now_s=1000)
    by_size.pack([Record(1, b"x")])
    assert by_size.should_roll(now_s=1000)
    by_age = fresh(segment_rolling_interval_s=60)
    by_age.pack([Record(0, b"x")])
    assert not by_age.should_roll(now_s=1059) and by_age.should_roll(now_s=1060)


def test_recovery_rebuilds_the_totals_from_the_first_and_last_entries():
    state = fresh(last_txid=-1)
    entries = [unpack_entry(state.pack([Record(t, b"xy")])) for t in (3, 4, 8)]
    segment = SegmentMetadata(4, 77, ctime_s=1000)
    done = recovered_segment(segment, last_entry_id=2, first_entry=entries[0], last_entry=entries[2])
    assert done == state.completed(2)
    empty = recovered_segment(segment, last_entry_id=-1, first_entry=None, last_entry=None)
    assert (empty.state, empty.record_count, empty.last_txid, empty.last_entry_id) == (SegmentState.COMPLETED, 0, -1, -1)
