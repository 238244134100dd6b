"""Round-robin distribution schedule: which bookies store an entry and when quorums are reached.

Rules (BookKeeper's RoundRobinDistributionSchedule):
- write set of entry e in an ensemble of E with write quorum Qw: positions (e + i) % E, i < Qw;
- an add is acknowledged once Qa positions of its write set have it;
- recovery coverage: a set of answered positions covers the ensemble when every write set has
  fewer than Qa positions that did not answer (so no entry could have been acknowledged without
  at least one answering bookie holding it);
- an entry is known missing only when Qw - Qa + 1 bookies of its write set say "no such entry".
"""

from __future__ import annotations


# Write sets by (ensemble size, write quorum size): the E sets of each shape, built once. The
# writer and readers ask for one per entry. At most WRITE_SET_SHAPES_MAX shapes are kept; past
# that, sets are built on each call (nothing is evicted).
WRITE_SET_SHAPES_MAX = 64
_write_sets_by_shape: dict[tuple[int, int], tuple[tuple[int, ...], ...]] = {}


def write_set(entry_id: int, *, ensemble_size: int, write_quorum_size: int) -> tuple[int, ...]:
    """Positions (entry_id + i) % ensemble_size for i < write_quorum_size, in that order."""
    assert entry_id >= 0
    return write_sets(ensemble_size, write_quorum_size)[entry_id % ensemble_size]


def write_sets(ensemble_size: int, write_quorum_size: int) -> tuple[tuple[int, ...], ...]:
    """The write set of every entry id modulo ensemble_size (a writer keeps them at hand)."""
    assert ensemble_size >= write_quorum_size >= 1
    sets = _write_sets_by_shape.get((ensemble_size, write_quorum_size))
    if sets is None:
        sets = tuple(_build_write_set(start, ensemble_size, write_quorum_size) for start in range(ensemble_size))
        if len(_write_sets_by_shape) < WRITE_SET_SHAPES_MAX:
            _write_sets_by_shape[ensemble_size, write_quorum_size] = sets
    return sets


def _build_write_set(start: int, ensemble_size: int, write_quorum_size: int) -> tuple[int, ...]:
    """A run from `start` that wraps to 0 at most once."""
    end = start + write_quorum_size
    if end <= ensemble_size:
        return tuple(range(start, end))
    return (*range(start, ensemble_size), *range(end - ensemble_size))


def is_covered(answered: set[int] | frozenset[int], *, ensemble_size: int,
               write_quorum_size: int, ack_quorum_size: int) -> bool:
    """True when every write set has fewer than Qa positions missing from `answered`."""
    for start in range(ensemble_size):
        unknown_count = 0
        for i in range(write_quorum_size):
            if (start + i) % ensemble_size not in answered:
                unknown_count += 1
        if unknown_count >= ack_quorum_size:
            return False
    return True


def missing_threshold(*, write_quorum_size: int, ack_quorum_size: int) -> int:
    """How many "no such entry" answers prove an entry was never acknowledged."""
    return write_quorum_size - ack_quorum_size + 1
