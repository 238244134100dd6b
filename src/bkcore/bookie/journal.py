"""Journal records: the bookie's write-ahead log format, and the scan that replays it.

    record  = u32 length (big endian, of the payload) | u32 crc32c(payload) | payload
    payload = msgpack [kind, fields...]

Kinds: ENTRY (ledger, entry, packed body), MASTER_KEY (ledger, key), FENCE (ledger),
LAC (ledger, lac, packed LAC), FORCE (ledger), ENTRIES (ledger, first entry, [packed bodies]).

Scanning rules:
- a record whose declared length runs past the end of the data, or a last record that fails
  its checksum or decoding, is a torn tail (a crash in the middle of the final write): the scan
  stops there and reports it in `tail_problem`;
- a bad record followed by more (non-zero) bytes is corruption, not a torn write: it raises
  JournalCorrupted naming the offset, and is never skipped silently;
- a declared length above record_size_max is a bad record under the same two rules;
- a declared length above record_size_max that also runs past the data cannot say where the
  record would have ended (no writer wrote it: the header was cut short, or is junk, or was
  damaged), so the bytes after its header are searched for a well-formed record (sane length,
  matching checksum, decodable): a length field damaged in the middle of a journal still has
  good records after it, and is corruption; a torn or junk tail has none. (A sane length that
  runs past the data is a torn write: its writer's record was cut, and a record found inside
  its payload would be the payload's own bytes.)
- zero bytes to the end of the data are preallocated space, not a problem (a real record never
  has length 0: its payload is at least a msgpack array header).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from enum import IntEnum

import crc32c
import msgpack

from bkcore.wire import store_fields_directly

RECORD_HEADER = struct.Struct(">II")
# An entry is bounded well below this by the bookie (entry_size_max); the slack covers the
# msgpack framing of the record around it.
RECORD_SIZE_MAX = 16 * 1024 * 1024 + 4096
# Bytes a record adds around its variable fields (header, msgpack array, kind, ids): used by
# the bookie to check that its entry_size_max fits in one record.
RECORD_OVERHEAD_SIZE_MAX = RECORD_HEADER.size + 64


class JournalRecordKind(IntEnum):
    ENTRY = 1
    MASTER_KEY = 2
    FENCE = 3
    LAC = 4
    FORCE = 5
    ENTRIES = 6


@store_fields_directly
@dataclass(frozen=True, slots=True)
class EntryRecord:
    ledger_id: int
    entry_id: int
    body: bytes


@store_fields_directly
@dataclass(frozen=True, slots=True)
class MasterKeyRecord:
    ledger_id: int
    master_key: bytes


@store_fields_directly
@dataclass(frozen=True, slots=True)
class FenceRecord:
    ledger_id: int


@store_fields_directly
@dataclass(frozen=True, slots=True)
class LacRecord:
    ledger_id: int
    lac: int
    body: bytes


@store_fields_directly
@dataclass(frozen=True, slots=True)
class ForceRecord:
    ledger_id: int


@store_fields_directly
@dataclass(frozen=True, slots=True)
class EntriesRecord:
    """Consecutive entries of one ledger from one AddBatchRequest: first_entry_id, +1, ..."""
    ledger_id: int
    first_entry_id: int
    bodies: list


JournalRecord = EntryRecord | MasterKeyRecord | FenceRecord | LacRecord | ForceRecord | EntriesRecord

_KIND_OF = {EntryRecord: JournalRecordKind.ENTRY, MasterKeyRecord: JournalRecordKind.MASTER_KEY,
            FenceRecord: JournalRecordKind.FENCE, LacRecord: JournalRecordKind.LAC,
            ForceRecord: JournalRecordKind.FORCE, EntriesRecord: JournalRecordKind.ENTRIES}
_ENTRY_KIND = int(JournalRecordKind.ENTRY)
_CLASS_OF = {int(kind): cls for cls, kind in _KIND_OF.items()}
_unpackb = msgpack.unpackb
_crc32c = crc32c.crc32c
_FIELD_TYPES = {EntryRecord: (int, int, bytes), MasterKeyRecord: (int, bytes), FenceRecord: (int,),
                LacRecord: (int, int, bytes), ForceRecord: (int,), EntriesRecord: (int, int, list)}


class JournalCorrupted(Exception):
    """A record in the middle of a journal fails its checksum or decoding."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"journal corrupted at offset {offset}: {reason}; the records after it "
                         f"cannot be trusted — restore this bookie's journal or rebuild the bookie")
        self.offset = offset
        self.reason = reason


