"""LedgerMetadata: validation, ensembles, transitions, serialization."""

import pytest

from bkcore.digest import DigestType
from bkcore.ledger.layout import LedgerLayout
from bkcore.ledger.metadata import LedgerMetadata, LedgerState, MetadataFormatError, password_hash


def metadata(**changes) -> LedgerMetadata:
    fields = dict(ledger_id=5, ensemble_size=3, write_quorum_size=2, ack_quorum_size=2,
                  ensembles=((0, ("a", "b", "c")),), digest_type=DigestType.CRC32C,
                  password_hash=password_hash(b"p"), ctime_ns=123)
    fields.update(changes)
    return LedgerMetadata(**fields)


@pytest.mark.parametrize("e,w,a", [(2, 3, 1), (3, 2, 3), (3, 3, 0), (0, 0, 0)])
def test_quorum_sizes_are_validated(e, w, a):
    with pytest.raises(ValueError, match="ensemble >= write quorum"):
        metadata(ensemble_size=e, write_quorum_size=w, ack_quorum_size=a)


def test_ensembles_must_be_distinct_ordered_and_start_at_zero():
    with pytest.raises(ValueError, match="distinct"):
        metadata(ensembles=((0, ("a", "a", "c")),))
    with pytest.raises(ValueError, match="entry 0"):
        metadata(ensembles=((1, ("a", "b", "c")),))
    with pytest.raises(ValueError, match="order"):
        metadata(ensembles=((0, ("a", "b", "c")), (0, ("a", "b", "d"))))


def test_ensemble_changes_and_lookup():
    md = metadata().with_ensemble(10, ("a", "d", "c")).with_ensemble(20, ("e", "d", "c"))
    assert md.ensemble_for(0) == ("a", "b", "c")
    assert md.ensemble_for(9) == ("a", "b", "c")
    assert md.ensemble_for(10) == ("a", "d", "c")
    assert md.ensemble_for(25) == ("e", "d", "c")
    # A second change at the same first entry replaces the last ensemble.
    assert md.with_ensemble(20, ("f", "d", "c")).ensembles[-1] == (20, ("f", "d", "c"))
    assert md.all_bookies() == ["a", "b", "c", "d", "e"]


def test_close_drops_ensembles_past_the_last_entry():
    md = metadata().with_ensemble(10, ("a", "d", "c")).closed(last_entry_id=9, length=90)
    assert md.state is LedgerState.CLOSED
    assert md.ensembles == ((0, ("a", "b", "c")),)


def test_round_trip_keeps_everything_but_the_version():
    md = metadata(custom_metadata=(("app", b"x"),)).with_ensemble(4, ("a", "b", "d")).in_recovery()
    back = LedgerMetadata.from_bytes(md.to_bytes(), version=7)
    assert back == md.with_version(7)


@pytest.mark.parametrize("data", [b"", b"\x81\xa6format\x02", b"garbage", b"\x81\xa6format\x01"])
def test_unreadable_bytes_raise_a_format_error(data):
    with pytest.raises(MetadataFormatError):
        LedgerMetadata.from_bytes(data, version=0)


def test_layout_paths():
    flat = LedgerLayout()
    hierarchical = LedgerLayout(is_hierarchical=True)
    assert flat.ledger_path(1) == "/ledgers/L0000000001"
    assert hierarchical.ledger_path(1) == "/ledgers/00/0000/L0001"
    assert hierarchical.ledger_path(1234567890) == "/ledgers/12/3456/L7890"
    assert flat.ledger_id_from_sequential("/ledgers/idgen/ID-0000000042") == 42
