"""Records of a log stream, their positions, and how many go into one ledger entry.

A stream writer batches records (each an application txid and a payload) into one ledger entry
(bkcore.stream.entry_format has the bytes). A record's position is its DLSN (DistributedLog's
name): (segment sequence number, entry id, slot in the entry), ordered lexicographically and
written "seq:entry:slot". Txids never decrease along a stream; the writer enforces it.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from dataclasses import dataclass
from typing import NamedTuple, Sequence


class DLSN(NamedTuple):
    segment: int
    entry_id: int
    slot: int

    def __str__(self) -> str:
        return f"{self.segment}:{self.entry_id}:{self.slot}"

    @classmethod
    def parse(cls, text: str) -> DLSN:
        parts = text.strip().split(":")
        if len(parts) != 3 or not all(p.lstrip("-").isdigit() for p in parts):
            raise ValueError(f"position {text!r} is not SEGMENT:ENTRY:SLOT")
        return cls(*map(int, parts))


# Before every record of the stream.
DLSN_START = DLSN(0, 0, 0)


@dataclass(frozen=True, slots=True)
class Record:
    txid: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class PositionedRecord:
    dlsn: DLSN
    txid: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class StreamEntry:
    """One ledger entry of a stream: a batch of records and the segment's counters before it."""

    records: tuple[Record, ...]
    records_before: int = 0
    bytes_before: int = 0
    last_txid: int = -1
    is_end_of_stream: bool = False

    @property
    def records_through(self) -> int:
        return self.records_before + len(self.records)

    @property
    def bytes_through(self) -> int:
        return self.bytes_before + sum(len(r.payload) for r in self.records)


class RecordBatcher:
    """Collects records into entries of at most `entry_size_max` bytes (or `record_count_max`
    records); a record larger than a whole entry is refused."""

    # Bytes msgpack adds around a record and around the batch (generous upper bounds).
    RECORD_OVERHEAD = 16
    BATCH_OVERHEAD = 16
    HEADER_OVERHEAD = 40      # format, flags and the three counters
    EMPTY_SIZE = BATCH_OVERHEAD + HEADER_OVERHEAD

    def __init__(self, *, entry_size_max: int = 1024 * 1024, record_count_max: int = 10_000) -> None:
        self.entry_size_max = entry_size_max
        self.record_count_max = record_count_max
        self._records: list[Record] = []
        self._size = self.EMPTY_SIZE

    def check(self, record: Record) -> None:
        """Refuse a record that could never fit an entry (before anything is queued)."""
        _check_fits_alone(len(record.payload), self.entry_size_max)

    def fits(self, record: Record) -> bool:
        """Whether `record` can join the current entry (always true for the first record)."""
        return not self._records or (self._size + len(record.payload) + self.RECORD_OVERHEAD <= self.entry_size_max
                                     and len(self._records) < self.record_count_max)

    def add(self, record: Record) -> list[Record] | None:
        """Add a record; returns the records of a full entry when the record does not fit the
        current one (the record then starts the next entry)."""
        self.check(record)
        full = None if self.fits(record) else self.flush()
        self._records.append(record)
        self._size += len(record.payload) + self.RECORD_OVERHEAD
        return full

    def flush(self) -> list[Record]:
        """The pending records, to become one entry (empty if there are none)."""
        records, self._records, self._size = self._records, [], self.EMPTY_SIZE
        return records

    @property
    def pending_count(self) -> int:
        return len(self._records)


def _check_fits_alone(payload_size: int, entry_size_max: int) -> None:
    if payload_size + RecordBatcher.RECORD_OVERHEAD + RecordBatcher.EMPTY_SIZE > entry_size_max:
        raise ValueError(f"record of {payload_size} bytes exceeds the entry size limit {entry_size_max}")


class EntryCutter:
    """RecordBatcher's rule for records known only by their payload sizes, as Spark's Arrow
    batches hold them: where the entries end in a run of records, with the entry not yet full
    carried on to the next run. One pass of C-level cumulative sums and a binary search per
    entry, so the caller slices its columns with no Python work per record."""

    def __init__(self, *, entry_size_max: int = 1024 * 1024, record_count_max: int = 10_000) -> None:
        self.entry_size_max = entry_size_max
        self.record_count_max = record_count_max
        self.pending_count = 0
        self._size = RecordBatcher.EMPTY_SIZE

    def cut(self, sizes: Sequence[int]) -> list[int]:
        """Take a run of records by their payload sizes; returns the index in the run where each
        entry they fill ends (exclusive; the first such entry also holds the records pending
        before the run). The records after the last index stay pending. A record larger than a
        whole entry is refused before any is taken."""
        _check_fits_alone(max(sizes, default=0), self.entry_size_max)
        overhead, size_max, count_max = RecordBatcher.RECORD_OVERHEAD, self.entry_size_max, self.record_count_max
        through = list(itertools.accumulate(map(operator.add, sizes, itertools.repeat(overhead))))
        ends, start, before, size, count = [], 0, 0, self._size, self.pending_count
        while start < len(through):
            # The records from `start` that fit: their sizes through the last of them, counted
            # from `before` (the sizes before `start`), keep the entry within both limits.
            fit = bisect.bisect_right(through, size_max - size + before, lo=start) - start
            fit = min(fit, count_max - count)
            if count == 0:
                fit = max(fit, 1)          # a record alone always makes an entry
            if start + fit == len(through):
                size += through[-1] - before
                count += fit
                break
            start += fit
            ends.append(start)
            before = through[start - 1] if start else 0
            size, count = RecordBatcher.EMPTY_SIZE, 0
        self._size, self.pending_count = size, count
        return ends

    def flush(self) -> int:
        """The records pending, which make the last entry (0 if none); none pend after."""
        count, self._size, self.pending_count = self.pending_count, RecordBatcher.EMPTY_SIZE, 0
        return count


def positioned(segment: int, entry_id: int, entry: StreamEntry) -> list[PositionedRecord]:
    return [PositionedRecord(DLSN(segment, entry_id, slot), r.txid, r.payload) for slot, r in enumerate(entry.records)]
