"""The library against bookies on real TCP and real files (memory:// metastore): create, add,
read, tail, close, recovery, ensemble change after a bookie stops, wrong password."""

import concurrent.futures
import time

import pytest
import trio

import bkclient
from bkcore.metaops import Children
from bkcore.errors import IllegalOperation, LedgerFenced, NotEnoughBookies, Unauthorized

URI = "memory://library"


@pytest.fixture
async def cluster(start_cluster):
    return await start_cluster(URI, 4)


async def test_write_close_and_read_back(cluster):
    async with bkclient.connect(URI) as bk:
        assert len(await bk.list_bookies()) == 4
        ledger = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"pw")
        assert await ledger.add(b"first") == 0
        ids = await ledger.add_many([b"entry %d" % i for i in range(1, 500)])
        assert ids == list(range(1, 500))
        closed = await ledger.close()
        assert closed.last_entry_id == 499
        reader = await bk.open_ledger(ledger.ledger_id, password=b"pw")
        entries = await reader.read(0, 499)
        assert entries[0] == b"first" and entries[499] == b"entry 499"
        assert await bk.list_ledgers() == [ledger.ledger_id]


async def test_tailing_reader_sees_entries_as_they_are_acknowledged(cluster):
    async with bkclient.connect(URI) as bk:
        ledger = await bk.create_ledger(password=b"pw")
        reader = await bk.open_ledger(ledger.ledger_id, password=b"pw", recovery=False)
        seen = []

        async def follow():
            async for entry_id, payload in reader.tail():
                seen.append((entry_id, payload))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow)
            for i in range(20):
                await ledger.add(b"e%d" % i)
            await ledger.close()
            with trio.fail_after(20):
                while len(seen) < 20:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        assert seen == [(i, b"e%d" % i) for i in range(20)]


async def test_writer_survives_a_stopped_bookie_and_recovery_fences_it(cluster):
    async with bkclient.connect(URI) as bk:
        ledger = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"pw")
        await ledger.add_many([b"before %d" % i for i in range(50)])
        victim = next(b for b in cluster.bookies if b.bookie_id in ledger.metadata.ensembles[-1][1])
        await cluster.stop(victim)
        with trio.fail_after(30):
            await ledger.add_many([b"after %d" % i for i in range(50)])
        assert victim.bookie_id not in ledger.metadata.ensembles[-1][1]
        async with bkclient.connect(URI) as other:
            recovered = await other.open_ledger(ledger.ledger_id, password=b"pw")
            assert recovered.last_add_confirmed == 99
            entries = await recovered.read(0, 99)
            assert entries[:50] == [b"before %d" % i for i in range(50)]
            assert entries[50:] == [b"after %d" % i for i in range(50)]
        with pytest.raises(LedgerFenced):
            await ledger.add(b"too late")


async def test_wrong_password_and_too_few_bookies_are_typed_errors(cluster):
    async with bkclient.connect(URI) as bk:
        ledger = await bk.create_ledger(password=b"right")
        await ledger.add(b"x")
        with pytest.raises(Unauthorized):
            await bk.open_ledger(ledger.ledger_id, password=b"wrong")
        with pytest.raises(NotEnoughBookies):
            await bk.create_ledger(ensemble=5, write_quorum=3, ack_quorum=2)


async def test_an_administrators_open_needs_no_password_where_the_digests_need_none(cluster):
    """password=None: BookKeeperAdmin's read, of CRC32C ledgers only, never fencing the writer."""
    async with bkclient.connect(URI) as bk:
        crc = await bk.create_ledger(password=b"right")
        for payload in (b"a", b"b", b"c"):         # one at a time: "c" carries LAC 1 to the bookies
            await crc.add(payload)
        reader = await bk.open_ledger(crc.ledger_id, password=None, recovery=False)
        assert reader.last_add_confirmed >= 1 and await reader.read(0, 1) == [b"a", b"b"]
        assert await crc.add(b"d") == 3                          # not fenced
        with pytest.raises(IllegalOperation, match="an open without it cannot recover"):
            await bk.open_ledger(crc.ledger_id, password=None)
        hmac = await bk.create_ledger(password=b"right", digest="hmac")
        await hmac.add(b"x")
        with pytest.raises(Unauthorized, match="HMAC_SHA256 digests are checked with its password"):
            await bk.open_ledger(hmac.ledger_id, password=None, recovery=False)


async def test_sync_wrapper_from_a_plain_thread(cluster):
    from bkclient.sync import connect as sync_connect

    def script() -> list[bytes]:
        with sync_connect(URI) as bk:
            ledger = bk.create_ledger(password=b"pw")
            assert ledger.add(b"one") == 0
            assert ledger.add_many([b"two", b"three"]) == [1, 2]
            ledger.close()
            reader = bk.open_ledger(ledger.ledger_id, password=b"pw")
            assert bk.list_ledgers() == [ledger.ledger_id]
            with pytest.raises(Unauthorized):
                bk.open_ledger(ledger.ledger_id, password=b"bad")
            return reader.read(0, 2)

    assert await trio.to_thread.run_sync(script) == [b"one", b"two", b"three"]