def encode_record(record: JournalRecord) -> bytes:
    """One record's bytes (header and payload). A bookie encodes through its own
    RecordEncoder, which reuses a msgpack Packer; this makes a fresh one."""
    return RecordEncoder().encode(record)


class RecordEncoder:
    """encode_record with its buffers kept from record to record. A Packer is not safe to share
    between threads, so each user (a bookie) keeps its own, as single-threaded as it is.

    A record of hundreds of KiB (a batch of adds, or one large entry) used to become bytes three
    times: packed, copied out of the packer, then copied again behind its header. Allocations
    that size come fresh from the OS as often as not, and every page of one is a fault: encoding
    a 512 KiB record took 60-680 us where the copy itself is about 30. Now it is copied once:
    - an entry whose body is large is written as its msgpack prefix (array header, kind, ids,
      bin header), made by hand, and the body itself, joined once with the header;
    - any other record is packed into a kept buffer (autoreset off) and joined once with its
      header from there.
    Small entries (nearly every record of 1 KiB adds) keep the plain path, fastest for them.
    The bytes are the same either way (tests/bkcore/test_journal_records.py)."""

    __slots__ = ("_pack", "_packer")

    def __init__(self) -> None:
        self._pack = msgpack.Packer(use_bin_type=True).pack     # resets itself after each pack
        self._packer = msgpack.Packer(use_bin_type=True, autoreset=False)

    def encode(self, record: JournalRecord) -> bytes:
        kind = type(record)
        if kind is EntryRecord:      # nearly every record: its fields without a generator
            return self.encode_entry(record.ledger_id, record.entry_id, record.body)
        packer = self._packer
        try:
            packer.pack([int(_KIND_OF[kind]), *(getattr(record, name) for name in record.__slots__)])
            with packer.getbuffer() as payload:
                assert len(payload) <= RECORD_SIZE_MAX, \
                    f"{kind.__name__} of {len(payload)} bytes exceeds RECORD_SIZE_MAX"
                return b"".join((RECORD_HEADER.pack(len(payload), crc32c.crc32c(payload)), payload))
        finally:
            packer.reset()

    def encode_entry(self, ledger_id: int, entry_id: int, body: bytes) -> bytes:
        """encode(EntryRecord(ledger_id, entry_id, body)), without building the record."""
        pack = self._pack        # (read, then called: a method lookup here would not specialize)
        if len(body) < LARGE_BODY_SIZE:
            payload = pack([_ENTRY_KIND, ledger_id, entry_id, body])
            assert len(payload) <= RECORD_SIZE_MAX, f"EntryRecord of {len(payload)} bytes exceeds RECORD_SIZE_MAX"
            return RECORD_HEADER.pack(len(payload), crc32c.crc32c(payload)) + payload
        # [kind, ledger, entry, body]: a fixarray of 4 is [kind, ledger, entry]'s packing with
        # its first byte (0x93, a fixarray of 3) made 0x94, then the body's bin header.
        prefix = b"".join((_FIXARRAY_OF_4, memoryview(pack([_ENTRY_KIND, ledger_id, entry_id]))[1:],
                           _bin_header(len(body))))
        size = len(prefix) + len(body)
        assert size <= RECORD_SIZE_MAX, f"EntryRecord of {size} bytes exceeds RECORD_SIZE_MAX"
        return b"".join((RECORD_HEADER.pack(size, crc32c.crc32c(body, crc32c.crc32c(prefix))), prefix, body))


# Bodies from this size on are encoded by the prefix path of RecordEncoder.encode_entry.
LARGE_BODY_SIZE = 16 * 1024
_FIXARRAY_OF_4 = b"\x94"
_BIN16_HEADER = struct.Struct(">BH")
_BIN32_HEADER = struct.Struct(">BI")


def _bin_header(size: int) -> bytes:
    """msgpack's header for a bin of `size` bytes, 256 or more (bin 16, else bin 32)."""
    return _BIN16_HEADER.pack(0xC5, size) if size < 0x10000 else _BIN32_HEADER.pack(0xC6, size)


