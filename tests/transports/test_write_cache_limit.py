"""A bookie's write cache is bounded (dbStorage_writeCacheMaxSizeMb): half full starts a
checkpoint at once; full while the other half is still being flushed stops the bookie reading
until that checkpoint is done. Real TCP, real files, a checkpoint held back on purpose."""

import threading

import trio

import bkclient

URI = "memory://write-cache-limit"
CACHE_SIZE_MAX = 1024 * 1024            # halves of 512 KiB
ENTRY = b"e" * 4096
MORE_COUNT = 4000                       # 16 MiB sent while a checkpoint is held


async def test_half_full_cache_checkpoints_without_waiting_for_the_interval(start_cluster):
    cluster = await start_cluster(URI, 0)
    bookie = await cluster.add_bookie(flush_interval_s=3600.0, write_cache_size_max=CACHE_SIZE_MAX)
    server = bookie.server
    async with bkclient.connect(URI) as bk:
        ledger = await bk.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, password=b"pw")
        await ledger.add_many([ENTRY] * 200)          # 800 KiB: past half of the cache
        with trio.fail_after(10):
            while server.counts["checkpoints"] == 0:
                await trio.sleep(0.01)
        assert server.stack.storage.write_cache_size < CACHE_SIZE_MAX // 2
        reader = await bk.open_ledger(ledger.ledger_id, password=b"pw")
        entries = await reader.read(0, 199)
        assert entries == [ENTRY] * 200


async def test_full_cache_stops_reading_until_the_checkpoint_is_done(start_cluster, monkeypatch):
    cluster = await start_cluster(URI, 0)
    bookie = await cluster.add_bookie(flush_interval_s=3600.0, write_cache_size_max=CACHE_SIZE_MAX)
    server = bookie.server
    stack = server.stack
    release = threading.Event()
    write_checkpoint = stack.write_checkpoint

    def held_write_checkpoint(plan, **phases):      # in the checkpoint's worker thread
        release.wait(30)
        write_checkpoint(plan, **phases)

    monkeypatch.setattr(stack, "write_checkpoint", held_write_checkpoint)
    async with bkclient.connect(URI) as bk:
        ledger = await bk.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, password=b"pw")
        await ledger.add_many([ENTRY] * 150)          # 600 KiB: the first checkpoint starts, held
        results = []

        async def add_more() -> None:
            results.extend(await ledger.add_many([ENTRY] * MORE_COUNT))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(add_more)
            # The next half fills while the first is held: the bookie stops reading.
            with trio.fail_after(10):
                while not server.maintenance.receive_gate.is_shut:
                    await trio.sleep(0.01)
            await trio.sleep(0.5)
            cached = stack.storage.write_cache_size
            # The cache took what was already received (journaled meanwhile), then nothing: it
            # holds a small part of what the client sent, and the rest waits, none refused.
            assert CACHE_SIZE_MAX // 2 <= cached < MORE_COUNT * len(ENTRY) // 4
            assert not results
            await trio.sleep(0.3)
            assert stack.storage.write_cache_size == cached
            release.set()
        assert results == list(range(150, 150 + MORE_COUNT))
        assert server.maintenance.receive_gate.shut_count >= 1
        reader = await bk.open_ledger(ledger.ledger_id, password=b"pw")
        entries = await reader.read(0, 149 + MORE_COUNT)
        assert entries == [ENTRY] * (150 + MORE_COUNT)
