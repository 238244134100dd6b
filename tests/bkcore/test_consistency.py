"""The local consistency check (bkcore.bookie.consistency) over storage written by
DurableLedgerStorage, on the simulator's file system with a memory index and on real files with
lmdb; each planted inconsistency is found with its ledger and entry id, and a clean store has none."""

import pytest

from bkcore.bookie.consistency import check_local_consistency
from bkcore.bookie.entrylog import RECORD_HEADER, entry_log_name
from bkcore.bookie.index import entry_key, ledger_key, pack_location, unpack_location
from bkcore.digest import Digester, DigestType
from tests.bkcore.test_durable_storage import Stack

CRC_LEDGER, HMAC_LEDGER = 1, 2


@pytest.fixture(params=["sim", "real"])
def stack(request, tmp_path):
    yield Stack(request.param, tmp_path)


def packed(ledger_id: int, entry_id: int, digest_type: DigestType) -> bytes:
    digester = Digester(ledger_id=ledger_id, digest_type=digest_type, password=b"secret")
    return digester.pack_entry(entry_id=entry_id, lac=entry_id - 1, length=entry_id + 1, payload=b"p%d" % entry_id)


def stored(stack, *, entry_count: int = 5):
    """A storage with a CRC32C and an HMAC_SHA256 ledger, checkpointed into its entry log."""
    storage = stack.storage()
    for ledger_id, digest_type in ((CRC_LEDGER, DigestType.CRC32C), (HMAC_LEDGER, DigestType.HMAC_SHA256)):
        storage.set_master_key(ledger_id, b"key")
        for entry_id in range(entry_count):
            storage.add_entry(ledger_id, entry_id, packed(ledger_id, entry_id, digest_type))
    storage.checkpoint()
    return storage


def check(stack, storage):
    return check_local_consistency(index=stack.index, entry_logger=storage.entry_logger)


def location_of(stack, ledger_id: int, entry_id: int) -> tuple[int, int]:
    return unpack_location(stack.index.get(entry_key(ledger_id, entry_id)))


def found(report) -> list[tuple[int, int]]:
    return [(i.ledger_id, i.entry_id) for i in report.inconsistencies]


def test_a_clean_store_has_no_inconsistency_and_counts_what_it_checked(stack):
    storage = stored(stack)
    report = check(stack, storage)
    assert report.inconsistencies == [] and report.inconsistency_count == 0
    assert (report.ledger_count, report.entry_count) == (2, 10)
    # CRC32C digests are verified; HMAC_SHA256 ones need the password bookies never see.
    assert (report.digest_checked_count, report.digest_unchecked_count) == (5, 5)


def test_a_corrupted_record_is_reported_with_its_ledger_and_entry(stack):
    storage = stored(stack)
    log_id, offset = location_of(stack, CRC_LEDGER, 3)
    path = f"ledgers/{entry_log_name(log_id)}"
    stack.fs.write_at(path, offset + RECORD_HEADER.size + 20, b"\xff\xfe")        # inside the payload
    report = check(stack, storage)
    assert found(report) == [(CRC_LEDGER, 3)]
    assert "checksum mismatch" in report.inconsistencies[0].problem


def test_an_index_entry_pointing_past_the_end_of_its_log_is_reported(stack):
    storage = stored(stack)
    log_id, _ = location_of(stack, HMAC_LEDGER, 4)
    size = stack.fs.size(f"ledgers/{entry_log_name(log_id)}")
    stack.index.write({entry_key(HMAC_LEDGER, 4): pack_location(log_id, size + 100)}, [])
    report = check(stack, storage)
    assert found(report) == [(HMAC_LEDGER, 4)]
    assert "cut short" in report.inconsistencies[0].problem


def test_an_index_entry_pointing_at_another_entry_or_a_missing_log_is_reported(stack):
    storage = stored(stack)
    stack.index.write({entry_key(CRC_LEDGER, 1): pack_location(*location_of(stack, CRC_LEDGER, 2)),
                       entry_key(CRC_LEDGER, 4): pack_location(999, 16)}, [])
    report = check(stack, storage)
    assert found(report) == [(CRC_LEDGER, 1), (CRC_LEDGER, 4)]
    assert "holds entry (1, 2)" in report.inconsistencies[0].problem
    assert entry_log_name(999) in report.inconsistencies[1].problem


def test_a_bad_crc32c_digest_under_a_good_record_checksum_is_reported(stack):
    """The entry log's record is intact, but the entry it holds was stored with a digest that
    does not verify (the record checksum only covers what the bookie was given)."""
    storage = stack.storage()
    storage.set_master_key(CRC_LEDGER, b"key")
    bodies = [packed(CRC_LEDGER, entry_id, DigestType.CRC32C) for entry_id in range(4)]
    bodies[2] = bodies[2][:-1] + b"X"                  # the payload changed after the digest was made
    bodies.append(packed(CRC_LEDGER, 4, DigestType.CRC32C)[:32] + b"\x00" * 6)     # ids right, digest wrong
    for entry_id, body in enumerate(bodies):
        storage.add_entry(CRC_LEDGER, entry_id, body)
    storage.checkpoint()
    report = check(stack, storage)
    assert found(report) == [(CRC_LEDGER, 2), (CRC_LEDGER, 4)]
    assert all("CRC32C digest mismatch" in i.problem for i in report.inconsistencies)
    assert report.digest_checked_count == 5


def test_a_stored_entry_naming_another_ledger_or_entry_is_reported(stack):
    storage = stack.storage()
    storage.set_master_key(CRC_LEDGER, b"key")
    storage.add_entry(CRC_LEDGER, 0, packed(CRC_LEDGER, 0, DigestType.CRC32C))
    storage.add_entry(CRC_LEDGER, 1, packed(7, 1, DigestType.CRC32C))           # another ledger's entry
    storage.add_entry(CRC_LEDGER, 2, b"short")
    storage.checkpoint()
    report = check(stack, storage)
    assert found(report) == [(CRC_LEDGER, 1), (CRC_LEDGER, 2)]
    assert "says it is ledger 7 entry 1" in report.inconsistencies[0].problem
    assert "shorter than an entry header" in report.inconsistencies[1].problem


def test_entries_of_a_ledger_the_index_holds_no_state_for_are_reported(stack):
    storage = stored(stack)
    stack.index.write({}, [ledger_key(HMAC_LEDGER)])
    assert found(check(stack, storage)) == [(HMAC_LEDGER, -1)]


def test_beyond_the_limit_problems_are_counted_not_listed(stack):
    storage = stored(stack)
    for entry_id in range(5):
        stack.index.write({entry_key(CRC_LEDGER, entry_id): pack_location(999, 16)}, [])
    report = check_local_consistency(index=stack.index, entry_logger=storage.entry_logger, inconsistency_count_max=2)
    assert found(report) == [(CRC_LEDGER, 0), (CRC_LEDGER, 1)]
    assert (report.inconsistency_dropped_count, report.inconsistency_count) == (3, 5)


def test_progress_counts_every_entry_checked(stack):
    storage = stored(stack)
    seen = []
    check_local_consistency(index=stack.index, entry_logger=storage.entry_logger, progress=seen.append)
    assert seen == list(range(1, 11))
