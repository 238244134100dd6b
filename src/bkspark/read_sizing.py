"""How much a partition reads at a time: entries per read and per Arrow batch, bounded by bytes,
and read_range(), which reads a ledger's entries that way with a few reads in flight.

Entries of raw ledgers may be a few bytes, entries of stream segments half a MiB (many records
each): a fixed entry count that is right for one would make the other hold gigabytes. So a
partition asks for about READ_BYTES_TARGET bytes per read, as many entries as the entries seen so
far suggest (readBatchEntries at most, FIRST_READ_ENTRIES before any was seen), and an Arrow
batch is handed to Spark once it holds ARROW_BATCH_ENTRIES entries or ARROW_BATCH_BYTES bytes.
"""

from __future__ import annotations

import collections
import concurrent.futures
from typing import Iterator

MIB = 1024 * 1024
READ_BYTES_TARGET = 8 * MIB
FIRST_READ_ENTRIES = 64
# The JVM pays per batch as well as per row: ten times larger batches than one read's 1000
# entries cost it about a third less per row.
ARROW_BATCH_ENTRIES = 8192
ARROW_BATCH_BYTES = 32 * MIB


class ReadSizer:
    """The entry count of a partition's next read, from the sizes of the entries read so far."""

    def __init__(self, entries_max: int) -> None:
        assert entries_max >= 1
        self.entries_max = entries_max
        self.seen_count = 0
        self.seen_size = 0

    def next_count(self) -> int:
        if not self.seen_count:
            return min(self.entries_max, FIRST_READ_ENTRIES)
        average_size = max(1, self.seen_size // self.seen_count)
        return max(1, min(self.entries_max, READ_BYTES_TARGET // average_size))

    def saw(self, payloads: list[bytes]) -> None:
        self.seen_count += len(payloads)
        self.seen_size += sum(map(len, payloads))


def is_batch_full(entry_count: int, size: int) -> bool:
    """Whether an Arrow batch of this many entries and bytes should go to Spark now."""
    return entry_count >= ARROW_BATCH_ENTRIES or size >= ARROW_BATCH_BYTES


def read_range(bk, handle, first_entry_id: int, last_entry_id: int, *, entries_max: int,
               in_flight_max: int) -> Iterator[tuple[int, list[bytes] | None]]:
    """(first entry id, payloads) of consecutive reads covering first..last of an open ledger,
    in order, with up to in_flight_max reads on their way while the caller works on one; the
    payloads are None if the ledger was deleted meanwhile (and nothing follows)."""
    from bkspark import cluster
    sizer = ReadSizer(entries_max)
    next_first = first_entry_id
    with concurrent.futures.ThreadPoolExecutor(in_flight_max, thread_name_prefix="bkspark-read") as readers:
        in_flight: collections.deque = collections.deque()

        def fill() -> None:
            nonlocal next_first
            while len(in_flight) < in_flight_max and next_first <= last_entry_id:
                last = min(last_entry_id, next_first + sizer.next_count() - 1)
                in_flight.append((next_first, readers.submit(bk.run, cluster.read_entries, handle, next_first, last)))
                next_first = last + 1
        fill()
        while in_flight:
            first, pending = in_flight.popleft()
            payloads = pending.result()
            if payloads is None:
                yield first, None
                return
            sizer.saw(payloads)
            fill()
            yield first, payloads
