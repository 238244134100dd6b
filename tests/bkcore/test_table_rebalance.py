"""bkcore.table.rebalance over the memory:// metastore, with a stand-in for the table service
(the service's own handover is driven with real servers in tests/streamstorage/
test_rebalance.py): which ranges a server hands over, how many at a time, and when it starts
none."""

import trio

from bkcore.table import rebalance
from bkcore.table.ownership import RangeOwnership
from bkcore.table.placement import preferred_server
from bkcore.table.rebalance import HANDOVERS_AT_ONCE_MAX, Rebalancer
from bkmetastore.memory_store import forget_memory_servers
from bkmetastore.uri import open_metastore
from bktransports.trio_runtime import TRIO_RUNTIME

ROOT = "/ledgers"
INDEXES = [("ns", "table", i) for i in range(12)]


class ServedRanges:
    """What the rebalancer asks of Tables, over a set of ranges; a handover takes a while."""

    def __init__(self, indexes) -> None:
        self.served = set(indexes)
        self.is_stopping = False
        self.handed_over: list[tuple] = []
        self.at_once = self.at_once_max = 0

    def ranges_here(self):
        return list(self.served)

    async def hand_over(self, index, target) -> bool:
        self.at_once += 1
        self.at_once_max = max(self.at_once_max, self.at_once)
        await trio.sleep(0.05)
        self.served.discard(index)
        self.handed_over.append((index, target))
        self.at_once -= 1
        return True


async def registered(uri: str, *servers: str):
    forget_memory_servers()
    store = await open_metastore(uri)
    for server in servers:
        await RangeOwnership(store, ROOT, server).register()
    return store


async def test_a_server_hands_over_what_prefers_another_a_batch_at_a_time(monkeypatch):
    monkeypatch.setattr(rebalance, "HANDOVER_PAUSE_S", 0.05)
    async with await registered("memory://rebalance-batches", "s1", "s2", "s3") as store:
        tables = ServedRanges(INDEXES)
        rebalancer = Rebalancer(tables=tables, store=store, root=ROOT, server_id="s1", runtime=TRIO_RUNTIME)
        expected = [(i, preferred_server(i, ["s1", "s2", "s3"])) for i in INDEXES
                    if preferred_server(i, ["s1", "s2", "s3"]) != "s1"]
        assert len(expected) > HANDOVERS_AT_ONCE_MAX
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(rebalancer.run)
                while len(tables.handed_over) < len(expected):
                    await trio.sleep(0.01)
                await trio.sleep(0.2)                    # and nothing more
                nursery.cancel_scope.cancel()
        assert sorted(tables.handed_over) == expected
        assert tables.at_once_max == HANDOVERS_AT_ONCE_MAX
        assert rebalancer.handover_count == len(expected)
        assert rebalancer.moves() == []


async def test_a_join_is_seen_through_the_watch():
    async with await registered("memory://rebalance-join", "s1") as store:
        tables = ServedRanges(INDEXES)
        rebalancer = Rebalancer(tables=tables, store=store, root=ROOT, server_id="s1", runtime=TRIO_RUNTIME)
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(rebalancer.run)
                while rebalancer.servers != ("s1",):
                    await trio.sleep(0.01)
                assert tables.handed_over == []
                await RangeOwnership(store, ROOT, "s2").register()
                while rebalancer.moves() or not tables.handed_over:
                    await trio.sleep(0.01)
                nursery.cancel_scope.cancel()
        assert {target for _, target in tables.handed_over} == {"s2"}


async def test_a_server_that_is_stopping_or_lost_its_session_or_is_not_registered_hands_nothing_over():
    async with await registered("memory://rebalance-stop", "s1", "s2") as store:
        stopping = ServedRanges(INDEXES)
        stopping.is_stopping = True
        with trio.fail_after(5):
            await Rebalancer(tables=stopping, store=store, root=ROOT, server_id="s1", runtime=TRIO_RUNTIME).run()
        assert stopping.handed_over == []

        unregistered = ServedRanges(INDEXES)
        rebalancer = Rebalancer(tables=unregistered, store=store, root=ROOT, server_id="s9", runtime=TRIO_RUNTIME)
        with trio.move_on_after(0.5):
            await rebalancer.run()
        assert rebalancer.servers == ("s1", "s2") and unregistered.handed_over == []

        lost = ServedRanges(INDEXES)
        store.expire_session()
        with trio.fail_after(5):
            await Rebalancer(tables=lost, store=store, root=ROOT, server_id="s1", runtime=TRIO_RUNTIME).run()
        assert lost.handed_over == []
