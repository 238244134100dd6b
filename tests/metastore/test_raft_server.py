"""raft-lite on real files and real sockets: RaftStorage (fsync'd state, log with a torn tail,
snapshots), a 3-node cluster restarted from its data directories, and the raft:// client's
behaviour around leader changes (bkmetastore.raftlite.storage, .server, .client).

test_raftlite_server.py already runs the store contract on 3 nodes and stops a leader; these
tests add what it does not reach. The last tests pin client bugs found in review and in CI (a
10 s stall opening on a cluster still electing; a session lost when the old leader steps down
but stays up; a request refused by a deposed leader answered CONNECTION_LOSS instead of being
taken to its successor).
"""

from __future__ import annotations

import os
import socket

import pytest
import trio

from bkcore.metaops import Create, Get, MetaCode
from bkmetastore.raftlite.client import open_raft_store
from bkmetastore.raftlite.core import MS, PersistentState, RaftConfig
from bktransports.raftlite_server import RaftServer
from bkmetastore.raftlite.storage import RaftStorage, RaftStorageError
from bktransports.timer import now_ns

# The default election timeouts (see test_raftlite_server.py: shorter ones let a slow fsync on
# a CI machine depose a leader with a write pending).
CONFIG = RaftConfig(session_timeout_ns=2_000 * MS)
NOOP = ["noop"]


# -- storage -------------------------------------------------------------------------------------

def test_storage_round_trip_of_state_log_truncation_and_snapshot(tmp_path):
    storage = RaftStorage(str(tmp_path))
    assert storage.load() == PersistentState()
    storage.save_hard_state(3, 2)
    storage.save_log(1, [[1, NOOP], [1, ["open"]], [2, ["x"]]])
    storage.save_log(3, [[3, ["y"]], [3, ["z"]]])          # drops the old entry 3
    storage.save_log(6, [[3, ["w"]]])                        # a plain append
    storage.close()
    state = RaftStorage(str(tmp_path)).load()
    assert (state.term, state.voted_for) == (3, 2)
    assert state.log == [[1, NOOP], [1, ["open"]], [3, ["y"]], [3, ["z"]], [3, ["w"]]]

    storage = RaftStorage(str(tmp_path))
    storage.load()
    storage.save_snapshot(4, 3, [[["/", b"", 0, None, 0]], [1], 2])
    storage.close()
    state = RaftStorage(str(tmp_path)).load()
    assert (state.snapshot_index, state.snapshot_term) == (4, 3)
    assert state.snapshot_state == [[["/", b"", 0, None, 0]], [1], 2]
    assert state.log == [[3, ["w"]]]                         # entry 5 only


@pytest.mark.parametrize("torn_bytes", [3, 11])
def test_a_torn_log_tail_is_dropped_and_reported(tmp_path, torn_bytes):
    storage = RaftStorage(str(tmp_path))
    storage.load()
    storage.save_log(1, [[1, NOOP], [1, ["open"]]])
    storage.save_log(3, [[1, ["op", 1, [1, "/a"]]]])
    storage.close()
    log_path = tmp_path / "log"
    data = log_path.read_bytes()
    log_path.write_bytes(data[:-torn_bytes])                   # the last append was cut short
    reloaded = RaftStorage(str(tmp_path))
    state = reloaded.load()
    assert state.log == [[1, NOOP], [1, ["open"]]]
    assert reloaded.tail_problem and "log" in reloaded.tail_problem
    reloaded.save_log(3, [[2, ["again"]]])                     # appends go on after the cut
    reloaded.close()
    again = RaftStorage(str(tmp_path))
    assert again.load().log == [[1, NOOP], [1, ["open"]], [2, ["again"]]]
    assert again.tail_problem is None


def test_a_bad_record_in_the_middle_of_the_log_is_an_error_not_data(tmp_path):
    storage = RaftStorage(str(tmp_path))
    storage.load()
    storage.save_log(1, [[1, NOOP], [1, ["open"]], [1, ["close", 1]]])
    storage.close()
    log_path = tmp_path / "log"
    data = bytearray(log_path.read_bytes())
    data[10] ^= 0xFF                                           # inside the first record's body
    log_path.write_bytes(bytes(data))
    with pytest.raises(RaftStorageError, match="offset 0"):
        RaftStorage(str(tmp_path)).load()


def test_state_files_are_replaced_whole(tmp_path):
    storage = RaftStorage(str(tmp_path))
    storage.load()
    for term in range(1, 6):
        storage.save_hard_state(term, None)
    storage.close()
    assert sorted(os.listdir(tmp_path)) == ["log", "state"]    # no temp files left behind
    assert RaftStorage(str(tmp_path)).load().term == 5


# -- a real cluster ------------------------------------------------------------------------------

def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for probe in sockets:
            probe.bind(("127.0.0.1", 0))
        return [probe.getsockname()[1] for probe in sockets]
    finally:
        for probe in sockets:
            probe.close()


