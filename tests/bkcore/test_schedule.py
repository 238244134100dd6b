"""RoundRobinDistributionScheduleTest in spirit: brute force over every E/Qw/Qa up to 6."""

import itertools

from bkcore.ledger.schedule import is_covered, missing_threshold, write_set


def configurations(limit: int = 6):
    for e in range(1, limit + 1):
        for w in range(1, e + 1):
            for a in range(1, w + 1):
                yield e, w, a


def test_write_set_is_consecutive_positions_modulo_ensemble():
    for e, w, _ in configurations():
        for entry_id in range(3 * e):
            positions = write_set(entry_id, ensemble_size=e, write_quorum_size=w)
            assert len(set(positions)) == w
            assert positions == tuple((entry_id + i) % e for i in range(w))


def test_every_bookie_stores_its_share_of_entries():
    for e, w, _ in configurations():
        counts = [0] * e
        for entry_id in range(e * 10):
            for position in write_set(entry_id, ensemble_size=e, write_quorum_size=w):
                counts[position] += 1
        assert counts == [10 * w] * e


def covered_by_definition(answered: set[int], e: int, w: int, a: int) -> bool:
    """Covered iff no possible ack quorum lies entirely within the silent bookies."""
    silent = set(range(e)) - answered
    for entry_id in range(e):
        ws = write_set(entry_id, ensemble_size=e, write_quorum_size=w)
        for quorum in itertools.combinations(ws, a):
            if set(quorum) <= silent:
                return False
    return True


def test_coverage_matches_its_definition_for_every_answer_set():
    for e, w, a in configurations():
        for size in range(e + 1):
            for answered in itertools.combinations(range(e), size):
                expected = covered_by_definition(set(answered), e, w, a)
                assert is_covered(set(answered), ensemble_size=e, write_quorum_size=w, ack_quorum_size=a) == expected, (e, w, a, answered)


def test_all_answers_always_cover_and_none_never_do():
    for e, w, a in configurations():
        assert is_covered(set(range(e)), ensemble_size=e, write_quorum_size=w, ack_quorum_size=a)
        assert not is_covered(set(), ensemble_size=e, write_quorum_size=w, ack_quorum_size=a)


def test_missing_threshold_guarantees_no_acked_entry_is_declared_missing():
    # If an entry reached Qa bookies, at most Qw - Qa bookies of its write set lack it,
    # so Qw - Qa + 1 "no such entry" answers are impossible for it.
    for _, w, a in configurations():
        threshold = missing_threshold(write_quorum_size=w, ack_quorum_size=a)
        assert w - a < threshold <= w
