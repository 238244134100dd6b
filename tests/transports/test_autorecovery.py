"""Autorecovery over real TCP and files: the auditor marks ledgers of a bookie that stopped,
a worker copies its fragments elsewhere and unmarks them; `recover` does it on demand."""

import pytest
import trio

import bkclient
from transports.autorecovery import Autorecovery, list_underreplicated, recover_bookie

URI = "memory://autorecovery"


@pytest.fixture
async def cluster(start_cluster):
    return await start_cluster(URI, 5)


async def closed_ledgers(bk, count: int):
    ledgers = []
    for index in range(count):
        ledger = await bk.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=b"pw")
        await ledger.add_many([b"ledger %d entry %d" % (index, i) for i in range(40)])
        ledgers.append(await ledger.close())
    return ledgers


async def test_auditor_and_worker_rereplicate_a_stopped_bookie(cluster):
    async with bkclient.connect(URI) as bk:
        ledgers = await closed_ledgers(bk, 4)
        victim = next(b for b in cluster.bookies if b.bookie_id in ledgers[0].all_bookies())
        affected = [m.ledger_id for m in ledgers if victim.bookie_id in m.all_bookies()]
        async with trio.open_nursery() as nursery:
            recovery = Autorecovery(bk, lost_bookie_recovery_delay_s=0.2, audit_interval_s=0.5,
                                    worker_interval_s=0.2)
            nursery.start_soon(recovery.run)
            await cluster.stop(victim)
            with trio.fail_after(60):
                while True:
                    metadata = [await bk.ledger_metadata(i) for i in affected]
                    if all(victim.bookie_id not in m.all_bookies() for m in metadata) \
                            and not await list_underreplicated(bk.store, bk.layout):
                        break
                    await trio.sleep(0.1)
            nursery.cancel_scope.cancel()
        assert recovery.counts["ledgers_marked"] >= len(affected)
        for index, ledger_id in enumerate(m.ledger_id for m in ledgers):
            reader = await bk.open_ledger(ledger_id, password=b"pw", recovery=False)
            assert await reader.read(0, 39) == [b"ledger %d entry %d" % (index, i) for i in range(40)]


async def test_recover_on_demand_with_dry_run_first(cluster):
    async with bkclient.connect(URI) as bk:
        ledgers = await closed_ledgers(bk, 3)
        victim = next(b for b in cluster.bookies if b.bookie_id in ledgers[0].all_bookies())
        await cluster.stop(victim)
        planned = await recover_bookie(bk, victim.bookie_id, dry_run=True)
        assert planned.fragments_copied >= 1 and planned.entries_copied == 0
        assert victim.bookie_id in (await bk.ledger_metadata(ledgers[0].ledger_id)).all_bookies()
        seen = []
        report = await recover_bookie(bk, victim.bookie_id, progress=lambda done, total: seen.append((done, total)))
        assert report.failures == [] and report.fragments_copied == planned.fragments_copied
        assert seen[-1] == (3, 3)
        for metadata in ledgers:
            assert victim.bookie_id not in (await bk.ledger_metadata(metadata.ledger_id)).all_bookies()
