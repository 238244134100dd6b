"""Records of a log stream, how they are packed into ledger entries, and their positions.

A stream writer batches records (each an application txid and a payload) into one ledger entry:

    entry payload = msgpack [FORMAT, flags, [[txid, payload], ...]]

flags bit 0 marks the end of the stream (the entry holds no records then). A record's position
is its DLSN (DistributedLog's name): (segment sequence number, entry id, slot in the entry),
ordered lexicographically and written "seq:entry:slot". Txids are non-decreasing along a
stream; the writer enforces it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import msgpack

RECORDS_FORMAT = 1
END_OF_STREAM_FLAG = 1


class RecordFormatError(Exception):
    """An entry that is not a batch of stream records (or of an unknown format version)."""


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


def pack_records(records: list[Record], *, is_end_of_stream: bool = False) -> bytes:
    return msgpack.packb([RECORDS_FORMAT, END_OF_STREAM_FLAG if is_end_of_stream else 0,
                          [[r.txid, r.payload] for r in records]], use_bin_type=True)


def unpack_records(payload: bytes) -> tuple[list[Record], bool]:
    """(records, is_end_of_stream) of one entry."""
    try:
        version, flags, items = msgpack.unpackb(payload, raw=False)
        records = [Record(txid, data) for txid, data in items]
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise RecordFormatError(f"not a batch of stream records: {exc}") from None
    if version != RECORDS_FORMAT:
        raise RecordFormatError(f"stream record format {version} is not {RECORDS_FORMAT}")
    if not all(type(r.txid) is int and type(r.payload) is bytes for r in records):
        raise RecordFormatError("stream records must be (int txid, bytes payload)")
    return records, bool(flags & END_OF_STREAM_FLAG)


class RecordBatcher:
    """Collects records into entries of at most `entry_size_max` bytes (or `record_count_max`
    records); a record larger than a whole entry is refused."""

    # Bytes msgpack adds around a record and around the batch (generous upper bounds).
    RECORD_OVERHEAD = 16
    BATCH_OVERHEAD = 16

    def __init__(self, *, entry_size_max: int = 1024 * 1024, record_count_max: int = 10_000) -> None:
        self.entry_size_max = entry_size_max
        self.record_count_max = record_count_max
        self._records: list[Record] = []
        self._size = self.BATCH_OVERHEAD

    def add(self, record: Record) -> bytes | None:
        """Add a record; returns a full entry payload when the record does not fit the current
        one (the record then starts the next entry)."""
        size = len(record.payload) + self.RECORD_OVERHEAD
        if size + self.BATCH_OVERHEAD > self.entry_size_max:
            raise ValueError(f"record of {len(record.payload)} bytes exceeds the entry size limit "
                             f"{self.entry_size_max}")
        full = None
        if self._records and (self._size + size > self.entry_size_max or len(self._records) >= self.record_count_max):
            full = self.flush()
        self._records.append(record)
        self._size += size
        return full

    def flush(self) -> bytes | None:
        """The pending records as one entry payload (None if there are none)."""
        if not self._records:
            return None
        payload = pack_records(self._records)
        self._records, self._size = [], self.BATCH_OVERHEAD
        return payload

    @property
    def pending_count(self) -> int:
        return len(self._records)


def positioned(segment: int, entry_id: int, payload: bytes) -> list[PositionedRecord]:
    records, _ = unpack_records(payload)
    return [PositionedRecord(DLSN(segment, entry_id, slot), r.txid, r.payload) for slot, r in enumerate(records)]
