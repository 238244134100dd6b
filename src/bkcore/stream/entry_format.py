"""The bytes of a stream entry: a batch of records and the segment's counters before it.

Writers write format 2, records as columns:

    entry payload = msgpack [2, flags, records_before, bytes_before, last_txid, count, body]
    body          = count txids (int64) | count + 1 payload offsets (int32, the first 0, the
                    last the payloads' total size) | the payloads end to end

all little-endian. A reader that builds columns (Spark's Arrow) takes the three parts as they
are (unpack_buffers), with no Python object per record; a writer that holds columns packs them
the same way (pack_buffers). Format 1, a msgpack list of [txid, payload] per record, was written
before 2026-11-28 and is still read:

    entry payload = msgpack [1, flags, records_before, bytes_before, last_txid, [[txid, payload], ...]]

flags bit 0 marks the end of the stream (the entry then holds no records). In format 2, bits
1-2 name the codec that compressed the body, with DistributedLog's codes (its EnvelopedEntry's
flags): 0 none, 1 LZ4. A compressed entry holds the body's LZ4 block and then the body's size:

    entry payload = msgpack [2, flags, records_before, bytes_before, last_txid, count, block, size]

A writer compresses when told to (compressionType in DistributedLog, whose default is also
none); each entry says what it holds, so readers need no setting, and an entry that LZ4 would
not make smaller is written plain. The counters stay outside the block: a recovering writer
reads them without decompressing. records_before and bytes_before count the segment's records
and payload bytes before this entry, and last_txid is the newest txid of the stream up to and
including this entry, so the last entry of a segment alone tells a recovering writer the
segment's totals.
"""

from __future__ import annotations

import array
import itertools
import operator
import sys
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import cramjam
import msgpack

from bkcore.stream.records import Record, StreamEntry

LIST_FORMAT = 1            # read, no longer written
COLUMNS_FORMAT = 2
END_OF_STREAM_FLAG = 1
CODEC_SHIFT, CODEC_MASK = 1, 0x3
# Compression codecs by name (a writer's `compression`), with DistributedLog's codes.
CODECS = {"none": 0, "lz4": 1}
_LZ4 = CODECS["lz4"]
# The largest body a compressed entry may claim. Writers cut entries by their uncompressed size
# (512 KiB by default, and no entry may pass the 8 MiB frame), so only a damaged entry comes
# near: the bound keeps it from making a reader allocate gigabytes.
DECOMPRESSED_SIZE_MAX = 64 * 1024 * 1024
# What a compressed entry adds around its block: the block's bin header and the size (5 each
# at most). An entry compresses only if that leaves it smaller than the plain one.
_BLOCK_OVERHEAD_MAX = 10
_TXID_BYTES, _OFFSET_BYTES = 8, 4
# Entries smaller than this are packed and decoded whole: copying their body costs less than
# handling the fields around it one by one (checking an entry of one 100-byte record took 2-3 us
# whole, 4-6 fields first). Larger entries' bodies are never copied but into the entry.
_BODY_COPY_SIZE_MAX = 16 * 1024
_NATIVE_IS_LITTLE = sys.byteorder == "little"


class RecordFormatError(Exception):
    """An entry that is not a batch of stream records (or of an unknown format version)."""


def codec_code(compression: str) -> int:
    """The code of a compression codec named as a writer's `compression` option takes it."""
    try:
        return CODECS[compression]
    except (KeyError, TypeError):
        raise ValueError(f"compression {compression!r} is not one of {', '.join(CODECS)}") from None


def new_entry_packer() -> msgpack.Packer:
    """A packer for one writer's entries, kept by it (its buffer, once grown, is reused; not
    shared between threads)."""
    return msgpack.Packer(use_bin_type=True)


# -- writing -----------------------------------------------------------------------------------


def pack_entry(entry: StreamEntry, *, compression: str = "none") -> bytes:
    return pack_columns([r.txid for r in entry.records], [r.payload for r in entry.records],
                        records_before=entry.records_before, bytes_before=entry.bytes_before,
                        last_txid=entry.last_txid, is_end_of_stream=entry.is_end_of_stream,
                        codec=codec_code(compression))


