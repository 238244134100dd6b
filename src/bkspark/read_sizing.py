"""How much a partition reads at a time: entries per read and per Arrow batch, bounded by bytes,
and read_range(), which reads a ledger's entries that way with reads in flight ahead of the
caller.

Entries of raw ledgers may be a few bytes, entries of stream segments half a MiB (many records
each): a fixed entry count that is right for one would make the other hold gigabytes. So a
partition asks for about READ_BYTES_TARGET bytes per read, as many entries as the entries seen so
far suggest (readBatchEntries at most, FIRST_READ_ENTRIES before any was seen), and an Arrow
batch is handed to Spark once it holds ARROW_BATCH_ENTRIES entries or ARROW_BATCH_BYTES bytes.

Reads in flight are bounded the same way: about READ_AHEAD_BYTES of them, so that small entries
(a read of 1,000 entries of 1 KiB is 1 MiB) have as many bytes on their way as large ones. With
four reads in flight whatever their size, a partition reading 1 KiB entries from bookies on CPUs
of their own kept neither the bookies nor itself busy (bench/README.md).
"""

from __future__ import annotations

import collections
from typing import Iterator

MIB = 1024 * 1024
READ_BYTES_TARGET = 8 * MIB
FIRST_READ_ENTRIES = 64
# The JVM pays per batch as well as per row: ten times larger batches than one read's 1000
# entries cost it about a third less per row.
ARROW_BATCH_ENTRIES = 8192
ARROW_BATCH_BYTES = 32 * MIB
READ_AHEAD_BYTES = 32 * MIB


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

    def expected_size(self, count: int) -> int | None:
        """Bytes `count` entries are likely to hold; None before any entry was seen."""
        return count * self.seen_size // self.seen_count if self.seen_count else None


def is_batch_full(entry_count: int, size: int) -> bool:
    """Whether an Arrow batch of this many entries and bytes should go to Spark now."""
    return entry_count >= ARROW_BATCH_ENTRIES or size >= ARROW_BATCH_BYTES


def read_range(bk, handle, first_entry_id: int, last_entry_id: int, *, entries_max: int, in_flight_max: int,
               in_flight_bytes_max: int = READ_AHEAD_BYTES) -> Iterator[tuple[int, list[bytes] | None]]:
    """(first entry id, payloads) of consecutive reads covering first..last of an open ledger,
    in order, with reads on their way while the caller works on one: up to in_flight_max of
    them and about in_flight_bytes_max bytes (one at a time until the first has said how large
    the entries are). The payloads are None if the ledger was deleted meanwhile (and nothing
    follows). Reads run on the client's thread (bk.submit): no thread waits per read."""
    from bkspark import cluster
    sizer = ReadSizer(entries_max)
    next_first = first_entry_id
    in_flight: collections.deque = collections.deque()     # (first entry id, future, expected bytes)
    in_flight_size = 0

    def fill() -> None:
        nonlocal next_first, in_flight_size
        while len(in_flight) < in_flight_max and next_first <= last_entry_id:
            count = min(last_entry_id - next_first + 1, sizer.next_count())
            expected = sizer.expected_size(count)
            if in_flight and (expected is None or in_flight_size + expected > in_flight_bytes_max):
                return
            in_flight.append((next_first, bk.submit(cluster.read_entries, handle, next_first, next_first + count - 1),
                              expected or 0))
            in_flight_size += expected or 0
            next_first += count
    try:
        fill()
        while in_flight:
            first, pending, expected = in_flight.popleft()
            in_flight_size -= expected
            payloads = pending.result()
            if payloads is None:
                yield first, None
                return
            sizer.saw(payloads)
            fill()
            yield first, payloads
    finally:
        for _, pending, _ in in_flight:          # the caller stopped early: nobody will take these
            pending.cancel()
