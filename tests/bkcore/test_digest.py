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


def _damaged_answer(rng, digester: Digester) -> list[bytes]:
    """A batch read's bodies for entries 5.. : alike or not, with now and then a flipped bit,
    another ledger's or position's entry, a body cut short."""
    size = rng.choice([0, 1, 100])
    bodies = [digester.pack_entry(entry_id=entry_id, lac=entry_id - 1, length=entry_id * 10,
                                  payload=rng.randbytes(size if rng.random() < 0.7 else rng.randrange(50)))
              for entry_id in range(5, 5 + rng.randrange(12))]
    if bodies and rng.random() < 0.5:
        index = rng.randrange(len(bodies))
        damage = rng.randrange(4)
        if damage == 0:
            body = bytearray(bodies[index])
            body[rng.randrange(len(body))] ^= 1 << rng.randrange(8)
            bodies[index] = bytes(body)
        elif damage == 1:
            other = Digester(ledger_id=digester.ledger_id + 1, digest_type=digester.digest_type, password=b"pw")
            bodies[index] = other.pack_entry(entry_id=5 + index, lac=0, length=0, payload=b"x")
        elif damage == 2:
            bodies[index] = digester.pack_entry(entry_id=6 + index, lac=0, length=0, payload=b"x")
        else:
            bodies[index] = bodies[index][:rng.randrange(40)]
    return bodies


@pytest.mark.parametrize("digest_type", list(DigestType))
def test_unpack_payloads_checks_what_unpack_entry_checks(digest_type):
    import random
    rng = random.Random(7)
    digester = Digester(ledger_id=9, digest_type=digest_type, password=b"pw")
    for _ in range(500):
        bodies = _damaged_answer(rng, digester)
        payloads, error = digester.unpack_payloads(bodies, 5)
        plain_payloads, plain_error = digester.unpack_payloads_plain(bodies, 5)
        assert payloads == plain_payloads
        assert (error is None and plain_error is None) or str(error) == str(plain_error)
        if error is None:
            assert len(payloads) == len(bodies)
