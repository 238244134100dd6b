"""Records of a log stream, how they are packed into ledger entries, and their positions.

A stream writer batches records (each an application txid and a payload) into one ledger entry:

    entry payload = msgpack [FORMAT, flags, records_before, bytes_before, last_txid,
                             [[txid, payload], ...]]

flags bit 0 marks the end of the stream (the entry then holds no records). Bits 1-2 name the
codec that compressed the records, with DistributedLog's codes (its EnvelopedEntry's flags):
0 none, 1 LZ4. A compressed entry holds the LZ4 block of the msgpack'd record list, and after
it the list's size:

    entry payload = msgpack [FORMAT, flags, records_before, bytes_before, last_txid,
                             lz4 block of msgpack [[txid, payload], ...], its size]

A writer compresses when told to (compressionType in DistributedLog, whose default is also
none); each entry says what it holds, so readers need no setting, and an entry that LZ4 would
not make smaller is written plain. The counters stay outside the block: a recovering writer
reads them without decompressing. records_before and
bytes_before count the segment's records and payload bytes before this entry, and last_txid is
the newest txid of the stream up to and including this entry, so the last entry of a segment
alone tells a recovering writer the segment's totals. A record's position is its DLSN
(DistributedLog's name): (segment sequence number, entry id, slot in the entry), ordered
lexicographically and written "seq:entry:slot". Txids never decrease along a stream; the writer
enforces it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import cramjam
import msgpack

RECORDS_FORMAT = 1
END_OF_STREAM_FLAG = 1
CODEC_SHIFT, CODEC_MASK = 1, 0x3
# Compression codecs by name (a writer's `compression`), with DistributedLog's codes.
CODECS = {"none": 0, "lz4": 1}
_LZ4 = CODECS["lz4"]
# The largest record list a compressed entry may claim. Writers cut entries by their
# uncompressed size (512 KiB by default, and no entry may pass the 8 MiB frame), so only a
# damaged entry comes near: the bound keeps it from making a reader allocate gigabytes.
DECOMPRESSED_SIZE_MAX = 64 * 1024 * 1024
# What a compressed entry adds around its block: the block's bin header and the size (5 each
# at most). An entry compresses only if that leaves it smaller than the plain one.
_BLOCK_OVERHEAD_MAX = 10


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


def codec_code(compression: str) -> int:
    """The code of a compression codec named as a writer's `compression` option takes it."""
    try:
        return CODECS[compression]
    except (KeyError, TypeError):
        raise ValueError(f"compression {compression!r} is not one of {', '.join(CODECS)}") from None


def pack_entry(entry: StreamEntry, *, compression: str = "none") -> bytes:
    return pack_columns([r.txid for r in entry.records], [r.payload for r in entry.records],
                        records_before=entry.records_before, bytes_before=entry.bytes_before,
                        last_txid=entry.last_txid, is_end_of_stream=entry.is_end_of_stream,
                        codec=codec_code(compression))


def pack_columns(txids: list[int], payloads: list[bytes], *, records_before: int, bytes_before: int,
                 last_txid: int, is_end_of_stream: bool = False, packer: msgpack.Packer | None = None,
                 codec: int = 0) -> bytes:
    """The entry of records given as two columns (the one encoder of the format): the bytes
    pack_entry makes, with no Record object each (Spark's sink packs Arrow columns this way).
    A writer that packs entry after entry passes a packer of its own (see new_entry_packer).
    `codec` (codec_code) compresses the records, unless that would not make them smaller."""
    packer = packer if packer is not None else new_entry_packer()
    flags = END_OF_STREAM_FLAG if is_end_of_stream else 0
    header = [RECORDS_FORMAT, flags, records_before, bytes_before, last_txid]
    if codec == 0 or not txids:
        return packer.pack([*header, list(zip(txids, payloads))])
    if codec != _LZ4:
        raise ValueError(f"compression codec {codec} is not one of {sorted(CODECS.values())}")
    records = packer.pack(list(zip(txids, payloads)))
    block = memoryview(cramjam.lz4.compress_block(records, store_size=False))
    if len(block) + _BLOCK_OVERHEAD_MAX >= len(records):
        # A plain entry is its header's fields followed by the packed list: no second packing.
        return b"".join([packer.pack_array_header(len(header) + 1), *map(packer.pack, header), records])
    header[1] = flags | codec << CODEC_SHIFT
    return packer.pack([*header, block, len(records)])


def new_entry_packer() -> msgpack.Packer:
    """A packer for one writer's entries, kept by it: its buffer, once grown to an entry's size,
    is reused. packb() grows a new buffer for each entry, which made packing a 512 KiB entry of
    1 KiB records cost 1.5 us per record instead of 0.2. (Not shared between threads.)"""
    return msgpack.Packer(use_bin_type=True)


@dataclass(frozen=True, slots=True)
class EntryColumns:
    """A stream entry's records as two lists, for readers that want columns (Spark): no
    Record object each."""

    txids: list[int]
    payloads: list[bytes]
    records_before: int
    bytes_before: int
    last_txid: int
    is_end_of_stream: bool


_INT_ONLY = frozenset({int})
_BYTES_ONLY = frozenset({bytes})


