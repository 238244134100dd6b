"""Rebalancing with real servers (bkcore.table.rebalance over gRPC, in-process bookies): a stream
storage server that joins a running one takes over the ranges that prefer it, within a bound,
while clients write and read through the library's thick client; nothing acknowledged is lost,
no read is stale, and the client ends up sending to the new owners directly."""

import functools

import trio

from bkclient.library import connect
from bkclient.storage_client import StorageError
from bkcore.stream.segments import StreamSettings
from bkcore.table.ownership import owner_of
from bkcore.table.placement import preferred_server
from bkcore.table.service import range_of
from bklocal.processes import free_port
from streamstorage.server import run_stream_storage

URI = "memory://rebalance"
RANGES = 8
WRITERS = 4
INDEXES = [("default", "moving", i) for i in range(RANGES)]


def keys_covering(prefix: bytes) -> list[bytes]:
    """RANGES keys, the i-th in range i."""
    found: dict[int, bytes] = {}
    n = 0
    while len(found) < RANGES:
        key = b"%s-%d" % (prefix, n)
        found.setdefault(range_of(key, RANGES), key)
        n += 1
    return [found[i] for i in range(RANGES)]


def port_splitting_the_ranges(first: str) -> int:
    """A free port whose server id would be preferred for between 3 and 5 of the 8 ranges: the
    split depends on the two ids, and ports are drawn at random (tests/bkcore/
    test_table_placement.py shows the split is even on average)."""
    while True:
        port = free_port()
        share = sum(preferred_server(index, [first, f"127.0.0.1:{port}"]) != first for index in INDEXES)
        if 3 <= share <= 5:
            return port


async def retried(call):
    """BookKeeper's transient answer (a range between owners) is retried, as its clients do."""
    while True:
        try:
            return await call()
        except StorageError as exc:
            if exc.status_name != "INTERNAL_SERVER_ERROR":
                raise
            await trio.sleep(0.05)


async def owners(bk) -> list[str | None]:
    return [await owner_of(bk.store, bk.layout.root, index) for index in INDEXES]


async def test_a_joining_server_takes_over_its_share_of_the_ranges_while_clients_write(start_cluster, tmp_path):
    await start_cluster(URI, 3)
    with trio.fail_after(180):
        async with trio.open_nursery() as nursery:
            start = functools.partial(run_stream_storage, URI, host="127.0.0.1")
            a = await nursery.start(functools.partial(start, port=0, index_dir=str(tmp_path / "a")))
            a_id = f"127.0.0.1:{a.port}"
            async with connect(URI) as bk:
                await bk.streams.create_stream("default", "moving", StreamSettings(table_ranges=RANGES))
                table = await bk.open_table("default/moving")
                before = keys_covering(b"before")
                for key in before:
                    await table.put(key, b"old")
                assert await owners(bk) == [a_id] * RANGES

                acknowledged: dict[bytes, bytes] = {}
                stale: list[tuple] = []
                writing = True

                async def writer(w: int) -> None:
                    keys = keys_covering(b"w%d" % w)
                    n = 0
                    while writing:
                        key, value = keys[n % RANGES], b"%d" % n
                        await retried(functools.partial(table.put, key, value))
                        acknowledged[key] = value
                        got = await retried(functools.partial(table.get, key))
                        if got is None or got.value != value:
                            stale.append((key, value, got))
                        n += 1

                async with trio.open_nursery() as writers:
                    for w in range(WRITERS):
                        writers.start_soon(writer, w)
                    await trio.sleep(1.0)
                    b = await nursery.start(functools.partial(start, port=port_splitting_the_ranges(a_id),
                                                              index_dir=str(tmp_path / "b")))
                    b_id = f"127.0.0.1:{b.port}"
                    expected = [preferred_server(index, [a_id, b_id]) for index in INDEXES]
                    with trio.fail_after(30):
                        while await owners(bk) != expected:
                            await trio.sleep(0.2)
                    moved_at_put_count = sum(int(v) for v in acknowledged.values())
                    await trio.sleep(1.0)       # writers go on against the new owners
                    writing = False
                assert sum(int(v) for v in acknowledged.values()) > moved_at_put_count, "writers went on"
                assert await owners(bk) == expected, "ownership settled: nothing moved back"
                assert a.tables.rebalancer.handover_count == expected.count(b_id)
                assert b.tables.rebalancer.handover_count == 0
                assert stale == []
                # The thick client learned where each range went (the old owner named the new
                # one instead of forwarding its calls there): it sends to the owners directly.
                assert [table._routes._servers.get(index) for index in INDEXES] == expected
                for key in before:
                    assert (await retried(functools.partial(table.get, key))).value == b"old"
                for key, value in acknowledged.items():
                    assert (await retried(functools.partial(table.get, key))).value == value
                table.close()
            nursery.cancel_scope.cancel()