class LocalCluster:
    """Raft-lite nodes served in this trio run; each can be stopped and started again on the
    same port and data directory."""

    def __init__(self, nursery: trio.Nursery, tmp_path, count: int = 3) -> None:
        self.nursery = nursery
        self.tmp_path = tmp_path
        self.addresses = {i + 1: ("127.0.0.1", port) for i, port in enumerate(free_ports(count))}
        self.servers: dict[int, RaftServer] = {}
        self.scopes: dict[int, trio.CancelScope] = {}

    async def start(self, node_id: int) -> None:
        server = RaftServer(node_id=node_id, addresses=self.addresses,
                            data_dir=str(self.tmp_path / f"n{node_id}"), config=CONFIG)
        scope = trio.CancelScope()
        self.servers[node_id], self.scopes[node_id] = server, scope
        host, port = self.addresses[node_id]

        async def run(task_status=trio.TASK_STATUS_IGNORED):
            with scope:
                try:
                    await server.serve(host, port, task_status=task_status)
                finally:
                    server.storage.close()

        await self.nursery.start(run)

    async def start_all(self) -> None:
        for node_id in self.addresses:
            await self.start(node_id)

    def stop(self, node_id: int) -> None:
        self.scopes.pop(node_id).cancel()
        self.servers.pop(node_id)

    async def leader(self, timeout_s: float = 10.0) -> int:
        """The node that leads and has committed an entry of its own term."""
        with trio.fail_after(timeout_s):
            while True:
                for node_id, server in self.servers.items():
                    core = server.core
                    if core.is_leader and core.term_at(core.commit_index) == core.term:
                        return node_id
                await trio.sleep(0.01)

    def hosts(self, first: int | None = None) -> tuple[tuple[str, int], ...]:
        order = sorted(self.addresses, key=lambda i: (i != first, i))
        return tuple(self.addresses[i] for i in order)


async def test_a_cluster_restarted_from_its_data_directories_keeps_committed_data(nursery, tmp_path):
    cluster = LocalCluster(nursery, tmp_path)
    await cluster.start_all()
    leader = await cluster.leader()
    store = await open_raft_store(cluster.hosts(first=leader), session_timeout_s=2.0)
    for k in range(20):
        assert (await store.execute(Create(f"/kept/{k}", b"%d" % k))).code is MetaCode.OK
    await store.aclose()
    for node_id in list(cluster.servers):
        cluster.stop(node_id)
    await trio.sleep(0.1)
    await cluster.start_all()
    leader = await cluster.leader()
    store = await open_raft_store(cluster.hosts(first=leader), session_timeout_s=2.0)
    try:
        for k in (0, 19):
            assert (await store.execute(Get(f"/kept/{k}"))).data == b"%d" % k
    finally:
        await store.aclose()


async def test_a_watch_fires_when_the_leader_it_was_set_on_stops(nursery, tmp_path):
    cluster = LocalCluster(nursery, tmp_path)
    await cluster.start_all()
    leader = await cluster.leader()
    store = await open_raft_store(cluster.hosts(first=leader), session_timeout_s=3.0)
    try:
        await store.execute(Create("/w", b""))
        _, watch = await store.execute_watch(Get("/w"))
        assert not watch.is_fired
        cluster.stop(leader)
        with trio.fail_after(5):
            assert await watch.wait() == "connection lost"
    finally:
        await store.aclose()


async def test_opening_a_store_on_a_cluster_still_electing_is_quick(nursery, tmp_path):
    cluster = LocalCluster(nursery, tmp_path)
    await cluster.start_all()                  # no leader yet: the first member answers "not leader"
    with trio.fail_after(4):
        store = await open_raft_store(cluster.hosts(), session_timeout_s=2.0)
    await store.aclose()


async def test_the_session_survives_a_leader_change_while_the_old_leader_stays_up(nursery, tmp_path):
    cluster = LocalCluster(nursery, tmp_path)
    await cluster.start_all()
    old = await cluster.leader()
    store = await open_raft_store(cluster.hosts(first=old), session_timeout_s=2.0)
    try:
        assert (await store.execute(Create("/eph", b"", is_ephemeral=True))).code is MetaCode.OK
        new = next(i for i in cluster.servers if i != old)
        cluster.servers[new].core._start_election(now_ns())      # as when heartbeats are late
        cluster.servers[new]._pump()
        with trio.fail_after(5):
            while await cluster.leader() != new:        # the old leader steps down when asked
                await trio.sleep(0.01)
        assert old in cluster.servers and not cluster.servers[old].core.is_leader
        # The old leader refuses what it is sent now ("not leader": nothing done), so the
        # client takes the request to the new leader itself: the caller sees no CONNECTION_LOSS.
        with trio.fail_after(10):
            result = await store.execute(Create("/after", b""))
        assert result.code is MetaCode.OK, result
        assert not store.session_lost
        assert (await store.execute(Get("/eph"))).code is MetaCode.OK
    finally:
        await store.aclose()
