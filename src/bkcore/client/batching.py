"""Runs of adds for one bookie as AddBatchRequests: the rule for what may share a batch.

The writer core (client/writer.py) is the one place adds are grouped: it holds the adds for a
bookie until the driver pulls that bookie (when its connection can write), then sends one
AddBatchRequest per run of consecutive entries held for it (batch_may_grow says where a run
ends), and a lone entry as an AddRequest. Drivers frame what they are given.
"""

from __future__ import annotations

import bisect
import itertools

from bkcore.wire import BATCH_ENTRY_COUNT_MAX

# Bodies per batch, in bytes, and entries per batch (the wire allows BATCH_ENTRY_COUNT_MAX). A
# bookie takes a batch in one step of its loop, about 3.3 ms per MiB of 1 KiB entries on a
# 2-vCPU VM: batches of 2 MiB held it 5-7 ms (`bk bench ledger`'s pipelined load), while a
# batch's own cost is a few microseconds whatever it holds, so smaller ones cost next to nothing.
BATCH_SIZE_MAX = 256 * 1024
BATCH_ENTRIES_MAX = 1024
assert BATCH_ENTRIES_MAX <= BATCH_ENTRY_COUNT_MAX


def batch_fits(count: int, size: int) -> bool:
    """Whether `count` consecutive entries of one ledger, `size` bytes of bodies, make one batch."""
    return count <= BATCH_ENTRIES_MAX and size <= BATCH_SIZE_MAX


def batch_may_grow(count: int, size: int, last_entry_id: int, entry_id: int, body_size: int) -> bool:
    """Whether a run of `count` entries (`size` bytes of bodies, the last `last_entry_id`) of
    one ledger may take entry `entry_id` of `body_size` bytes into the same batch."""
    return entry_id == last_entry_id + 1 and batch_fits(count + 1, size + body_size)


def consecutive_batch_ends(body_sizes: list[int]) -> list[int]:
    """Where consecutive entries of these body sizes are cut into batches: the end (exclusive)
    of each, as batch_may_grow would cut them one entry at a time (a batch takes the next entry
    while it fits; one entry too large for any batch is a batch of its own), found with C loops
    over the running sizes."""
    count = len(body_sizes)
    running = list(itertools.accumulate(body_sizes))
    ends = []
    start, before = 0, 0
    while start < count:
        end = bisect.bisect_right(running, before + BATCH_SIZE_MAX, start, min(count, start + BATCH_ENTRIES_MAX))
        end = max(end, start + 1)
        ends.append(end)
        start, before = end, running[end - 1]
    return ends
