"""The stream checker, fed wrong histories, says what is wrong with each (the stream workload's
seeds run in test_service_sweeps.py)."""

from bkcore.stream.records import DLSN
from bksim.stream_history import ReaderLog, StreamHistory, check_stream_history

def d(segment, entry, slot=0):
    return DLSN(segment, entry, slot)


def clean_history() -> StreamHistory:
    history = StreamHistory()
    records = [(d(1, 0), 0, b"a"), (d(1, 1), 1, b"b"), (d(2, 0), 2, b"c")]
    history.acks = [("w", payload, dlsn) for dlsn, _, payload in records]
    history.readers = [ReaderLog("r/1", "earliest", d(0, 0), 0, list(records)),
                       ReaderLog("r/2", "position", d(1, 1), 0, records[1:])]
    history.final_records = list(records)
    history.final_truncated_to = d(0, 0)
    return history


def kinds(history: StreamHistory) -> set[str]:
    return {v.kind for v in check_stream_history(history)}


def test_a_clean_history_passes():
    assert kinds(clean_history()) == set()


def test_a_lost_acknowledged_record_is_caught():
    history = clean_history()
    history.final_records = history.final_records[1:]
    history.readers = []
    assert "lost-ack" in kinds(history)


def test_an_ack_past_the_sealed_end_is_a_fenced_ack():
    history = clean_history()
    history.acks.append(("old", b"z", d(2, 5)))
    assert "fenced-ack" in kinds(history)


def test_two_contents_at_one_position_are_caught():
    history = clean_history()
    history.readers[1].records[0] = (d(1, 1), 1, b"B")
    assert "two-contents" in kinds(history)


def test_a_reader_that_skips_or_reorders_is_caught():
    history = clean_history()
    history.readers[0].records = [history.final_records[0], history.final_records[2]]
    assert "reader-order" in kinds(history)
    history = clean_history()
    history.readers[1] = ReaderLog("r/3", "position", d(1, 0), 0, history.final_records[1:])
    assert "reader-order" in kinds(history)


def test_txids_that_do_not_increase_are_caught():
    history = clean_history()
    history.final_records[2] = (d(2, 0), 1, b"c")
    history.readers = []
    assert "txid-order" in kinds(history)


def test_a_read_below_an_acknowledged_truncation_is_caught():
    history = clean_history()
    history.truncations = [(d(1, 1), 10)]
    history.readers.append(ReaderLog("late", "earliest", d(0, 0), 20, list(history.final_records)))
    assert "below-truncation" in kinds(history)


def test_truncating_what_a_cursor_has_not_consumed_is_caught():
    history = clean_history()
    history.final_cursors = {"c0": d(1, 0)}
    history.final_truncated_to = d(2, 0)
    history.final_records = history.final_records[2:]
    history.readers = []
    assert "cursor-truncated" in kinds(history)
