"""Journal records: the bookie's write-ahead log format, and the scan that replays it.

    record  = u32 length (of payload) | u32 crc32c(payload) | payload
    payload = msgpack [kind, fields...]

Kinds: ENTRY (ledger, entry, packed body), MASTER_KEY (ledger, key), FENCE (ledger),
LAC (ledger, lac, packed LAC), FORCE (ledger).

Scanning stops at a torn tail: a record whose length runs past the end, or a last record that
fails its checksum (a crash in the middle of the final write). Zero bytes to the end of the
data are preallocated space. A bad record followed by more
bytes is corruption, not a torn write: it raises JournalCorrupted naming the offset, and is
never skipped silently.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

import crc32c
import msgpack

RECORD_HEADER = struct.Struct(">II")
RECORD_SIZE_MAX = 16 * 1024 * 1024 + 4096


class JournalRecordKind(IntEnum):
    ENTRY = 1
    MASTER_KEY = 2
    FENCE = 3
    LAC = 4
    FORCE = 5


@dataclass(frozen=True, slots=True)
class EntryRecord:
    ledger_id: int
    entry_id: int
    body: bytes


@dataclass(frozen=True, slots=True)
class MasterKeyRecord:
    ledger_id: int
    master_key: bytes


@dataclass(frozen=True, slots=True)
class FenceRecord:
    ledger_id: int


@dataclass(frozen=True, slots=True)
class LacRecord:
    ledger_id: int
    lac: int
    body: bytes


@dataclass(frozen=True, slots=True)
class ForceRecord:
    ledger_id: int


JournalRecord = EntryRecord | MasterKeyRecord | FenceRecord | LacRecord | ForceRecord

_KIND_OF = {EntryRecord: JournalRecordKind.ENTRY, MasterKeyRecord: JournalRecordKind.MASTER_KEY,
            FenceRecord: JournalRecordKind.FENCE, LacRecord: JournalRecordKind.LAC,
            ForceRecord: JournalRecordKind.FORCE}
_CLASS_OF = {kind: cls for cls, kind in _KIND_OF.items()}
_FIELD_TYPES = {EntryRecord: (int, int, bytes), MasterKeyRecord: (int, bytes), FenceRecord: (int,),
                LacRecord: (int, int, bytes), ForceRecord: (int,)}


class JournalCorrupted(Exception):
    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"journal corrupted at offset {offset}: {reason}; the records after it "
                         f"cannot be trusted — restore this bookie's journal or rebuild the bookie")
        self.offset = offset
        self.reason = reason


def encode_record(record: JournalRecord) -> bytes:
    payload = msgpack.packb([_KIND_OF[type(record)], *(getattr(record, f) for f in record.__slots__)],
                            use_bin_type=True)
    return RECORD_HEADER.pack(len(payload), crc32c.crc32c(payload)) + payload


def _decode_payload(payload: bytes) -> JournalRecord:
    items = msgpack.unpackb(payload, raw=False)
    if not isinstance(items, list) or not items or type(items[0]) is not int:
        raise ValueError("not a tagged array")
    cls = _CLASS_OF.get(items[0])
    if cls is None:
        raise ValueError(f"unknown record kind {items[0]}")
    values = items[1:]
    types = _FIELD_TYPES[cls]
    if len(values) != len(types) or any(type(v) is not t for v, t in zip(values, types)):
        raise ValueError(f"ill-formed {cls.__name__}")
    return cls(*values)


@dataclass(frozen=True, slots=True)
class ScanResult:
    records: list[JournalRecord]
    valid_size: int
    tail_problem: str | None


def _is_zero_from(data: bytes, offset: int) -> bool:
    return data.count(0, offset) == len(data) - offset


def scan_records(data: bytes, *, start_offset: int = 0) -> ScanResult:
    """Records from start_offset on. Zero bytes to the end are preallocated space, not data;
    a bad record followed only by zeros is a torn tail too."""
    records: list[JournalRecord] = []
    offset = start_offset
    end = len(data)
    while offset < end:
        if _is_zero_from(data, offset):
            return ScanResult(records, offset, None)
        if end - offset < RECORD_HEADER.size:
            return ScanResult(records, offset, f"torn record header at offset {offset} ({end - offset} bytes)")
        length, checksum = RECORD_HEADER.unpack_from(data, offset)
        body_start = offset + RECORD_HEADER.size
        record_end = body_start + length
        if length > RECORD_SIZE_MAX:
            problem = f"record length {length} at offset {offset} exceeds {RECORD_SIZE_MAX}"
            if record_end < end and not _is_zero_from(data, record_end):
                raise JournalCorrupted(offset, problem)
            return ScanResult(records, offset, "torn tail: " + problem)
        if record_end > end:
            return ScanResult(records, offset, f"torn record at offset {offset}: {length} bytes declared, "
                                               f"{end - body_start} present")
        payload = data[body_start:record_end]
        try:
            if crc32c.crc32c(payload) != checksum:
                raise ValueError("checksum mismatch")
            record = _decode_payload(payload)
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            if record_end < end and not _is_zero_from(data, record_end):
                raise JournalCorrupted(offset, str(exc)) from None
            return ScanResult(records, offset, f"torn last record at offset {offset}: {exc}")
        records.append(record)
        offset = record_end
    return ScanResult(records, offset, None)