def pack_columns(txids: list[int], payloads: list[bytes], *, records_before: int, bytes_before: int,
                 last_txid: int, is_end_of_stream: bool = False, packer: msgpack.Packer | None = None,
                 codec: int = 0) -> bytes:
    """The entry of records given as two lists, as pack_buffers packs their columns (the
    payloads are copied once, straight into the entry)."""
    offsets = array.array("i", [0])
    offsets.extend(itertools.accumulate(map(len, payloads)))
    count = len(txids)
    return _pack(count, [_little_endian(array.array("q", txids)), _little_endian(offsets), *payloads],
                 count * (_TXID_BYTES + _OFFSET_BYTES) + _OFFSET_BYTES + offsets[-1],
                 records_before=records_before, bytes_before=bytes_before, last_txid=last_txid,
                 is_end_of_stream=is_end_of_stream, packer=packer, codec=codec)


def pack_buffers(count: int, txids, offsets, values, *, records_before: int, bytes_before: int, last_txid: int,
                 is_end_of_stream: bool = False, packer: msgpack.Packer | None = None, codec: int = 0) -> bytes:
    """The entry of `count` records given as format 2's three parts (bytes-like, little-endian:
    count int64 txids, count + 1 int32 offsets from 0, the payloads end to end), the one encoder
    of stream entries. `codec` (codec_code) compresses the body, unless that would not make the
    entry smaller. The parts are copied once, into the entry."""
    parts = [txids, offsets, values]
    return _pack(count, parts, sum(memoryview(part).nbytes for part in parts), records_before=records_before,
                 bytes_before=bytes_before, last_txid=last_txid, is_end_of_stream=is_end_of_stream, packer=packer,
                 codec=codec)


def _pack(count: int, parts: list, size: int, *, records_before: int, bytes_before: int, last_txid: int,
          is_end_of_stream: bool, packer: msgpack.Packer | None, codec: int) -> bytes:
    """The entry whose body is `parts` end to end (bytes-like, `size` bytes in all)."""
    packer = packer if packer is not None else new_entry_packer()
    flags = END_OF_STREAM_FLAG if is_end_of_stream else 0
    header = [COLUMNS_FORMAT, flags, records_before, bytes_before, last_txid, count]
    if codec and count:
        if codec != _LZ4:
            raise ValueError(f"compression codec {codec} is not one of {sorted(CODECS.values())}")
        body = b"".join(parts)
        block = memoryview(cramjam.lz4.compress_block(body, store_size=False))
        if len(block) + _BLOCK_OVERHEAD_MAX < len(body):
            header[1] = flags | codec << CODEC_SHIFT
            return packer.pack([*header, block, len(body)])
    if size < _BODY_COPY_SIZE_MAX:      # small: one more copy costs less than packing field by field
        return packer.pack([*header, b"".join(parts)])
    return b"".join([packer.pack_array_header(len(header) + 1), *map(packer.pack, header), _bin_header(size), *parts])


def _bin_header(size: int) -> bytes:
    """msgpack's header of a bin of `size` bytes (bin 8, 16 or 32)."""
    if size < 1 << 8:
        return b"\xc4" + size.to_bytes(1, "big")
    if size < 1 << 16:
        return b"\xc5" + size.to_bytes(2, "big")
    return b"\xc6" + size.to_bytes(4, "big")


def _little_endian(values: array.array) -> array.array:
    if not _NATIVE_IS_LITTLE:
        values.byteswap()
    return values


# -- reading -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EntryColumns:
    """A stream entry's records as two lists, for readers that want columns: no Record object
    each."""

    txids: list[int]
    payloads: list[bytes]
    records_before: int
    bytes_before: int
    last_txid: int
    is_end_of_stream: bool


@dataclass(frozen=True, slots=True)
class EntryBuffers:
    """A stream entry's records as format 2's three parts (little-endian memoryviews of bytes),
    checked: `count` txids, count + 1 offsets rising from 0 to len(values), the payloads."""

    count: int
    txids: memoryview
    offsets: memoryview
    values: memoryview
    records_before: int
    bytes_before: int
    last_txid: int
    is_end_of_stream: bool


def unpack_entry(payload: bytes) -> StreamEntry:
    columns = unpack_columns(payload)
    return StreamEntry(tuple(map(Record, columns.txids, columns.payloads)), columns.records_before,
                       columns.bytes_before, columns.last_txid, columns.is_end_of_stream)


def unpack_columns(payload: bytes) -> EntryColumns:
    """Decode and check a stream entry of either format. Raises RecordFormatError for anything
    else."""
    parts = _parts(payload)
    if isinstance(parts, EntryColumns):
        return parts
    source, values_at = parts.source, parts.body_at + parts.values_at
    if type(source) is not bytes:
        source = bytes(source)            # a decompressed body: its slices must be bytes
    txids = _ints("q", memoryview(source)[parts.body_at:parts.body_at + parts.count * _TXID_BYTES])
    bounds = list(map(operator.add, parts.offsets, itertools.repeat(values_at)))     # within source
    payloads = list(map(source.__getitem__, map(slice, bounds, itertools.islice(bounds, 1, None))))
    return EntryColumns(txids.tolist(), payloads, parts.records_before, parts.bytes_before, parts.last_txid,
                        parts.is_end_of_stream)