def _decode_payload(payload: memoryview) -> JournalRecord:
    items = _unpackb(payload)      # (msgpack's defaults: raw=False, use_list=True)
    # An ENTRY record (nearly every one a replay meets), checked field by field without the
    # general path's slicing and generator: the same checks, the same record.
    if (type(items) is list and len(items) == 4 and items[0] == _ENTRY_KIND and type(items[0]) is int
            and type(items[1]) is int and type(items[2]) is int and type(items[3]) is bytes):
        return EntryRecord(items[1], items[2], items[3])
    if not isinstance(items, list) or not items or type(items[0]) is not int:
        raise ValueError("not a tagged array")
    cls = _CLASS_OF.get(items[0])
    if cls is None:
        raise ValueError(f"unknown record kind {items[0]}")
    values = items[1:]
    types = _FIELD_TYPES[cls]
    if len(values) != len(types) or any(type(v) is not t for v, t in zip(values, types)):
        raise ValueError(f"ill-formed {cls.__name__}")
    if cls is EntriesRecord and (not values[2] or any(type(body) is not bytes for body in values[2])):
        raise ValueError("ill-formed EntriesRecord: bodies must be byte strings")
    return cls(*values)


@dataclass(frozen=True, slots=True)
class ScanResult:
    records: list[JournalRecord]
    valid_size: int               # offset just past the last good record (or start_offset)
    tail_problem: str | None      # why the scan stopped before the end of the data, if it did


def _is_zero_from(data: bytes, offset: int) -> bool:
    return data.count(0, offset) == len(data) - offset


_NONZERO_BYTE = re.compile(rb"[^\x00]")


def _next_good_record(data: bytes, start: int, record_size_max: int) -> int | None:
    """Offset of the first well-formed record at or after `start`, trying every offset (runs
    of zero bytes are skipped: a record's length field has at most three leading zero bytes);
    None if there is none. Only a journal's damaged part is searched, once, when it is opened."""
    view = memoryview(data)
    end = len(data)
    offset = start
    while offset + RECORD_HEADER.size < end:
        found = _NONZERO_BYTE.search(data, offset)
        if found is None:
            return None
        offset = max(offset, found.start() - 3)
        if offset + RECORD_HEADER.size >= end:
            return None
        length, checksum = RECORD_HEADER.unpack_from(data, offset)
        record_end = offset + RECORD_HEADER.size + length
        if 0 < length <= record_size_max and record_end <= end:
            payload = view[offset + RECORD_HEADER.size:record_end]
            if crc32c.crc32c(payload) == checksum:
                try:
                    _decode_payload(payload)
                    return offset
                except (ValueError, TypeError, msgpack.UnpackException):
                    pass
        offset += 1
    return None


def scan_records(data: bytes, *, start_offset: int = 0, record_size_max: int = RECORD_SIZE_MAX) -> ScanResult:
    """Decode the records of `data` from start_offset on. Raises JournalCorrupted for a bad
    record that is followed by more data; see the module docstring for the rules."""
    assert 0 <= start_offset <= len(data)
    records: list[JournalRecord] = []
    view = memoryview(data)
    offset = start_offset
    end = len(data)
    # Looked up once: this loop runs for every record a restart replays.
    header_size, unpack_header = RECORD_HEADER.size, RECORD_HEADER.unpack_from
    checksum_of, decode = _crc32c, _decode_payload
    # The loop advances by at least RECORD_HEADER.size + 1 per record, so it is bounded by len(data).
    while offset < end:
        if end - offset < header_size:
            if _is_zero_from(data, offset):
                break
            return ScanResult(records, offset, f"torn record header at offset {offset} ({end - offset} bytes)")
        length, checksum = unpack_header(data, offset)
        if length == 0 and _is_zero_from(data, offset):
            break                                            # preallocated space
        body_start = offset + header_size
        record_end = body_start + length
        if length > record_size_max:
            problem = f"record length {length} at offset {offset} exceeds {record_size_max}"
            if record_end < end and not _is_zero_from(data, record_end):
                raise JournalCorrupted(offset, problem)
            # No writer wrote this length: a header cut short (the rest zeros), junk, or damage.
            # Only damage has good records after it.
            good = _next_good_record(data, offset + 1, record_size_max)
            if good is not None:
                raise JournalCorrupted(offset, f"{problem}, yet a good record follows at offset {good}")
            return ScanResult(records, offset, f"torn record at offset {offset}: {problem}")
        if record_end > end:
            return ScanResult(records, offset, f"torn record at offset {offset}: {length} bytes declared, "
                                               f"{end - body_start} present")
        payload = view[body_start:record_end]
        try:
            if checksum_of(payload) != checksum:
                raise ValueError("checksum mismatch")
            record = decode(payload)
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            if record_end < end and not _is_zero_from(data, record_end):
                raise JournalCorrupted(offset, str(exc)) from None
            return ScanResult(records, offset, f"torn record at offset {offset}: last record unreadable ({exc})")
        records.append(record)
        offset = record_end
    return ScanResult(records, offset, None)
