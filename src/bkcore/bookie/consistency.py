"""The local consistency check: a bookie's entry index against its entry logs (BookKeeper's
LedgerStorage.localConsistencyCheck, run by `bk shell localconsistencycheck`).

For every entry the index locates, in (ledger, entry) order:
- the index holds the ledger's state too (its master key): a checkpoint and a deletion write or
  remove both in one batch, so entries without it are left over from something that broke;
- the record is readable where the index says: the log exists, the record is whole, passes its
  checksum and holds that ledger's entry (EntryLogger.read checks all of these);
- the entry's packed form (bkcore.digest) names the same ledger and entry;
- its digest verifies, where that can be checked without the ledger's password: CRC32C. A ledger
  counts as CRC32C once any of its entries verifies as one (an HMAC_SHA256 entry passes that
  test with a chance of 2^-32); the digests of a ledger none of whose entries verifies are
  counted as unchecked: HMAC_SHA256 needs the password, which bookies never see.

It only reads. Each problem is reported with its ledger and entry id (entry -1: the ledger as a
whole), up to inconsistency_count_max of them; the rest are counted. On a running bookie,
compaction may move an entry between reading its location and reading the log: an entry that
fails is looked up again and checked at its new place, or skipped if it was deleted meanwhile
(BookKeeper retries the same way).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

from bkcore.bookie.entrylog import EntryLogger
from bkcore.bookie.index import ENTRY_PREFIX, IndexStore, entry_id_of, ledger_id_of, ledger_key, unpack_location
from bkcore.bookie.storage import StorageIOError
from bkcore.digest import ENTRY_HEADER, Digester, DigestType
from bkcore.errors import DigestMismatch

INDEX_BATCH_COUNT = 1024                 # index entries read per query
INCONSISTENCY_COUNT_MAX = 10_000         # problems kept for the report; more are only counted
_CRC32C_DIGEST_SIZE = 4


@dataclass(frozen=True, slots=True)
class DetectedInconsistency:
    ledger_id: int
    entry_id: int                        # -1: the ledger as a whole
    problem: str


@dataclass(slots=True)
class ConsistencyReport:
    ledger_count: int = 0
    entry_count: int = 0
    digest_checked_count: int = 0        # CRC32C digests verified (good or bad)
    digest_unchecked_count: int = 0      # digests of ledgers taken to be HMAC_SHA256
    inconsistencies: list[DetectedInconsistency] = field(default_factory=list)
    inconsistency_dropped_count: int = 0     # found beyond inconsistency_count_max

    @property
    def inconsistency_count(self) -> int:
        return len(self.inconsistencies) + self.inconsistency_dropped_count


class _Check:
    """One run: the report, and the digests of the ledger being checked."""

    def __init__(self, *, index: IndexStore, entry_logger: EntryLogger, inconsistency_count_max: int) -> None:
        self.index = index
        self.entry_logger = entry_logger
        self.inconsistency_count_max = inconsistency_count_max
        self.report = ConsistencyReport()
        self.ledger_id: int | None = None
        self.digester: Digester | None = None
        self.crc32c_count = 0            # entries of this ledger whose CRC32C digest verified
        # Entries of this ledger whose digest did not verify as CRC32C: bad ones if the ledger
        # turns out to be CRC32C. At most inconsistency_count_max kept; the rest only counted.
        self.unverified: list[int] = []
        self.unverified_dropped_count = 0

    def problem(self, ledger_id: int, entry_id: int, text: str) -> None:
        if len(self.report.inconsistencies) < self.inconsistency_count_max:
            self.report.inconsistencies.append(DetectedInconsistency(ledger_id, entry_id, text))
        else:
            self.report.inconsistency_dropped_count += 1

    def start_ledger(self, ledger_id: int) -> None:
        self.finish_ledger()
        self.ledger_id = ledger_id
        self.digester = Digester(ledger_id=ledger_id, digest_type=DigestType.CRC32C, password=b"")
        self.crc32c_count = 0
        self.unverified, self.unverified_dropped_count = [], 0
        self.report.ledger_count += 1
        if self.index.get(ledger_key(ledger_id)) is None:
            self.problem(ledger_id, -1, "entries are indexed but the index holds no state (master key) for the ledger")

    def finish_ledger(self) -> None:
        if self.ledger_id is None:
            return
        unverified_count = len(self.unverified) + self.unverified_dropped_count
        if self.crc32c_count == 0:
            self.report.digest_unchecked_count += unverified_count
            return
        self.report.digest_checked_count += self.crc32c_count + unverified_count
        for entry_id in self.unverified:
            self.problem(self.ledger_id, entry_id, "CRC32C digest mismatch (the ledger's other entries verify)")
        self.report.inconsistency_dropped_count += self.unverified_dropped_count

    def check_entry(self, key: bytes, location: bytes) -> None:
        ledger_id, entry_id = ledger_id_of(key), entry_id_of(key)
        if ledger_id != self.ledger_id:
            self.start_ledger(ledger_id)
        self.report.entry_count += 1
        body = self.read(key, location, ledger_id, entry_id)
        if body is not None:
            self.check_body(body, ledger_id, entry_id)

    def read(self, key: bytes, location: bytes, ledger_id: int, entry_id: int) -> bytes | None:
        """The entry's body; None (the problem reported) when it cannot be read, or when the
        index no longer holds it."""
        for _ in range(2):          # where it was, then where it moved to meanwhile
            try:
                return self.entry_logger.read(unpack_location(location), ledger_id=ledger_id, entry_id=entry_id)
            except StorageIOError as exc:
                problem = str(exc)
            now = self.index.get(key)
            if now is None:
                return None         # deleted meanwhile
            if bytes(now) == location:
                break
            location = bytes(now)
        self.problem(ledger_id, entry_id, problem)
        return None

    def check_body(self, body: bytes, ledger_id: int, entry_id: int) -> None:
        if len(body) < ENTRY_HEADER.size + _CRC32C_DIGEST_SIZE:
            self.problem(ledger_id, entry_id, f"the stored entry is {len(body)} bytes, shorter than an entry header")
            return
        packed_ledger_id, packed_entry_id, _, _ = ENTRY_HEADER.unpack_from(body)
        if (packed_ledger_id, packed_entry_id) != (ledger_id, entry_id):
            self.problem(ledger_id, entry_id, f"the stored entry says it is ledger {packed_ledger_id} entry "
                                              f"{packed_entry_id}")
            return
        try:
            self.digester.unpack_entry(body, expected_entry_id=entry_id)
        except DigestMismatch:
            if len(self.unverified) < self.inconsistency_count_max:
                self.unverified.append(entry_id)
            else:
                self.unverified_dropped_count += 1
            return
        self.crc32c_count += 1


def entry_locations(index: IndexStore, *, batch_count: int = INDEX_BATCH_COUNT) -> Iterator[tuple[bytes, bytes]]:
    """Every (entry key, packed location) of the index in key order, batch_count per query."""
    first = ENTRY_PREFIX
    while True:
        batch = index.items_from(first, batch_count)
        for key, value in batch:
            if bytes(key[:1]) != ENTRY_PREFIX:
                return
            yield bytes(key), bytes(value)
        if len(batch) < batch_count:
            return
        first = bytes(batch[-1][0]) + b"\x00"


def check_local_consistency(*, index: IndexStore, entry_logger: EntryLogger,
                            progress: Callable[[int], None] = lambda entry_count: None,
                            inconsistency_count_max: int = INCONSISTENCY_COUNT_MAX) -> ConsistencyReport:
    """Check every indexed entry (see the module's docstring); progress(entries checked so far)
    after each."""
    assert inconsistency_count_max >= 0
    check = _Check(index=index, entry_logger=entry_logger, inconsistency_count_max=inconsistency_count_max)
    for key, location in entry_locations(index):
        check.check_entry(key, location)
        progress(check.report.entry_count)
    check.finish_ledger()
    return check.report
