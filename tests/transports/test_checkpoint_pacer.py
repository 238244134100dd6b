"""Paced checkpoints (checkpointCompletionTarget): CheckpointPacer on its own, then a real bookie
whose periodic checkpoint spreads its writes and whose filling write cache hurries it."""

import threading
import time

import trio

import bkclient
from bktransports.checkpoint_pacer import CheckpointPacer

URI = "memory://checkpoint-pacer"
ENTRY = b"p" * 4096


def test_the_pacer_waits_while_the_writes_are_ahead_of_the_line_and_never_after_the_last():
    pacer = CheckpointPacer(0.4)
    started = time.monotonic()
    pacer(0.5)                                  # due 0.2 s after the start
    assert 0.15 <= time.monotonic() - started < 0.35
    pacer(0.25)                                 # behind the line now: no wait
    pacer(1.0)                                  # the last write: no wait either
    assert time.monotonic() - started < 0.35
    assert 0.15 <= pacer.waited_s < 0.35 and not pacer.is_hurried


def test_hurry_from_another_thread_ends_the_wait_and_every_later_one():
    pacer = CheckpointPacer(60.0)
    threading.Timer(0.1, pacer.hurry).start()
    started = time.monotonic()
    pacer(0.5)                                  # would wait 30 s
    pacer(0.9)
    assert time.monotonic() - started < 5 and pacer.is_hurried
    assert 0.05 <= pacer.waited_s < 5


def test_a_pacer_whose_clock_is_past_the_line_does_not_wait():
    now = [100.0]
    pacer = CheckpointPacer(1.0, clock=lambda: now[0])
    now[0] = 100.9
    pacer(0.5)
    assert pacer.waited_s == 0.0


def _checkpoint_events(server) -> list:
    return [event for event in server.stalls.events if event.kind == "checkpoint"]


async def test_a_periodic_checkpoint_is_spread_and_a_filling_cache_hurries_one(start_cluster):
    cluster = await start_cluster(URI, 0)
    bookie = await cluster.add_bookie(flush_interval_s=0.5, checkpoint_completion_target=0.8,
                                      write_cache_size_max=16 * 1024 * 1024)
    server = bookie.server
    async with bkclient.connect(URI) as bk:
        ledger = await bk.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, password=b"pw")
        await ledger.add_many([ENTRY] * 768)                # 3 MiB: six entry-log writes
        with trio.fail_after(10):
            while not any("entries, paced" in event.detail for event in _checkpoint_events(server)):
                await trio.sleep(0.05)
        paced = [event for event in _checkpoint_events(server) if "paced" in event.detail]
        assert paced[0].duration_ms >= 250                  # spread over about 0.4 s
        assert paced[0].detail.startswith("768 entries")

        # A checkpoint spread over a minute, then more adds than half the cache: it is hurried.
        await ledger.add_many([ENTRY] * 512)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: server.checkpoint(spread_s=60.0))
            with trio.fail_after(10):       # (once the periodic one before it is done)
                while getattr(server.maintenance.checkpoint_pacer, "spread_s", None) != 60.0:
                    await trio.sleep(0.01)
            pacer = server.maintenance.checkpoint_pacer
            await ledger.add_many([ENTRY] * 2100)           # past 8 MiB: the next is wanted now
            with trio.fail_after(20):
                while server.maintenance.checkpoint_pacer is pacer:
                    await trio.sleep(0.01)
        assert pacer.is_hurried
        reader = await bk.open_ledger(ledger.ledger_id, password=b"pw")
        assert await reader.read(0, 768 + 512 + 2100 - 1) == [ENTRY] * (768 + 512 + 2100)


async def test_a_checkpoint_asked_for_now_or_a_compaction_hurries_a_paced_one(start_cluster):
    """What waits for the storage lock a paced checkpoint holds does not wait out its spread: a
    checkpoint asked for now (GC, the admin endpoint, shutdown) and a compaction."""
    cluster = await start_cluster(URI, 0)
    bookie = await cluster.add_bookie(flush_interval_s=3600.0, gc_wait_time_s=3600.0)
    server = bookie.server
    async with bkclient.connect(URI) as bk:
        ledger = await bk.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, password=b"pw")
        for asked_for_now in (server.checkpoint, server.collect_garbage):
            await ledger.add_many([ENTRY] * 512)            # 2 MiB: four entry-log writes
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lambda: server.checkpoint(spread_s=60.0))
                with trio.fail_after(10):
                    while server.maintenance.checkpoint_pacer is None:
                        await trio.sleep(0.01)
                pacer = server.maintenance.checkpoint_pacer
                with trio.fail_after(20):                   # not the minute of the spread
                    await asked_for_now()
            assert pacer.is_hurried, asked_for_now
