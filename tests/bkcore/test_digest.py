"""Entry digests: what they cover, what they catch, and keys from passwords."""

import pytest

from bkcore.digest import Digester, DigestType, master_key, peek_entry_header
from bkcore.errors import DigestMismatch


@pytest.mark.parametrize("digest_type", list(DigestType))
def test_pack_and_unpack(digest_type):
    digester = Digester(ledger_id=9, digest_type=digest_type, password=b"secret")
    body = digester.pack_entry(entry_id=3, lac=2, length=100, payload=b"hello")
    entry = digester.unpack_entry(body, expected_entry_id=3)
    assert (entry.ledger_id, entry.entry_id, entry.lac, entry.length, entry.payload) == (9, 3, 2, 100, b"hello")
    assert peek_entry_header(body) == (9, 3, 2)
    assert digester.unpack_lac(digester.pack_lac(41)) == 41


@pytest.mark.parametrize("digest_type", list(DigestType))
def test_the_entry_packer_packs_what_pack_entry_packs(digest_type):
    digester = Digester(ledger_id=9, digest_type=digest_type, password=b"secret")
    pack = digester.entry_packer()
    for entry_id, lac, length, payload in [(0, -1, 0, b""), (3, 2, 100, b"hello"), (2**40, 2**40 - 1, 2**50, bytes(5000))]:
        assert pack(entry_id, lac, length, payload) == digester.pack_entry(
            entry_id=entry_id, lac=lac, length=length, payload=payload)


@pytest.mark.parametrize("digest_type", list(DigestType))
def test_every_covered_byte_is_checked(digest_type):
    digester = Digester(ledger_id=9, digest_type=digest_type, password=b"secret")
    body = digester.pack_entry(entry_id=3, lac=2, length=100, payload=b"hello")
    for index in range(len(body)):
        corrupted = bytearray(body)
        corrupted[index] ^= 0x10
        with pytest.raises(DigestMismatch):
            digester.unpack_entry(bytes(corrupted))


def test_entry_of_another_ledger_or_position_is_refused():
    a = Digester(ledger_id=1, digest_type=DigestType.CRC32C, password=b"")
    b = Digester(ledger_id=2, digest_type=DigestType.CRC32C, password=b"")
    body = a.pack_entry(entry_id=0, lac=-1, length=1, payload=b"x")
    with pytest.raises(DigestMismatch, match="ledger"):
        b.unpack_entry(body)
    with pytest.raises(DigestMismatch, match="expected 5"):
        a.unpack_entry(body, expected_entry_id=5)


def test_hmac_needs_the_password():
    writer = Digester(ledger_id=1, digest_type=DigestType.HMAC_SHA256, password=b"right")
    reader = Digester(ledger_id=1, digest_type=DigestType.HMAC_SHA256, password=b"wrong")
    with pytest.raises(DigestMismatch):
        reader.unpack_entry(writer.pack_entry(entry_id=0, lac=-1, length=1, payload=b"x"))


def test_short_bodies_are_mismatches_not_crashes():
    digester = Digester(ledger_id=1, digest_type=DigestType.CRC32C, password=b"")
    with pytest.raises(DigestMismatch):
        digester.unpack_entry(b"short")
    assert peek_entry_header(b"short") is None


def test_master_key_depends_on_password_only():
    assert master_key(b"a") == master_key(b"a") != master_key(b"b")


def test_entries_are_of_checks_every_header_of_a_batch():
    from bkcore.digest import Digester, DigestType, entries_are_of
    digester = Digester(ledger_id=9, digest_type=DigestType.CRC32C, password=b"pw")
    bodies = [digester.pack_entry(entry_id=e, lac=e - 1, length=e + 1, payload=b"p") for e in range(5, 9)]
    assert entries_are_of(bodies, 9, 5)
    assert entries_are_of(bodies[:1], 9, 5)
    assert not entries_are_of(bodies, 9, 6)                       # ids start elsewhere
    assert not entries_are_of(bodies, 8, 5)                       # another ledger's
    assert not entries_are_of([bodies[0], bodies[2]], 9, 5)       # a gap
    assert not entries_are_of([bodies[0], bodies[1][:20]], 9, 5)  # a header cut short
    other = Digester(ledger_id=8, digest_type=DigestType.CRC32C, password=b"pw")
    assert not entries_are_of([bodies[0], other.pack_entry(entry_id=6, lac=5, length=7, payload=b"p")], 9, 5)
