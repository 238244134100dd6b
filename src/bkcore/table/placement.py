"""Which stream storage server a table range belongs on: its preferred owner, computed from the
live servers alone, the same way by every server and client (no leader, no assignment record).

Rendezvous (highest random weight) hashing: each (range, server) pair gets a weight from a
fixed hash, and a range's preferred owner is the live server with the highest weight for it.
Ranges spread evenly over the servers, and when a server joins, only the ranges for which it
weighs most (about 1/N of them) prefer it now; when one leaves, only its own ranges move.

BookKeeper's stream storage gets the same effect with a leader: its cluster controller
(DefaultStorageContainerController.computeIdealState) moves containers from the most to the
least loaded server and writes the assignment to ZooKeeper, which each server's
ZkStorageContainerManager watches to start and stop containers. Here nothing is written: the
servers' ephemeral registrations are the whole input, so there is no controller to elect or
fail over, and the claim nodes (bkcore.table.ownership) stay the only record of who serves a
range now.
"""

from __future__ import annotations

import hashlib
from typing import Iterable

from bkcore.table.ownership import range_name


def range_weight(index: tuple[str, str, int], server: str) -> int:
    """The pair's weight: 64 bits of a hash of both names (no process-seeded hash())."""
    digest = hashlib.blake2b(f"{range_name(index)}\x00{server}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def preferred_server(index: tuple[str, str, int], servers: Iterable[str]) -> str | None:
    """The server range `index` belongs on among `servers` (None if there are none). Ties, which
    need two equal 64-bit weights, go to the greater id, so the answer never depends on order."""
    return max(servers, key=lambda server: (range_weight(index, server), server), default=None)
