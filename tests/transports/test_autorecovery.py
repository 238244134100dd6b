"""Autorecovery over real TCP and files: the auditor marks ledgers of a bookie that stopped,
a worker copies its fragments elsewhere and unmarks them; `recover` does it on demand."""

import pytest
import trio

import bkclient
from bktransports.autorecovery import Autorecovery, list_underreplicated, recover_bookie

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


async def test_the_cluster_switch_the_cluster_delay_and_a_triggered_audit(cluster):
    """bk shell autorecovery -disable holds replication back; a triggered audit marks a gone
    bookie's ledgers at once, whatever the daemon's own delay; the cluster's delay wins over
    the daemon's."""
    import io
    import json

    from bkcli.main import build_parser
    from bkcli.shell_command import run_shell

    async def shell(*argv):
        out = io.StringIO()
        status = await run_shell(build_parser().parse_args(["shell", *argv, "--metastore", URI, "--json"]), out)
        return status, json.loads(out.getvalue())
    async with bkclient.connect(URI) as bk:
        ledgers = await closed_ledgers(bk, 3)
        victim = next(b for b in cluster.bookies if b.bookie_id in ledgers[0].all_bookies())
        affected = sorted(m.ledger_id for m in ledgers if victim.bookie_id in m.all_bookies())
        assert await shell("autorecovery", "-status") == (0, {"enabled": True})
        assert await shell("autorecovery", "-disable") == (0, {"enabled": False})
        assert await shell("lostbookierecoverydelay", "-get") == (0, {"lostBookieRecoveryDelay": None})
        async with trio.open_nursery() as nursery:
            recovery = Autorecovery(bk, lost_bookie_recovery_delay_s=3600, audit_interval_s=3600,
                                    worker_interval_s=0.2)
            nursery.start_soon(recovery.run)
            with trio.fail_after(30):
                while not recovery.is_auditor:
                    await trio.sleep(0.05)
            await cluster.stop(victim)
            assert await shell("triggeraudit") == (0, {"requested": True})
            with trio.fail_after(30):
                while recovery.counts["audits_skipped"] < 2:       # (the first audit, and the one asked for)
                    await trio.sleep(0.05)
            assert await list_underreplicated(bk.store, bk.layout) == {}          # switched off: nothing marked
            assert await shell("autorecovery", "-enable") == (0, {"enabled": True})
            assert await shell("triggeraudit") == (0, {"requested": True})
            with trio.fail_after(60):                     # marked at once, then copied and unmarked
                while any([victim.bookie_id in (await bk.ledger_metadata(i)).all_bookies() for i in affected]):
                    await trio.sleep(0.1)
            assert recovery.counts["ledgers_marked"] >= len(affected)
            assert (await shell("queryautorecoverystatus"))[0] == 0
            assert await shell("lostbookierecoverydelay", "-set", "7") == (0, {"lostBookieRecoveryDelay": 7.0})
            await recovery.audit()
            assert recovery._delay_in_force == 7.0                    # the cluster's delay wins
            nursery.cancel_scope.cancel()
