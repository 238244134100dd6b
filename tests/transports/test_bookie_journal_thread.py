"""The bookie's journal thread (real TCP, real files): journal writes queued behind a sync that
is taking long are written together and share the next fdatasync; every add is answered only
once its group is synced, in order, and reads back, also after the bookie stopped and this
process served its files again. (Durability of this path across crashes is the jepsen-like
tests': they kill real bookie processes running the default, two writes in flight.)"""

import threading

import trio

import bkclient
from bkcore.bookie.bookie import BookieConfig

URI = "memory://journal-thread"
BURST_COUNT = 6
ADDS_PER_BURST = 20


async def test_writes_queued_behind_a_slow_sync_share_one_and_every_add_reads_back(start_cluster, monkeypatch):
    cluster = await start_cluster(URI, 0)
    # Every group goes to the thread (none is synced inline), and up to 4 are out at once.
    bookie = await cluster.add_bookie(journal_sync_inline_size_max=0, bookie=BookieConfig(
        journal_flush_when_queue_empty=True, journal_writes_in_flight_max=4))
    server = bookie.server
    stack = server.stack
    release = threading.Event()
    write_journal, sync_journal = stack.write_journal, stack.sync_journal
    written_tokens: list[int] = []
    synced_tokens: list[int] = []

    def recorded_write(effect, *, now_ms):   # in the journal thread, like the sync
        write_journal(effect, now_ms=now_ms)
        written_tokens.append(effect.token)

    def slow_first_sync(token):
        release.wait(30)
        sync_journal(token)
        synced_tokens.append(token)

    monkeypatch.setattr(stack, "write_journal", recorded_write)
    monkeypatch.setattr(stack, "sync_journal", slow_first_sync)
    acknowledged: list[int] = []
    async with bkclient.connect(URI) as bk:
        ledger = await bk.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, password=b"pw")
        payloads = [b"entry %d" % n for n in range(BURST_COUNT * ADDS_PER_BURST)]

        def on_done(entry_id, error) -> None:
            assert error is None, error
            acknowledged.append(entry_id)

        for burst in range(BURST_COUNT):     # separate frames: each makes a group of its own
            for payload in payloads[burst * ADDS_PER_BURST:(burst + 1) * ADDS_PER_BURST]:
                ledger.start_add(payload, on_done)
            await trio.sleep(0.05)
        writes_out = server._journal.outstanding
        assert writes_out == server.core.config.journal_writes_in_flight_max
        assert acknowledged == [], "nothing is answered before its group is synced"
        release.set()
        with trio.fail_after(20):
            while len(acknowledged) < len(payloads):
                await trio.sleep(0.01)
        assert acknowledged == list(range(len(payloads)))
        # A group of no adds (an explicit LAC) may still be on its way: its sync is counted in the
        # journal thread before the loop hears of it.
        with trio.fail_after(5):
            while server._journal.outstanding:
                await trio.sleep(0.01)
        # The groups that queued behind the held sync were written together and synced once.
        assert written_tokens == sorted(written_tokens) and synced_tokens == sorted(synced_tokens)
        assert synced_tokens[-1] == written_tokens[-1]
        assert len(synced_tokens) < len(written_tokens)
        assert server._journal.batch_count == len(synced_tokens)
        await ledger.close()
        reader = await bk.open_ledger(ledger.ledger_id, password=b"pw")
        assert await reader.read(0, len(payloads) - 1) == payloads
    # Served again by this process from the same files: everything is still there.
    await cluster.stop(bookie)
    await cluster.restart(bookie)
    async with bkclient.connect(URI) as bk:
        reader = await bk.open_ledger(ledger.ledger_id, password=b"pw")
        assert await reader.read(0, len(payloads) - 1) == payloads
