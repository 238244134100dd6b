"""Real processes on 127.0.0.1: a 3-node metastore (raft-lite, and ZooKeeper in a second
configuration) and bookie processes on real disks, driven through the library. A bookie is SIGKILLed while a writer keeps adding; the
writer changes ensembles; another client recovers the ledger and every acknowledged entry is
there with the right bytes."""

import os
import signal

import pytest
import trio

import bkclient
from bklocal.processes import free_ports
from bklocal.standalone import StandaloneCluster


class ZkCluster:
    """Bookie processes on a 3-node ZooKeeper ensemble."""

    def __init__(self, root: str) -> None:
        from zk_cluster import ZkEnsemble
        self.ensemble = ZkEnsemble(os.path.join(root, "zk"), 3)
        self.root = root
        self.bookies = []

    def start(self) -> None:
        from bklocal.processes import spawn_bookie
        self.ensemble.start()
        self.metastore_uri = f"zk://{self.ensemble.hosts}/ledgers"
        for index in range(4):
            self.bookies.append(spawn_bookie(data_dir=os.path.join(self.root, f"bookie{index}"),
                                             metastore_uri=self.metastore_uri))

    def kill_metastore_leader(self) -> None:
        self.ensemble.kill(self.ensemble.leader())

    def stop(self) -> None:
        for bookie in self.bookies:
            bookie.stop()
        self.ensemble.stop()


class RaftCluster(StandaloneCluster):
    def __init__(self, root: str) -> None:
        ports = free_ports(4 + 3)
        super().__init__(os.path.join(root, "cluster"), bookie_ports=ports[:4], metastore_ports=ports[4:])

    def kill_metastore_leader(self) -> None:
        from bkmetastore.raftlite.client import member_status

        async def find_leader() -> int:
            statuses = [await member_status(f"127.0.0.1:{port}") for port in self.metastore_ports]
            (index,) = [i for i, status in enumerate(statuses) if status["role"] == "leader"]
            return index

        self.metastore_nodes[trio.run(find_leader)].kill()


@pytest.fixture(params=["raft", "zk"])
def cluster(request, tmp_path):
    cluster = RaftCluster(str(tmp_path)) if request.param == "raft" else ZkCluster(str(tmp_path))
    try:
        if request.param == "raft":
            cluster.start(log=lambda line: None)
        else:
            cluster.start()
        yield cluster
    finally:
        cluster.stop()


async def test_sigkill_a_bookie_while_writing_then_recover_from_another_client(cluster):
    acknowledged: dict[int, bytes] = {}
    async with bkclient.connect(cluster.metastore_uri) as bk:
        ledger = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"pw")
        for batch in range(4):
            payloads = [b"batch %d entry %d " % (batch, i) + os.urandom(64) for i in range(100)]
            if batch == 2:
                victim_address = ledger.metadata.last_ensemble[0]
                victim = next(b for b in cluster.bookies if f"127.0.0.1:{b.port}" == victim_address)
                victim.process.send_signal(signal.SIGKILL)
                victim.process.wait()
            with trio.fail_after(60):
                ids = await ledger.add_many(payloads)
            acknowledged.update(zip(ids, payloads))
        # The victim is replaced (an ensemble change); with Qa 2 of Qw 3 adds go on being
        # acknowledged while the change's metadata write is still on its way, so wait for it.
        with trio.fail_after(30):
            while victim_address in ledger.metadata.last_ensemble:
                await trio.sleep(0.05)
        async with bkclient.connect(cluster.metastore_uri) as other:
            reader = await other.open_ledger(ledger.ledger_id, password=b"pw")
            assert reader.is_closed and reader.last_add_confirmed >= max(acknowledged)
            entries = await reader.read(0, reader.last_add_confirmed)
        assert all(entries[entry_id] == payload for entry_id, payload in acknowledged.items())
        with pytest.raises(bkclient.LedgerFenced):
            await ledger.add(b"after recovery")


async def test_sigkill_the_metastore_leader_while_writing(cluster):
    acknowledged: dict[int, bytes] = {}
    async with bkclient.connect(cluster.metastore_uri) as bk:
        ledger = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"pw")
        async with trio.open_nursery() as nursery:
            async def write() -> None:
                for batch in range(6):
                    payloads = [b"%d-%d" % (batch, i) for i in range(50)]
                    with trio.fail_after(60):
                        acknowledged.update(zip(await ledger.add_many(payloads), payloads))
                    await trio.sleep(0.1)
            nursery.start_soon(write)
            await trio.sleep(0.2)
            await trio.to_thread.run_sync(cluster.kill_metastore_leader)      # SIGKILL
        # Metadata operations need the new leader: close the ledger, create another, list.
        with trio.fail_after(60):
            closed = await ledger.close()
            other = await bk.create_ledger(password=b"pw")
        assert closed.last_entry_id == max(acknowledged)
        assert set(await bk.list_ledgers()) == {ledger.ledger_id, other.ledger_id}
        reader = await bk.open_ledger(ledger.ledger_id, password=b"pw")
        entries = await reader.read(0, reader.last_add_confirmed)
        assert all(entries[entry_id] == payload for entry_id, payload in acknowledged.items())