def unpack_buffers(payload: bytes, *, allocate: Callable[[int], Any] | None = None) -> EntryBuffers:
    """Decode and check a stream entry as format 2's parts, views of the entry itself or of its
    decompressed body, without a Python object per record. `allocate(size)` gives the writable
    buffer a compressed body is decompressed into (Spark's reader gives Arrow's memory pool,
    which reuses what it frees: fresh memory for each entry cost page faults). A format 1 entry
    is converted. Raises RecordFormatError for anything else."""
    parts = _parts(payload, allocate)
    if isinstance(parts, EntryColumns):
        parts = _parts(pack_columns(parts.txids, parts.payloads, records_before=parts.records_before,
                                    bytes_before=parts.bytes_before, last_txid=parts.last_txid,
                                    is_end_of_stream=parts.is_end_of_stream))
    body = memoryview(parts.source)[parts.body_at:]
    offsets_at = parts.count * _TXID_BYTES
    return EntryBuffers(parts.count, body[:offsets_at], body[offsets_at:parts.values_at], body[parts.values_at:],
                        parts.records_before, parts.bytes_before, parts.last_txid, parts.is_end_of_stream)


class _Parts(NamedTuple):
    """A checked format 2 entry: its body is source[body_at:], the txids first, then the
    offsets (also read into `offsets`), then from values_at on (within the body) the payloads."""

    count: int
    source: bytes | bytearray | Any     # the entry, or its decompressed body (any buffer)
    body_at: int
    values_at: int           # within the body
    offsets: array.array
    records_before: int
    bytes_before: int
    last_txid: int
    is_end_of_stream: bool


# A plain format 2 entry's fields before its body take at most this many bytes: the array's
# header, six ints of at most 9 bytes each, and the body's bin header.
_HEADER_SIZE_MAX = 1 + 6 * 9 + 5


def _parts(payload: bytes, allocate: Callable[[int], Any] | None = None) -> _Parts | EntryColumns:
    """The entry checked: a format 1 entry as columns, a format 2 one as parts. A plain format 2
    entry's body is not copied: its fields before it are read from the first bytes alone."""
    payload = payload if type(payload) is bytes else bytes(payload)
    if len(payload) < _BODY_COPY_SIZE_MAX:
        return _whole_parts(payload, allocate)
    try:
        head = msgpack.Unpacker(raw=False)
        head.feed(payload[:_HEADER_SIZE_MAX])
        field_count = head.read_array_header()
        fields = [head.unpack() for _ in range(min(field_count, 6))]
        body_at = head.tell()
    except (ValueError, TypeError, msgpack.UnpackException):
        fields = field_count = None        # not a plain format 2 entry: decoded whole below
    if fields and fields[0] == COLUMNS_FORMAT and field_count == 7 and type(fields[1]) is int and \
            not fields[1] >> CODEC_SHIFT & CODEC_MASK:
        size_bytes = {0xc4: 1, 0xc5: 2, 0xc6: 4}.get(payload[body_at]) if body_at < len(payload) else None
        if size_bytes is None:
            raise RecordFormatError("not a batch of stream records: a format 2 entry's records are a bin")
        size = int.from_bytes(payload[body_at + 1:body_at + 1 + size_bytes], "big")
        body_at += 1 + size_bytes
        if body_at + size != len(payload):
            raise RecordFormatError(f"not a batch of stream records: a body of {size} bytes in "
                                    f"{len(payload) - body_at}")
        return _checked(fields, payload, body_at)
    return _whole_parts(payload, allocate)


def _whole_parts(payload: bytes, allocate: Callable[[int], Any] | None) -> _Parts | EntryColumns:
    """_parts by decoding the whole entry at once (its body copied out of it)."""
    fields = _fields(payload)
    if fields[0] == LIST_FORMAT:
        return _list_columns(fields)
    try:
        if len(fields) not in (7, 8):
            raise ValueError(f"an entry of format 2 has 7 or 8 fields, not {len(fields)}")
        flags, body, size = fields[1], fields[6], fields[7:]
        codec = flags >> CODEC_SHIFT & CODEC_MASK if type(flags) is int else -1
        if codec < 0 or (codec == 0) != (not size):
            raise ValueError(f"flags {flags!r} do not match {len(fields)} fields")
        if codec:
            body = _decompressed(codec, body, size[0], allocate)
        elif not isinstance(body, bytes):
            raise ValueError(f"records are a body of bytes, not {type(body).__name__}")
    except (ValueError, TypeError) as exc:
        raise RecordFormatError(f"not a batch of stream records: {exc}") from None
    return _checked(fields, body, 0)


