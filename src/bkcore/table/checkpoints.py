"""The record format of a table range's checkpoints, written by its owner and read back by the
next owner (bkcore.table.range) and by read-only snapshot readers (bkspark.table_snapshot).

A checkpoint is a run of records in the range's checkpoint stream:

    ["checkpoint", journal_position, revision]      the header: the state after that journal record
    ["chunk", [[index_key, value], ...]]            about CHECKPOINT_CHUNK_BYTES of index pairs each
    ["end", crc32c of the chunk records, chunk count]

A checkpoint counts only when its end record matches the chunks read since its header; a torn
one (its owner died while writing it) or one that fails its checksum is skipped. Records that
are not msgpack lists of the expected shape are bad input from the disk: they end the checkpoint
being read, nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import crc32c
import msgpack

from bkcore.stream.records import DLSN

CHECKPOINT_CHUNK_BYTES = 256 * 1024
CHECKPOINT_CHUNKS_PER_WRITE = 8


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    header: DLSN                 # where the checkpoint starts in the checkpoint stream
    journal_position: DLSN | None  # the last journal record it includes (None: before the first)
    revision: int

    @property
    def replay_from(self) -> DLSN | None:
        """The first journal position to replay on top of this checkpoint (None: the start)."""
        position = self.journal_position
        return None if position is None else DLSN(position.segment, position.entry_id, position.slot + 1)


def checkpoint_stream_name(journal_name: str) -> str:
    return journal_name + "~checkpoints"


# -- writing ------------------------------------------------------------------------------------

def header_record(journal_position: list | None, revision: int) -> bytes:
    return msgpack.packb(["checkpoint", journal_position, revision])


def end_record(checksum: int, chunk_count: int) -> bytes:
    return msgpack.packb(["end", checksum, chunk_count])


def chunk_groups(items: Iterable[tuple[bytes, bytes]]) -> Iterator[list[bytes]]:
    """The chunk records of `items` (each ["chunk", pairs], about CHECKPOINT_CHUNK_BYTES), a few
    at a time, so that the writer gets them while the rest are still being read. At least one
    chunk, even for an empty index."""
    group, pairs, size, chunk_count = [], [], 0, 0
    for key, value in items:
        pairs.append([key, value])
        size += len(key) + len(value) + 8
        if size >= CHECKPOINT_CHUNK_BYTES:
            group.append(msgpack.packb(["chunk", pairs], use_bin_type=True))
            pairs, size = [], 0
            if len(group) >= CHECKPOINT_CHUNKS_PER_WRITE:
                chunk_count += len(group)
                yield group
                group = []
    if pairs or not (group or chunk_count):
        group.append(msgpack.packb(["chunk", pairs], use_bin_type=True))
    if group:
        yield group


# -- reading ------------------------------------------------------------------------------------

class CheckpointParser:
    """Feed it the checkpoint stream's records in order; feed() returns each checkpoint that
    ends complete and intact, as (info, {index_key: value}). Checkpoints `wants(info)` refuses
    are skipped without keeping their chunks (a reader that needs an older one)."""

    def __init__(self, wants: Callable[[CheckpointInfo], bool] = lambda info: True) -> None:
        self._wants = wants
        # The checkpoint being read: [info, chunk count from an old-style header, chunks, crc].
        # None between checkpoints, and after a bad record until the next header.
        self._current: list | None = None

    def feed(self, position: DLSN, payload: bytes) -> tuple[CheckpointInfo, dict[bytes, bytes]] | None:
        try:
            item = msgpack.unpackb(payload, raw=False)
            return self._on_item(position, payload, item)
        except (ValueError, TypeError, msgpack.UnpackException):
            self._current = None
            return None

    def _on_item(self, position: DLSN, payload: bytes, item) -> tuple[CheckpointInfo, dict] | None:
        kind = item[0] if isinstance(item, list) and item else None
        current = self._current
        if kind == "checkpoint":
            # [kind, position, revision] (older checkpoints also had the chunk count here)
            _, journal_position, revision, *chunk_count = item
            info = CheckpointInfo(position, DLSN(*journal_position) if journal_position else None, revision)
            self._current = [info, chunk_count, [], 0] if self._wants(info) else None
        elif kind == "chunk" and current is not None:
            current[2].append(item[1])
            current[3] = crc32c.crc32c(payload, current[3])
        elif kind == "end" and current is not None:
            self._current = None
            info, chunk_count, chunks, checksum = current
            chunk_count = chunk_count or item[2:]
            if [len(chunks)] == chunk_count and checksum == item[1]:
                return info, {key: value for chunk in chunks for key, value in chunk}
        return None
