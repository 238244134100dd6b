"""The checker must catch each kind of wrong history, and pass a right one."""

from bksim.checker import check
from bksim.history import History


def history_with_acked(entries: int = 3) -> History:
    history = History()
    for entry_id in range(entries):
        index = history.add_invoked(process="w", ledger_id=1, entry_id=entry_id, payload=b"e%d" % entry_id, now_ns=entry_id)
        history.add_ok(index, now_ns=entry_id + 1)
    return history


def rules(history: History) -> set[str]:
    return {violation.rule for violation in check(history)}


def test_a_correct_history_passes():
    history = history_with_acked()
    history.read_ok(process="r", ledger_id=1, entry_id=1, payload=b"e1", now_ns=10)
    history.lac_seen(process="r", ledger_id=1, lac=1, now_ns=10)
    history.lac_seen(process="r", ledger_id=1, lac=2, now_ns=11)
    history.closed_seen(process="r", ledger_id=1, last_entry_id=2, length=6, now_ns=12)
    history.closed_seen(process="x", ledger_id=1, last_entry_id=2, length=6, now_ns=13)
    assert check(history) == []


def test_close_before_an_acked_entry_is_a_lost_ack():
    history = history_with_acked()
    history.closed_seen(process="r", ledger_id=1, last_entry_id=1, length=4, now_ns=12)
    assert rules(history) == {"lost-ack"}


def test_acked_entry_read_as_missing_is_a_lost_ack():
    history = history_with_acked()
    history.read_missing(process="r", ledger_id=1, entry_id=0, now_ns=12)
    assert rules(history) == {"lost-ack"}


def test_entry_within_closed_range_read_as_missing_is_a_lost_ack():
    history = History()
    index = history.add_invoked(process="w", ledger_id=1, entry_id=0, payload=b"x", now_ns=0)
    history.add_unknown(index, now_ns=1)
    history.closed_seen(process="r", ledger_id=1, last_entry_id=0, length=1, now_ns=2)
    history.read_missing(process="r", ledger_id=1, entry_id=0, now_ns=3)
    assert rules(history) == {"lost-ack"}


def test_changed_bytes():
    history = history_with_acked()
    history.add_invoked(process="w2", ledger_id=1, entry_id=1, payload=b"other", now_ns=5)
    history.read_ok(process="r", ledger_id=1, entry_id=1, payload=b"other", now_ns=12)
    assert rules(history) == {"changed"}


def test_phantom_entry():
    history = history_with_acked()
    history.read_ok(process="r", ledger_id=1, entry_id=7, payload=b"never", now_ns=12)
    assert rules(history) == {"phantom"}


def test_divergent_reads_of_an_unacknowledged_entry():
    history = History()
    for payload in (b"a", b"b"):
        index = history.add_invoked(process="w", ledger_id=1, entry_id=0, payload=payload, now_ns=0)
        history.add_unknown(index, now_ns=1)
    history.read_ok(process="r1", ledger_id=1, entry_id=0, payload=b"a", now_ns=2)
    history.read_ok(process="r2", ledger_id=1, entry_id=0, payload=b"b", now_ns=3)
    assert rules(history) == {"divergent"}


def test_lac_going_backwards():
    history = history_with_acked()
    history.lac_seen(process="r", ledger_id=1, lac=2, now_ns=10)
    history.lac_seen(process="r", ledger_id=1, lac=1, now_ns=11)
    assert rules(history) == {"lac-backwards"}


def test_closed_metadata_changing():
    history = history_with_acked()
    history.closed_seen(process="r", ledger_id=1, last_entry_id=2, length=6, now_ns=12)
    history.closed_seen(process="q", ledger_id=1, last_entry_id=3, length=8, now_ns=13)
    assert rules(history) == {"close-changed"}


def test_read_past_close():
    history = History()
    for entry_id in range(2):
        index = history.add_invoked(process="w", ledger_id=1, entry_id=entry_id, payload=b"p", now_ns=0)
        history.add_unknown(index, now_ns=1)
    history.read_ok(process="r", ledger_id=1, entry_id=1, payload=b"p", now_ns=2)
    history.closed_seen(process="q", ledger_id=1, last_entry_id=0, length=1, now_ns=3)
    assert rules(history) == {"read-past-close"}


def test_replicas_must_agree_and_reach_the_ack_quorum():
    history = History()
    history.replicas_seen(ledger_id=1, entry_id=0, ack_quorum_size=2, copies=(("a", b"x"), ("b", b"x"), ("c", None)))
    assert check(history) == []
    history.replicas_seen(ledger_id=1, entry_id=1, ack_quorum_size=2, copies=(("a", b"x"), ("b", b"y")))
    history.replicas_seen(ledger_id=1, entry_id=2, ack_quorum_size=2, copies=(("a", b"x"), ("b", None)))
    assert rules(history) == {"replica-divergent", "under-replicated"}