def unpack_columns(payload: bytes) -> EntryColumns:
    """Decode and check a stream entry (the one decoder of the format; unpack_entry builds
    Records from this). Raises RecordFormatError for anything else.

    Readers pay this per record, so each step is one C-level pass: msgpack builds tuples (not
    lists), zip(*items, strict=True) turns the records into the two columns (and fails unless
    every record has as many fields as the first, two by the unpacking), and the type checks
    map type() over each column. Against lists, a comprehension per column and a length check
    per record, this cut a 1 KiB record's decoding from about 320 to 250 ns (msgpack's own part
    about 115)."""
    try:
        fields = msgpack.unpackb(payload, raw=False, use_list=False)
        version, flags = fields[0], int(fields[1])
        if version == RECORDS_FORMAT and flags >> CODEC_SHIFT & CODEC_MASK:
            fields = (*fields[:5], _decompressed_records(flags, fields))
        version, flags, records_before, bytes_before, last_txid, items = fields
        flags = int(flags)
        txids, payloads = map(list, zip(*items, strict=True)) if len(items) else ([], [])
    except (ValueError, TypeError, IndexError, KeyError, msgpack.UnpackException) as exc:
        raise RecordFormatError(f"not a batch of stream records: {exc}") from None
    if version != RECORDS_FORMAT:
        raise RecordFormatError(f"stream record format {version} is not {RECORDS_FORMAT}")
    if not (_INT_ONLY.issuperset(map(type, txids)) and _BYTES_ONLY.issuperset(map(type, payloads))) or \
            not all(type(n) is int for n in (records_before, bytes_before, last_txid)):
        raise RecordFormatError("stream records must be (int txid, bytes payload) with int counters")
    return EntryColumns(txids, payloads, records_before, bytes_before, last_txid, bool(flags & END_OF_STREAM_FLAG))


def _decompressed_records(flags: int, fields: tuple) -> tuple:
    """The record list of a compressed entry's fields (ValueError for anything else)."""
    codec = flags >> CODEC_SHIFT & CODEC_MASK
    if codec != _LZ4:
        raise ValueError(f"compression codec {codec} is unknown (known: {sorted(CODECS.values())})")
    if len(fields) != 7:
        raise ValueError(f"a compressed entry has 7 fields, not {len(fields)}")
    block, size = fields[5], fields[6]
    if type(block) is not bytes or type(size) is not int or not 0 < size <= DECOMPRESSED_SIZE_MAX:
        raise ValueError(f"a compressed entry's records are an LZ4 block and its size (at most "
                         f"{DECOMPRESSED_SIZE_MAX} bytes), not {type(block).__name__} and {size!r}")
    try:
        records = cramjam.lz4.decompress_block(block, output_len=size)
    except cramjam.DecompressionError as exc:
        raise ValueError(f"its LZ4 block is damaged: {exc}") from None
    if len(records) != size:
        raise ValueError(f"its LZ4 block holds {len(records)} bytes, not the {size} it claims")
    return msgpack.unpackb(records, raw=False, use_list=False)


def unpack_entry(payload: bytes) -> StreamEntry:
    columns = unpack_columns(payload)
    return StreamEntry(tuple(map(Record, columns.txids, columns.payloads)), columns.records_before,
                       columns.bytes_before, columns.last_txid, columns.is_end_of_stream)


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


class ColumnBatcher:
    """RecordBatcher's rule for records that come as columns (txids, payloads), as Spark's Arrow
    batches do: the same entries, cut with one pass over the payload sizes and list slices,
    with no Record object each."""

    def __init__(self, *, entry_size_max: int = 1024 * 1024, record_count_max: int = 10_000) -> None:
        self.entry_size_max = entry_size_max
        self.record_count_max = record_count_max
        self._txids: list[int] = []
        self._payloads: list[bytes] = []
        self._size = RecordBatcher.EMPTY_SIZE

    def add(self, txids: list[int], payloads: list[bytes]) -> list[tuple[list[int], list[bytes]]]:
        """Add records; returns the (txids, payloads) of each entry they filled, in order. The
        rest stays pending. A record larger than a whole entry is refused before any of these
        records is taken."""
        overhead, size_max, count_max = RecordBatcher.RECORD_OVERHEAD, self.entry_size_max, self.record_count_max
        largest = max(map(len, payloads), default=0)
        _check_fits_alone(largest, size_max)
        full = []
        size, count, start = self._size, len(self._txids), 0
        for index, payload in enumerate(payloads):
            size += len(payload) + overhead
            count += 1
            if count > 1 and (size > size_max or count > count_max):
                self._txids += txids[start:index]
                self._payloads += payloads[start:index]
                full.append(self.flush())
                start, size, count = index, RecordBatcher.EMPTY_SIZE + len(payload) + overhead, 1
        self._txids += txids[start:]
        self._payloads += payloads[start:]
        self._size = size
        return full

    def flush(self) -> tuple[list[int], list[bytes]]:
        """The pending records, to become one entry (empty if there are none)."""
        pending = self._txids, self._payloads
        self._txids, self._payloads, self._size = [], [], RecordBatcher.EMPTY_SIZE
        return pending

    @property
    def pending_count(self) -> int:
        return len(self._txids)


def positioned(segment: int, entry_id: int, entry: StreamEntry) -> list[PositionedRecord]:
    return [PositionedRecord(DLSN(segment, entry_id, slot), r.txid, r.payload) for slot, r in enumerate(entry.records)]
