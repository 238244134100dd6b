"""Runs of adds for one bookie as AddBatchRequests: the rule for what may share a batch.

The writer core (client/writer.py) is the one place adds are grouped: it holds the adds for a
bookie until the driver pulls that bookie (when its connection can write), then sends one
AddBatchRequest per run of consecutive entries held for it (batch_may_grow says where a run
ends), and a lone entry as an AddRequest. Drivers frame what they are given.
"""

from __future__ import annotations

from bkcore.wire import BATCH_ENTRY_COUNT_MAX

# Bodies per batch, in bytes: well under the frame size limit.
BATCH_SIZE_MAX = 2 * 1024 * 1024


def batch_fits(count: int, size: int) -> bool:
    """Whether `count` consecutive entries of one ledger, `size` bytes of bodies, make one batch."""
    return count <= BATCH_ENTRY_COUNT_MAX and size <= BATCH_SIZE_MAX


def batch_may_grow(count: int, size: int, last_entry_id: int, entry_id: int, body_size: int) -> bool:
    """Whether a run of `count` entries (`size` bytes of bodies, the last `last_entry_id`) of
    one ledger may take entry `entry_id` of `body_size` bytes into the same batch."""
    return entry_id == last_entry_id + 1 and batch_fits(count + 1, size + body_size)
