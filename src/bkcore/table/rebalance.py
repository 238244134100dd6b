"""Rebalancing: a stream storage server hands the ranges it owns over to their preferred servers
when the set of live servers changes, so a server that joins gets its share of the ranges.

Each server watches `<root>/stream-storage/servers` (bkcore.table.ownership) and computes, for
every range it serves, the preferred owner among the live servers (bkcore.table.placement, which
clients compute alike). A range preferred elsewhere is handed over (Tables.hand_over: new
commands are refused with NotOwner(preferred), accepted ones finish durably, the journal is
sealed, the claim released), at most HANDOVERS_AT_ONCE_MAX at a time with HANDOVER_PAUSE_S
between batches, so a join moves a few ranges at a time instead of stalling every table at
once. The preferred server claims a range when the next request for it comes (the request path
of Tables), and a server that is not preferred for an unowned range sends its requests on
instead of claiming it, so a range once handed over is not taken back by a stale request.

Nothing here decides correctness: two servers that disagree on the live set (one's watch has
not fired yet) may each think the other should own a range, which costs a redirect or a retry,
never an answer; whoever opens a range fences its journal. A server whose metastore session is
lost, or that is stopping, starts no handover; one whose session is not confirmed at the moment
(its read lease is out) waits.

BookKeeper's ZkStorageContainerManager likewise watches an assignment and starts and stops
containers, probing every half controller interval (RECHECK_INTERVAL_S plays that part here);
where it stops a container at once, a handover here drains it first.
"""

from __future__ import annotations

import logging

from bkcore.metaops import Children, MetaCode
from bkcore.table.ownership import servers_path
from bkcore.table.placement import preferred_server

logger = logging.getLogger(__name__)
# Handovers run side by side in one batch, then the rebalancer pauses before the next batch:
# the ranges moving at once are the ones whose commands wait (a drain, a seal, and the new
# owner's replay), and the pause lets the new owners open them before more follow.
HANDOVERS_AT_ONCE_MAX = 2
HANDOVER_PAUSE_S = 0.5
# Ranges are compared with the live set at least this often even when the set did not change
# (a range claimed through an earlier session's node may be preferred elsewhere).
RECHECK_INTERVAL_S = 2.0
# After the metastore did not answer the servers' list.
REFRESH_RETRY_S = 0.5


class Rebalancer:
    """The live servers as this server last read them, and the loop that hands ranges over.

    `tables` is the service (bkcore.table.service.Tables): it says which ranges are served
    here (ranges_here()), hands one over (hand_over(index, target): whether it did), and
    whether it is stopping (is_stopping)."""

    def __init__(self, *, tables, store, root: str, server_id: str, runtime) -> None:
        self._tables = tables
        self._store = store
        self._servers_path = servers_path(root)
        self._rt = runtime
        self.server_id = server_id
        # The live servers from the newest read of the servers' list; None until the first.
        self.servers: tuple[str, ...] | None = None
        self.handover_count = 0         # ranges handed over by this server

    def preferred(self, index: tuple[str, str, int]) -> str | None:
        """Where range `index` belongs, as far as this server knows: None while it has no view
        of the live servers, or is not among them itself (it may be registering again): it
        then judges nothing, and claims as before."""
        if self.servers is None or self.server_id not in self.servers:
            return None
        return preferred_server(index, self.servers)

    def moves(self) -> list[tuple[tuple[str, str, int], str]]:
        """(range, preferred server) of each range served here that belongs elsewhere, in a
        fixed order."""
        moves = []
        for index in sorted(self._tables.ranges_here()):
            target = self.preferred(index)
            if target is not None and target != self.server_id:
                moves.append((index, target))
        return moves

    def _should_stop(self) -> bool:
        return self._tables.is_stopping or self._store.session_lost

    async def run(self) -> None:
        """Until the server stops or its session is lost: keep the view of the live servers
        current and hand over, batch by batch, what belongs elsewhere."""
        watch = None
        while not self._should_stop():
            if watch is None or watch.is_fired:
                watch = await self._refresh()
                if watch is None:
                    await self._rt.sleep(REFRESH_RETRY_S)
                    continue
            batch = self.moves()[:HANDOVERS_AT_ONCE_MAX] if self._store.session_lease_s() > 0 else []
            if batch:
                await self._hand_over(batch)
                await self._rt.sleep(HANDOVER_PAUSE_S)
            else:
                with self._rt.move_on_after(RECHECK_INTERVAL_S):
                    await watch.wait()

    async def _refresh(self):
        """Read the live servers and watch them; the watch, or None if the metastore did not
        answer (the view stays as it was)."""
        result, watch = await self._store.execute_watch(Children(self._servers_path))
        if result.code is MetaCode.OK:
            servers = tuple(sorted(result.children))
        elif result.code is MetaCode.NO_NODE:
            servers = ()
        else:
            return None
        if servers != self.servers:
            logger.info("stream storage server %s sees servers %s", self.server_id, ", ".join(servers))
        self.servers = servers
        return watch

    async def _hand_over(self, batch: list[tuple[tuple[str, str, int], str]]) -> None:
        async def hand_over(index: tuple[str, str, int], target: str) -> None:
            if await self._tables.hand_over(index, target):
                self.handover_count += 1

        async with self._rt.open_nursery() as nursery:
            for index, target in batch:
                if self._should_stop():
                    break
                nursery.start_soon(hand_over, index, target)
