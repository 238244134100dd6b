"""The stream catalog's metastore traffic: a segment listing (and a stream's metadata) reads only
the nodes whose watches fired since they were last read, yet always returns what the store holds; making a
node's parents costs one create. Two catalogs over one memory:// tree play two clients."""

import dataclasses

import pytest
import trio

from bkcore.metaops import Children, Create, Get
from bkcore.stream.catalog import StreamCatalog
from bkcore.stream.errors import StreamNotFound
from bkcore.stream.records import DLSN
from bkcore.stream.watched_cache import WatchedCache
from bkcore.stream.segments import SegmentMetadata, SegmentState, StreamLayout
from bkmetastore.memory_store import MemoryServer, MemoryStore
from bkmetastore.watches import OneShotWatch


class RecordingStore:
    """A store that notes the type of every op sent through it."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self.ops: list[type] = []

    async def execute(self, op):
        self.ops.append(type(op))
        return await self._store.execute(op)

    async def execute_watch(self, op):
        self.ops.append(type(op))
        return await self._store.execute_watch(op)

    def count(self, kind: type) -> int:
        return self.ops.count(kind)


class TrioRuntime:
    sleep = staticmethod(trio.sleep)


def two_catalogs() -> tuple[StreamCatalog, StreamCatalog, RecordingStore]:
    server = MemoryServer()
    reader_store = RecordingStore(MemoryStore(server))
    reader = StreamCatalog(reader_store, StreamLayout(), runtime=TrioRuntime())
    writer = StreamCatalog(MemoryStore(server), StreamLayout(), runtime=TrioRuntime())
    return reader, writer, reader_store


async def test_a_listing_reads_again_only_the_segments_that_changed():
    reader, writer, store = two_catalogs()
    await writer.create_namespace("ns")
    await writer.create_stream("ns", "s")
    for seqno in (1, 2, 3):
        await writer.create_segment("ns", "s", SegmentMetadata(seqno, ledger_id=10 + seqno))

    first = await reader.segments("ns", "s")
    assert [s.seqno for s in first] == [1, 2, 3] and store.count(Get) == 3
    assert await reader.segments("ns", "s") == first
    assert store.count(Get) == 3 and store.count(Children) == 2     # the second listing: no Get

    sealed = await writer.replace_segment("ns", "s", SegmentMetadata(
        2, ledger_id=12, state=SegmentState.COMPLETED, last_entry_id=5, record_count=6, version=first[1].version))
    now = await reader.segments("ns", "s")
    assert now[1] == sealed and now[1].state is SegmentState.COMPLETED
    assert store.count(Get) == 4                                    # only segment 2 read again

    await writer.create_segment("ns", "s", SegmentMetadata(4, ledger_id=14))
    assert [s.seqno for s in await reader.segments("ns", "s")] == [1, 2, 3, 4]
    assert store.count(Get) == 5


async def test_the_stream_node_is_read_again_only_after_it_changed():
    reader, writer, store = two_catalogs()
    await writer.create_namespace("ns")
    await writer.create_stream("ns", "s")
    first = await reader.get_stream("ns", "s")
    assert await reader.get_stream("ns", "s") == first and store.count(Get) == 1
    truncated = dataclasses.replace(first, truncated_to=DLSN(2, 0, 0))
    assert await writer.replace_stream("ns", "s", truncated) is not None
    assert (await reader.get_stream("ns", "s")).truncated_to == DLSN(2, 0, 0) and store.count(Get) == 2
    await writer.delete_stream_nodes("ns", "s")
    with pytest.raises(StreamNotFound):
        await reader.get_stream("ns", "s")


async def test_a_deleted_segment_leaves_the_listing_and_the_cache():
    reader, writer, _ = two_catalogs()
    await writer.create_namespace("ns")
    await writer.create_stream("ns", "s")
    await writer.create_segment("ns", "s", SegmentMetadata(1, ledger_id=11))
    assert len(await reader.segments("ns", "s")) == 1
    await writer.delete_stream_nodes("ns", "s")
    await writer.create_stream("ns", "s")
    await writer.create_segment("ns", "s", SegmentMetadata(1, ledger_id=99))
    # Same path, new node: the old entry's watch fired on the deletion.
    assert [s.ledger_id for s in await reader.segments("ns", "s")] == [99]


async def test_a_lost_session_empties_what_the_cache_may_serve():
    server = MemoryServer()
    store = MemoryStore(server)
    catalog = StreamCatalog(store, StreamLayout(), runtime=TrioRuntime())
    await catalog.create_namespace("ns")
    await catalog.create_stream("ns", "s")
    await catalog.create_segment("ns", "s", SegmentMetadata(1, ledger_id=11))
    await catalog.segments("ns", "s")
    assert catalog.cache.get("/ledgers/streams/ns/s/segments/0000000001") is not None
    store.expire_session()
    assert catalog.cache.get("/ledgers/streams/ns/s/segments/0000000001") is None


async def test_ensuring_a_path_is_one_create_whatever_its_depth():
    reader, _, store = two_catalogs()
    await reader._ensure("/ledgers/a/b/c/d")
    assert store.count(Create) == 1
    assert (await store.execute(Get("/ledgers/a/b/c/d"))).code.name == "OK"
    await reader.create_namespace("ns")
    creates = store.count(Create)
    await reader.create_stream("ns", "s")
    # The stream node, its segments and cursors nodes, the ids parent, the id node.
    assert store.count(Create) - creates == 5


def test_the_cache_serves_only_entries_whose_watch_is_quiet():
    cache = WatchedCache(entries_max=2)
    quiet, fired = OneShotWatch(trio.Event()), OneShotWatch(trio.Event())
    fired.fire()
    cache.put("/a", SegmentMetadata(1, ledger_id=1), quiet)
    cache.put("/b", SegmentMetadata(2, ledger_id=2), fired)
    assert cache.get("/a") == SegmentMetadata(1, ledger_id=1) and cache.get("/b") is None
    quiet.fire()
    assert cache.get("/a") is None and len(cache) == 0


def test_a_full_cache_drops_fired_entries_first_then_the_oldest():
    cache = WatchedCache(entries_max=2)
    watches = [OneShotWatch(trio.Event()) for _ in range(4)]
    cache.put("/a", SegmentMetadata(1, ledger_id=1), watches[0])
    cache.put("/b", SegmentMetadata(2, ledger_id=2), watches[1])
    watches[1].fire()
    cache.put("/c", SegmentMetadata(3, ledger_id=3), watches[2])
    assert len(cache) == 2 and cache.eviction_count == 0 and cache.get("/a") is not None
    cache.put("/d", SegmentMetadata(4, ledger_id=4), watches[3])
    assert cache.eviction_count == 1 and cache.get("/a") is None and cache.get("/d") is not None
