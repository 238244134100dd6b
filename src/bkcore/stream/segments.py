"""Stream and segment metadata: what the metastore holds about a log stream, and queries on it.

    <root>/streams/<namespace>                      namespace node: default StreamSettings
    <root>/streams/<namespace>/<stream>             stream node: StreamMetadata
    <root>/streams/<namespace>/<stream>/segments/<seqno:010d>   one SegmentMetadata each
    <root>/streams/<namespace>/<stream>/cursors/<name>          a cursor's committed DLSN
    <root>/stream-ids/<id>                          "<namespace>/<stream>" (ids are name hashes)

A stream is a sequence of segments, each one ledger. Only the last segment may be in progress;
a completed segment knows its last entry and txid; a truncated one has had its ledger deleted.
Every value is msgpack with a format number, changed by compare-and-set like ledger metadata.
"""

from __future__ import annotations

import bisect
import hashlib
import dataclasses
from dataclasses import dataclass
from enum import Enum
from typing import Callable, TypeVar

import msgpack

from bkcore.stream.records import DLSN

T = TypeVar("T")

SEGMENT_FORMAT = 1
STREAM_FORMAT = 1


class SegmentState(Enum):
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    TRUNCATED = "truncated"


class StreamMetadataError(Exception):
    pass



def decode_record(data: bytes, *, expected_format: int, what: str, build: Callable[[list], T]) -> T:
    """build(fields) of a msgpack metadata record [format, fields...]. Another format, bytes that
    are not such a record, or fields build() cannot use raise StreamMetadataError naming `what`:
    metadata from the store is input, never trusted."""
    try:
        fmt, *values = msgpack.unpackb(data)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise StreamMetadataError(f"unreadable {what}: {exc}") from None
    if fmt != expected_format:
        raise StreamMetadataError(f"{what} format {fmt} is not {expected_format}")
    try:
        return build(values)
    except (ValueError, TypeError) as exc:
        raise StreamMetadataError(f"unreadable {what}: {exc}") from None

@dataclass(frozen=True, slots=True)
class StreamSettings:
    ensemble_size: int = 3
    write_quorum_size: int = 3
    ack_quorum_size: int = 2
    segment_rolling_size: int = 128 * 1024 * 1024     # bytes before a new segment
    segment_rolling_interval_s: int = 3600            # seconds before a new segment
    retention_s: int = 0                              # 0: keep segments until truncated
    retention_size: int = 0                           # 0: no size limit
    retention_keeps_unconsumed: bool = False          # retention spares what a cursor has not read
    table_ranges: int = 4                             # hash ranges when the stream is used as a table

    def __post_init__(self) -> None:
        if not self.ensemble_size >= self.write_quorum_size >= self.ack_quorum_size >= 1:
            raise ValueError("stream settings need ensemble >= write quorum >= ack quorum >= 1")
        if not 1 <= self.table_ranges <= 1024:
            raise ValueError("a table has 1 to 1024 ranges")
        if min(self.segment_rolling_size, self.segment_rolling_interval_s) <= 0 or \
                min(self.retention_s, self.retention_size) < 0:
            raise ValueError("rolling limits must be positive and retention limits non-negative")

    def to_list(self) -> list:
        return [getattr(self, f.name) for f in dataclasses.fields(self)]

    @classmethod
    def from_list(cls, values: list) -> StreamSettings:
        return cls(*values)


@dataclass(frozen=True, slots=True)
class SegmentMetadata:
    seqno: int
    ledger_id: int
    state: SegmentState = SegmentState.IN_PROGRESS
    first_txid: int = -1                 # -1: no record yet
    last_txid: int = -1
    last_entry_id: int = -1              # for completed segments
    record_count: int = 0
    size: int = 0                        # bytes of record payloads
    ctime_s: int = 0
    is_end_of_stream: bool = False
    version: int = -1

    def to_bytes(self) -> bytes:
        return msgpack.packb([SEGMENT_FORMAT, self.seqno, self.ledger_id, self.state.value, self.first_txid,
                              self.last_txid, self.last_entry_id, self.record_count, self.size, self.ctime_s,
                              self.is_end_of_stream])

    @classmethod
    def from_bytes(cls, data: bytes, *, version: int) -> SegmentMetadata:
        def build(values: list) -> SegmentMetadata:
            seqno, ledger_id, state, *rest = values
            return cls(seqno, ledger_id, SegmentState(state), *rest, version=version)
        return decode_record(data, expected_format=SEGMENT_FORMAT, what="segment metadata", build=build)


