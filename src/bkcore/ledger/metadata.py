"""LedgerMetadata: the replicated description of one ledger, stored in the metastore.

A ledger's life: OPEN (one writer adds) -> CLOSED (last entry id and length fixed forever), or
OPEN -> IN_RECOVERY (a reader fences the writer and finds the last entry) -> CLOSED. Every change
is a compare-and-set on `version`, the store's version of the serialized metadata; `version` is
not part of the serialized bytes.

Ensembles map a first entry id to the bookies storing entries from there on; an ensemble change
adds a key (or replaces the last one if no entry was written under it yet).
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from enum import Enum

import msgpack

from bkcore.digest import DigestType
from bkcore.wire import INVALID_ENTRY_ID, store_fields_directly

FORMAT_VERSION = 1


class LedgerState(Enum):
    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"


# Looked up once: reading an enum member off its class is slow in CPython 3.11 (five times a plain
# attribute), and every metadata built or asked is_closed tests it.
_CLOSED = LedgerState.CLOSED
# Members by value, for reading metadata without calling the enum classes (about a microsecond
# each in CPython 3.11); a value not here goes to the class, which refuses it as before.
_LEDGER_STATE_OF_VALUE = {state.value: state for state in LedgerState}
_DIGEST_TYPE_OF_VALUE = {digest_type.value: digest_type for digest_type in DigestType}


def _member_of(enum_class, members: dict, value: object):
    """enum_class(value), from `members` when the value is a str it holds."""
    member = members.get(value) if type(value) is str else None
    return member if member is not None else enum_class(value)


class MetadataFormatError(ValueError):
    """Stored metadata bytes that cannot be read; names the ledger when it can."""


def password_hash(password: bytes) -> bytes:
    return hashlib.sha256(b"password" + password).digest()


@store_fields_directly
@dataclass(frozen=True, slots=True)
class LedgerMetadata:
    ledger_id: int
    ensemble_size: int
    write_quorum_size: int
    ack_quorum_size: int
    ensembles: tuple[tuple[int, tuple[str, ...]], ...]
    digest_type: DigestType
    password_hash: bytes
    ctime_ns: int = 0
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = INVALID_ENTRY_ID
    length: int = 0
    is_deferred_sync: bool = False
    custom_metadata: tuple[tuple[str, bytes], ...] = ()
    # The master key bookies check on adds, kept so autorecovery can re-replicate entries
    # (BookKeeper keeps the ledger password in metadata for the same reason). b"": unknown.
    master_key: bytes = b""
    version: int = -1

    def __post_init__(self) -> None:
        if not self.ensemble_size >= self.write_quorum_size >= self.ack_quorum_size >= 1:
            raise ValueError(
                f"ledger {self.ledger_id}: need ensemble >= write quorum >= ack quorum >= 1, got "
                f"E={self.ensemble_size} Qw={self.write_quorum_size} Qa={self.ack_quorum_size}")
        if not self.ensembles or self.ensembles[0][0] != 0:
            raise ValueError(f"ledger {self.ledger_id}: the first ensemble must start at entry 0")
        previous = -1
        for first_entry_id, bookies in self.ensembles:
            if first_entry_id <= previous:
                raise ValueError(f"ledger {self.ledger_id}: ensembles out of order at entry {first_entry_id}")
            if len(bookies) != self.ensemble_size or len(set(bookies)) != len(bookies):
                raise ValueError(f"ledger {self.ledger_id}: ensemble at {first_entry_id} must have "
                                 f"{self.ensemble_size} distinct bookies, got {bookies}")
            previous = first_entry_id
        if self.state is _CLOSED and self.last_entry_id < INVALID_ENTRY_ID:
            raise ValueError(f"ledger {self.ledger_id}: closed with last entry {self.last_entry_id}")

    # -- queries --------------------------------------------------------------------------

    @property
    def is_closed(self) -> bool:
        return self.state is _CLOSED

    def ensemble_for(self, entry_id: int) -> tuple[str, ...]:
        """Bookies that store `entry_id` (the ensemble whose first entry id is the largest <= it)."""
        chosen = self.ensembles[0][1]
        for first_entry_id, bookies in self.ensembles:
            if first_entry_id > entry_id:
                break
            chosen = bookies
        return chosen

    @property
    def last_ensemble(self) -> tuple[str, ...]:
        return self.ensembles[-1][1]

    @property
    def last_ensemble_start(self) -> int:
        return self.ensembles[-1][0]

    def all_bookies(self) -> list[str]:
        """Every bookie named by any ensemble, in first-seen order."""
        seen: dict[str, None] = {}
        for _, bookies in self.ensembles:
            for bookie in bookies:
                seen.setdefault(bookie, None)
        return list(seen)

    # -- transitions (each returns new metadata; the caller CASes it in) ------------------

    def with_ensemble(self, first_entry_id: int, bookies: tuple[str, ...]) -> LedgerMetadata:
        """Entries from `first_entry_id` on go to `bookies`."""
        assert first_entry_id >= self.last_ensemble_start
        kept = self.ensembles if first_entry_id > self.last_ensemble_start else self.ensembles[:-1]
        return self._replace(ensembles=kept + ((first_entry_id, tuple(bookies)),))

    def in_recovery(self) -> LedgerMetadata:
        assert self.state is not LedgerState.CLOSED
        return self._replace(state=LedgerState.IN_RECOVERY)

    def closed(self, *, last_entry_id: int, length: int) -> LedgerMetadata:
        assert last_entry_id >= INVALID_ENTRY_ID and length >= 0
        # Ensembles that start after the last entry never held anything; drop them.
        ensembles = tuple(e for e in self.ensembles if e[0] == 0 or e[0] <= last_entry_id)
        return self._replace(state=LedgerState.CLOSED, last_entry_id=last_entry_id,
                                   length=length, ensembles=ensembles)

    def with_version(self, version: int) -> LedgerMetadata:
        return self._replace(version=version)

    def _replace(self, **changes) -> LedgerMetadata:
        """dataclasses.replace(self, **changes), from a fixed list of field names (replace looks
        the fields up on every call, which costs more than building the new metadata)."""
        for name in _FIELD_NAMES:
            if name not in changes:
                changes[name] = getattr(self, name)
        return LedgerMetadata(**changes)

    def summary(self) -> dict:
        """Plain values for tools and JSON output."""
        return {"ledger_id": self.ledger_id, "state": self.state.name, "ensemble_size": self.ensemble_size,
                "write_quorum_size": self.write_quorum_size, "ack_quorum_size": self.ack_quorum_size,
                "last_entry_id": self.last_entry_id, "length": self.length, "digest_type": self.digest_type.name,
                "ensembles": {str(first): list(bookies) for first, bookies in self.ensembles},
                "version": self.version}

    # -- serialization --------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        # packb's bytes, from a Packer sized for metadata instead of packb's 1 MiB buffer.
        return msgpack.Packer(use_bin_type=True, buf_size=4096).pack({
            "format": FORMAT_VERSION,
            "ledger_id": self.ledger_id,
            "E": self.ensemble_size, "Qw": self.write_quorum_size, "Qa": self.ack_quorum_size,
            "ensembles": [[first, list(bookies)] for first, bookies in self.ensembles],
            "digest": self.digest_type._value_,       # (.value is a property: a call)
            "password_hash": self.password_hash,
            "ctime_ns": self.ctime_ns,
            "state": self.state._value_,
            "last_entry_id": self.last_entry_id,
            "length": self.length,
            "deferred_sync": self.is_deferred_sync,
            "custom": [[k, v] for k, v in self.custom_metadata],
            "master_key": self.master_key,
        })

    @classmethod
    def from_bytes(cls, data: bytes, *, version: int) -> LedgerMetadata:
        try:
            d = msgpack.unpackb(data, raw=False)
            if d.get("format") != FORMAT_VERSION:
                raise MetadataFormatError(f"ledger metadata format {d.get('format')!r} is not {FORMAT_VERSION}")
            return cls(
                ledger_id=d["ledger_id"], ensemble_size=d["E"], write_quorum_size=d["Qw"],
                ack_quorum_size=d["Qa"],
                ensembles=tuple((first, tuple(bookies)) for first, bookies in d["ensembles"]),
                digest_type=_member_of(DigestType, _DIGEST_TYPE_OF_VALUE, d["digest"]),
                password_hash=d["password_hash"], ctime_ns=d["ctime_ns"],
                state=_member_of(LedgerState, _LEDGER_STATE_OF_VALUE, d["state"]),
                last_entry_id=d["last_entry_id"], length=d["length"],
                is_deferred_sync=d["deferred_sync"],
                custom_metadata=tuple((k, v) for k, v in d["custom"]), master_key=d.get("master_key", b""),
                version=version)
        except MetadataFormatError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError, msgpack.UnpackException) as exc:
            raise MetadataFormatError(f"unreadable ledger metadata: {exc}") from None


_FIELD_NAMES = tuple(field.name for field in dataclasses.fields(LedgerMetadata))
