"""`bk autorecovery` on its own, beside bookies that do not run it: it becomes the auditor
(`bk shell whoisauditor` names it) and re-replicates the ledgers of a bookie that was killed."""

import os
import shutil
import tempfile
import time

import trio

import bkclient
from bkcli.main import main
from bklocal.processes import spawn_bk
from bklocal.standalone import StandaloneCluster


def test_the_daemon_audits_and_re_replicates_a_killed_bookies_ledgers(capsys):
    root = tempfile.mkdtemp(prefix="autorecovery-daemon-")
    cluster = StandaloneCluster.on_free_ports(root, bookie_count=4, metastore_count=1)
    daemon = None
    try:
        cluster.start(log=lambda line: None)
        uri = cluster.metastore_uri
        daemon = spawn_bk("autorecovery", ["autorecovery", "--metastore", uri, "--name", "daemon-1",
                                           "--audit-interval", "1"],
                          log_path=os.path.join(root, "autorecovery.log"), port=0,
                          ready_text="autorecovery daemon-1 running")
        deadline = time.monotonic() + 30
        while main(["shell", "whoisauditor", "--metastore", uri]) != 0:
            assert time.monotonic() < deadline, capsys.readouterr().err
            time.sleep(0.2)
        assert capsys.readouterr().out == "daemon-1\n"

        async def write_ledger() -> tuple[int, list[str]]:
            async with bkclient.connect(uri) as bk:
                ledger = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"pw")
                await ledger.add_many([b"entry %d" % i for i in range(30)])
                metadata = await ledger.close()
                return ledger.ledger_id, sorted(metadata.all_bookies())
        ledger_id, bookies = trio.run(write_ledger)
        victim = next(child for child in cluster.bookies if f"127.0.0.1:{child.port}" in bookies)
        victim.kill()

        async def ensemble_now() -> list[str]:
            async with bkclient.connect(uri) as bk:
                return sorted((await bk.ledger_metadata(ledger_id)).ensembles[-1][1])
        deadline = time.monotonic() + 60
        while f"127.0.0.1:{victim.port}" in trio.run(ensemble_now):
            assert time.monotonic() < deadline, open(daemon.log_path).read()[-2000:]
            time.sleep(0.5)
    finally:
        if daemon is not None:
            daemon.stop()
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