@dataclass(frozen=True, slots=True)
class StreamMetadata:
    settings: StreamSettings
    truncated_to: DLSN = DLSN(0, 0, 0)     # records before it are gone (or going)
    version: int = -1

    def to_bytes(self) -> bytes:
        return msgpack.packb([STREAM_FORMAT, self.settings.to_list(), list(self.truncated_to)])

    @classmethod
    def from_bytes(cls, data: bytes, *, version: int) -> StreamMetadata:
        def build(values: list) -> StreamMetadata:
            settings, truncated_to = values
            return cls(StreamSettings.from_list(settings), DLSN(*truncated_to), version=version)
        return decode_record(data, expected_format=STREAM_FORMAT, what="stream metadata", build=build)


@dataclass(frozen=True, slots=True)
class StreamLayout:
    root: str = "/ledgers"

    def namespace_path(self, namespace: str) -> str:
        return f"{self.root}/streams/{_check_name(namespace)}"

    def stream_path(self, namespace: str, stream: str) -> str:
        return f"{self.namespace_path(namespace)}/{_check_name(stream)}"

    def segments_path(self, namespace: str, stream: str) -> str:
        return f"{self.stream_path(namespace, stream)}/segments"

    def segment_path(self, namespace: str, stream: str, seqno: int) -> str:
        return f"{self.segments_path(namespace, stream)}/{seqno:010d}"

    def stream_id_path(self, stream_id: int) -> str:
        return f"{self.root}/stream-ids/{stream_id}"

    def cursors_path(self, namespace: str, stream: str) -> str:
        return f"{self.stream_path(namespace, stream)}/cursors"

    def cursor_path(self, namespace: str, stream: str, cursor: str) -> str:
        return f"{self.cursors_path(namespace, stream)}/{_check_name(cursor)}"


def stream_id_of(namespace: str, stream: str) -> int:
    """A stream's numeric id (what gRPC clients route by): a 63-bit hash of its full name."""
    digest = hashlib.blake2b(f"{namespace}/{stream}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & (2**63 - 1)


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not name or "/" in name or name in (".", "..") or len(name) > 200 \
            or not name.isprintable():
        raise ValueError(f"{name!r} is not a valid name (1 to 200 printable characters, no '/')")
    return name


def segment_for_txid(segments: list[SegmentMetadata], txid: int) -> SegmentMetadata | None:
    """The first live segment that can hold a record with txid >= `txid` (binary search over
    segments ordered by seqno, whose txids never decrease); None if every segment ends before."""
    live = [s for s in segments if s.state is SegmentState.IN_PROGRESS
            or (s.state is SegmentState.COMPLETED and s.record_count > 0)]
    index = bisect.bisect_left([s.last_txid if s.state is SegmentState.COMPLETED else 2**63 for s in live], txid)
    return live[index] if index < len(live) else None


def stream_last_txid(segments: list[SegmentMetadata]) -> int:
    """The newest txid in sealed segments (-1 if none): a new writer's txids start above it."""
    return max((s.last_txid for s in segments if s.state is not SegmentState.IN_PROGRESS), default=-1)


def start_of(segments: list[SegmentMetadata], position: DLSN) -> DLSN | None:
    """Where reading from `position` begins: the position itself if its segment is live, else
    the start of the next live segment; None if no live segment is at or after it."""
    for segment in segments:
        if segment.seqno >= position.segment and segment.state is not SegmentState.TRUNCATED:
            return position if segment.seqno == position.segment else DLSN(segment.seqno, 0, 0)
    return None


def segments_before(segments: list[SegmentMetadata], position: DLSN) -> list[SegmentMetadata]:
    """Completed segments wholly before `position`: truncate(position) deletes them."""
    return [s for s in segments if s.state is SegmentState.COMPLETED and s.seqno < position.segment]


def segments_past_retention(segments: list[SegmentMetadata], settings: StreamSettings, *, now_s: int,
                            protect_from: DLSN | None = None) -> list[SegmentMetadata]:
    """Completed segments that retention lets go: older than retention_s, or beyond
    retention_size counted from the newest segment. Segments at or after `protect_from` (what an
    active cursor has not consumed yet) stay; so does the in-progress segment."""
    completed = [s for s in segments if s.state is SegmentState.COMPLETED
                 and (protect_from is None or s.seqno < protect_from.segment)]
    retire = set()
    if settings.retention_s:
        retire.update(s.seqno for s in completed if now_s - s.ctime_s > settings.retention_s)
    if settings.retention_size:
        kept_size = 0
        for segment in sorted(segments, key=lambda s: -s.seqno):
            kept_size += segment.size
            if kept_size > settings.retention_size:
                retire.add(segment.seqno)
    return [s for s in completed if s.seqno in retire]