async def test_submitted_calls_run_together_on_the_clients_thread_and_hand_back_results_and_errors(cluster):
    from bkclient.sync import connect as sync_connect

    def script() -> tuple[list, int]:
        with sync_connect(URI) as bk:
            ledger = bk.create_ledger(password=b"pw")
            ledger.add_many([b"e%d" % i for i in range(10)])
            ledger.close()
            reader = bk.run(lambda client: client.open_ledger(ledger.ledger_id, password=b"pw"))
            gate = trio.Event()
            calls = {"waiting": 0}

            async def read_after_the_gate(_client, first: int) -> list[bytes]:
                calls["waiting"] += 1
                await gate.wait()
                return await reader.read(first, first + 1)

            async def open_the_gate(_client) -> None:
                gate.set()
            futures = [bk.submit(read_after_the_gate, first) for first in (0, 2, 4)]
            # All three run at once on the one client thread: none holds a thread of ours.
            while calls["waiting"] < 3:
                time.sleep(0.01)
            assert not any(future.done() for future in futures)
            bk.run(open_the_gate)
            results = [future.result(10) for future in futures]
            failed = bk.submit(lambda _client: reader.read(9, 20))      # past the last entry
            with pytest.raises(IllegalOperation):
                failed.result(10)
            stuck = bk.submit(lambda _client: trio.sleep_forever())
        return results, stuck.exception(10)

    results, closed = await trio.to_thread.run_sync(script)
    assert results == [[b"e0", b"e1"], [b"e2", b"e3"], [b"e4", b"e5"]]
    assert isinstance(closed, concurrent.futures.CancelledError), "a call left when the client closes ends"


async def test_a_pipeline_keeps_adds_flowing_within_its_byte_bound_and_raises_a_failed_add(cluster):
    from bkclient.sync import connect as sync_connect
    payloads = [b"entry %03d" % i for i in range(200)]

    def script() -> list[bytes]:
        with sync_connect(URI) as bk:
            ledger = bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"pw")
            adds = bk.pipeline(ledger, bytes_max=40)
            for first in range(0, 200, 4):
                chunk = payloads[first:first + 4]
                adds.send(chunk)
                assert adds.unacknowledged_bytes <= max(40, sum(map(len, chunk)))
            assert adds.finish() == 199 and adds.unacknowledged_bytes == 0
            bk.open_ledger(ledger.ledger_id, password=b"pw")       # recovery: fences the writer
            with pytest.raises(LedgerFenced):
                adds.send([b"too late"])
                adds.finish()
            read = bk.open_ledger(ledger.ledger_id, password=b"pw").read(0, 199)
            return read

    assert await trio.to_thread.run_sync(script) == payloads


async def test_a_vanished_registration_moves_an_idle_writer_off_the_bookie(cluster):
    async with bkclient.connect(URI) as bk:
        ledger = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"pw")
        await ledger.add(b"x")
        victim = next(b for b in cluster.bookies if b.bookie_id in ledger.metadata.last_ensemble)
        await cluster.stop(victim)                    # its session ends; the writer has nothing pending
        with trio.fail_after(20):
            while victim.bookie_id in ledger.metadata.last_ensemble:
                await trio.sleep(0.01)
        assert ledger.metadata.ensembles[-1][0] == 1   # the new ensemble starts after the LAC
        assert await ledger.add(b"y") == 1


async def test_a_bookie_whose_session_expired_registers_again(cluster):
    async with bkclient.connect(URI) as bk:
        bookie = cluster.bookies[0]
        _, watch = await bk.store.execute_watch(Children(bk.layout.available_path))
        bookie.server.store.expire_session()          # as if its metastore session timed out
        with trio.fail_after(10):
            await watch.wait()                        # the registration vanished...
            while bookie.bookie_id not in await bk.list_bookies():
                await trio.sleep(0.01)                # ...and came back on a new session
        assert not bookie.server.store.session_lost


async def test_a_long_burst_of_pipelined_adds_leaves_in_batches_of_the_pump_limit(cluster):
    """Adds started in a row travel together once the caller yields, but a burst longer than
    PIPELINED_ADDS_PER_PUMP_MAX leaves a batch each time that many wait, so the bookies start
    on it while the caller goes on."""
    from bktransports.client_driver import PIPELINED_ADDS_PER_PUMP_MAX as limit
    async with bkclient.connect(URI) as bk:
        ledger = await bk.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, password=b"pw")
        (bookie,) = [b for b in cluster.bookies if b.bookie_id in ledger.metadata.last_ensemble]
        before = bookie.server.counts["add_requests"]
        done = trio.Event()
        acked: list[int] = []

        def on_done(entry_id, error):
            assert error is None
            acked.append(entry_id)
            if len(acked) == count:
                done.set()

        for count in (limit // 2, 2 * limit + 10):      # a short burst, then a long one
            acked.clear()
            done = trio.Event()
            for _ in range(count):
                ledger.start_add(b"x", on_done)       # no yield in between
            with trio.fail_after(10):
                await done.wait()
            assert acked == sorted(acked) and len(acked) == count
            requests = bookie.server.counts["add_requests"] - before
            before += requests
            assert requests == (1 if count < limit else 3), (count, requests)