def _fields(payload: bytes) -> tuple:
    try:
        fields = msgpack.unpackb(payload, raw=False, use_list=False)
        if type(fields) is not tuple or not fields:
            raise ValueError(f"an entry is a list of fields, not {type(fields).__name__}")
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise RecordFormatError(f"not a batch of stream records: {exc}") from None
    if fields[0] not in (LIST_FORMAT, COLUMNS_FORMAT):
        raise RecordFormatError(f"stream record format {fields[0]!r} is not {LIST_FORMAT} or {COLUMNS_FORMAT}")
    return fields


def _checked(fields, source: bytes, body_at: int) -> _Parts:
    """Format 2's fields with the body at source[body_at:], checked."""
    _, flags, records_before, bytes_before, last_txid, count = fields[:6]
    body_size = len(source) - body_at
    if type(count) is not int or count < 0:
        raise RecordFormatError(f"not a batch of stream records: a count of {count!r}")
    values_at = count * (_TXID_BYTES + _OFFSET_BYTES) + _OFFSET_BYTES
    if body_size < values_at:
        raise RecordFormatError(f"not a batch of stream records: a body of {body_size} bytes is too short "
                                f"for {count} records")
    offsets = _ints("i", memoryview(source)[body_at + count * _TXID_BYTES:body_at + values_at])
    if offsets[0] != 0 or offsets[-1] != body_size - values_at or \
            not all(map(operator.le, offsets, itertools.islice(offsets, 1, None))):
        raise RecordFormatError("not a batch of stream records: the payload offsets do not rise from 0 to "
                                "the payloads' size")
    if not (type(records_before) is int and type(bytes_before) is int and type(last_txid) is int):
        raise RecordFormatError("a stream entry's counters are ints")
    return _Parts(count, source, body_at, values_at, offsets, records_before, bytes_before, last_txid,
                  bool(flags & END_OF_STREAM_FLAG))


def _decompressed(codec: int, block, size, allocate: Callable[[int], Any] | None):
    """A compressed entry's body, in a writable buffer of `allocate`'s (a bytearray by
    default). ValueError for anything else."""
    if codec != _LZ4:
        raise ValueError(f"compression codec {codec} is unknown (known: {sorted(CODECS.values())})")
    if type(block) is not bytes or type(size) is not int or not 0 < size <= DECOMPRESSED_SIZE_MAX:
        raise ValueError(f"a compressed entry's body is an LZ4 block and its size (at most "
                         f"{DECOMPRESSED_SIZE_MAX} bytes), not {type(block).__name__} and {size!r}")
    body = allocate(size) if allocate is not None else bytearray(size)
    try:
        written = cramjam.lz4.decompress_block_into(block, body)
    except cramjam.DecompressionError as exc:
        raise ValueError(f"its LZ4 block is damaged: {exc}") from None
    if written != size:
        raise ValueError(f"its LZ4 block holds {written} bytes, not the {size} it claims")
    return body


def _ints(typecode: str, data: memoryview) -> array.array:
    values = array.array(typecode)
    values.frombytes(data)
    return _little_endian(values)


_INT_ONLY = frozenset({int})
_BYTES_ONLY = frozenset({bytes})


def _list_columns(fields: tuple) -> EntryColumns:
    """Format 1's fields, checked, as columns.

    Readers pay this per record, so each step is one C-level pass: msgpack built tuples (not
    lists), zip(*items, strict=True) turns the records into the two columns (and fails unless
    every record has as many fields as the first, two by the unpacking), and the type checks
    map type() over each column."""
    try:
        _, flags, records_before, bytes_before, last_txid, items = fields
        txids, payloads = map(list, zip(*items, strict=True)) if len(items) else ([], [])
        flags = int(flags)
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise RecordFormatError(f"not a batch of stream records: {exc}") from None
    if not (_INT_ONLY.issuperset(map(type, txids)) and _BYTES_ONLY.issuperset(map(type, payloads))) or \
            not all(type(n) is int for n in (records_before, bytes_before, last_txid)):
        raise RecordFormatError("stream records must be (int txid, bytes payload) with int counters")
    return EntryColumns(txids, payloads, records_before, bytes_before, last_txid, bool(flags & END_OF_STREAM_FLAG))
