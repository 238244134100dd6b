"""raft-lite core in the simulator: elections, the paper's safety scenarios, snapshots, leader
failure, sessions, and the register checker itself. Linearizability of compare-and-set histories
under partitions, crashes and loss is in test_raft_sim.py."""


from bkcore.metaops import Children, Create, Get, MetaCode, op_to_list, result_from_list
from bkmetastore.raftlite.core import RaftConfig, Role
from bksim.raftlite_world import MS, HistoryOp, RaftWorld, check_register_linearizable


def create(path: str, data: bytes = b"", session: int = 0, ephemeral: bool = False) -> list:
    return ["op", session, op_to_list(Create(path, data, ephemeral))]


def test_one_leader_is_elected_and_commits():
    world = RaftWorld(seed=1)
    leader = world.wait_for_leader()
    assert [n.core.role for n in world.nodes.values()].count(Role.LEADER) == 1
    reply = world.submit(create("/a", b"x"))
    assert result_from_list(reply.result).code is MetaCode.OK
    world.run_for(200 * MS)
    for node in world.nodes.values():           # every node applied it
        assert node.core.sm.apply(Get("/a")).data == b"x"
    assert world.nodes[leader].durable.term == world.nodes[leader].core.term


def test_single_node_cluster_works():
    world = RaftWorld(seed=2, node_count=1)
    world.wait_for_leader()
    assert result_from_list(world.submit(create("/solo")).result).code is MetaCode.OK
    assert result_from_list(world.read(Get("/solo")).result).code is MetaCode.OK


def test_leader_failure_elects_another_and_keeps_committed_data():
    world = RaftWorld(seed=3)
    first = world.wait_for_leader()
    world.submit(create("/kept", b"1"))
    world.crash(first)
    second = world.wait_for_leader()
    assert second != first
    assert result_from_list(world.read(Get("/kept")).result).data == b"1"
    world.restart(first)
    world.submit(create("/later"))
    world.run_for(500 * MS)
    assert world.nodes[first].core.sm.apply(Get("/later")).code is MetaCode.OK


def test_a_minority_leader_commits_nothing_and_its_entries_are_replaced():
    """Log conflicts: a leader cut off with a minority appends entries that never commit; the
    majority elects a new leader; after healing the old leader's uncommitted suffix is
    overwritten (Figure 7 of the paper in small)."""
    world = RaftWorld(seed=4)
    old = world.wait_for_leader()
    world.partition({old})
    token = ("stranded", 1)
    world.nodes[old].core.propose(token, create("/stranded"), world.loop.now_ns)
    world._perform(old)
    world.run_for(2_000 * MS)
    assert token not in world.replies or world.replies[token].error      # never acknowledged
    new = world.leader()
    assert new is not None and new != old
    world.submit(create("/majority"))
    world.heal()
    world.run_for(2_000 * MS)
    for node in world.nodes.values():
        assert node.core.sm.apply(Get("/stranded")).code is MetaCode.NO_NODE
        assert node.core.sm.apply(Get("/majority")).code is MetaCode.OK


def test_a_candidate_with_an_older_log_cannot_win():
    world = RaftWorld(seed=5)
    leader = world.wait_for_leader()
    laggard = next(i for i in world.ids if i != leader)
    world.partition({laggard})
    for i in range(5):
        world.submit(create(f"/n{i}"))
    world.crash(leader)
    world.heal()
    world.partition({leader})                       # leader is down anyway; laggard + third remain
    new = world.wait_for_leader()
    assert new != laggard                           # only the up-to-date node can be elected
    assert result_from_list(world.read(Get("/n4")).result).code is MetaCode.OK


def test_dueling_candidates_settle_on_one_leader():
    config = RaftConfig(election_timeout_min_ns=150 * MS, election_timeout_max_ns=151 * MS)
    world = RaftWorld(seed=6, node_count=5, config=config)
    world.wait_for_leader(timeout_ns=30_000 * MS)
    world.run_for(1_000 * MS)
    terms = {n.core.term for n in world.nodes.values()}
    leaders = [i for i, n in world.nodes.items() if n.core.is_leader]
    assert len(leaders) == 1 and len(terms) == 1


def test_a_follower_far_behind_catches_up_by_snapshot():
    world = RaftWorld(seed=7)                       # snapshot_threshold=50
    leader = world.wait_for_leader()
    behind = next(i for i in world.ids if i != leader)
    world.crash(behind)
    for i in range(200):
        world.submit(create(f"/k{i:03d}", b"v"))
    assert world.nodes[leader].core.snapshot_index > 0
    world.restart(behind)
    world.run_for(2_000 * MS)
    core = world.nodes[behind].core
    assert core.snapshot_index > 0
    assert len(core.sm.apply(Children("/")).children) == 200


def test_sessions_expire_only_when_silent():
    world = RaftWorld(seed=8, config=RaftConfig(session_timeout_ns=1_000 * MS, snapshot_threshold=50))
    leader = world.wait_for_leader()
    session = world.submit(["open"]).result
    world.submit(create("/eph", session=session, ephemeral=True))
    for _ in range(10):                             # kept alive for 2 s
        core = world.nodes[world.leader()].core
        core.ping(("ping", world.loop.now_ns), session, world.loop.now_ns)
        world._perform(world.leader())
        world.run_for(200 * MS)
    assert result_from_list(world.read(Get("/eph")).result).code is MetaCode.OK
    world.run_for(2_000 * MS)                       # silent: expired by the leader
    assert result_from_list(world.read(Get("/eph")).result).code is MetaCode.NO_NODE
    assert not world.nodes[leader].core.session_alive(session)


def test_checker_rejects_an_impossible_history():
    bad = [HistoryOp("cas", (0, b"a"), 0, 10, (True, 1)), HistoryOp("get", (), 20, 30, (b"init", 0))]
    assert not check_register_linearizable(bad)
    good = [HistoryOp("cas", (0, b"a"), 0, 10, (True, 1)), HistoryOp("get", (), 5, 30, (b"a", 1)),
            HistoryOp("cas", (0, b"b"), 1, None, None)]
    assert check_register_linearizable(good)
