"""bksim.raftlite_metastore: the simulated cluster on three raft-lite members, as its bookies and
processes see it (registration, sessions and their expiry, watches, lost answers, the world's
own linearizable reads)."""

import dataclasses
import random

import pytest

from bkcore.metaops import Children, Create, Get, MetaCode
from bkmetastore.raftlite.core import RaftNode, Reply
from bksim.metastore_client import LOST
from bksim.processes import Processes
from bksim.scenario import MS, S, Scenario
from bksim.world import SimWorld


def raft_world(**scenario_fields) -> tuple[SimWorld, Processes]:
    scenario = dataclasses.replace(Scenario(seed=1), metastore_kind="raftlite", **scenario_fields)
    world = SimWorld(scenario=scenario)
    for index in range(3):
        world.add_bookie(f"bookie-{index}")
    return world, Processes(world=world, rng=random.Random(1))


def run_for(world: SimWorld, seconds: float) -> None:
    world.loop.run_until(world.now_ns + int(seconds * S))


def submit(world: SimWorld, caller: str, command: list) -> list:
    answers = []
    world.metastore.submit(caller, command, answers.append)
    return answers


def test_bookies_register_once_a_leader_is_elected_and_keep_their_sessions_alive():
    world, _ = raft_world()
    run_for(world, 2)
    result = world.metastore.read_applied(Children(world.layout.available_path))
    assert set(result.children) >= {"bookie-0", "bookie-1", "bookie-2"}
    run_for(world, 3 * world.scenario.metastore.session_timeout_ns / S)     # pinged, not expired
    assert set(world.metastore.read_applied(Children(world.layout.available_path)).children) >= {
        "bookie-0", "bookie-1", "bookie-2"}


def test_a_silent_session_expires_by_the_leaders_rule_and_its_ephemeral_node_goes():
    world, _ = raft_world()
    run_for(world, 1)
    answers = submit(world, "p", ["open", True])
    run_for(world, 0.1)
    session = answers[0]
    answers = submit(world, "p", ["op", session, Create("/eph", is_ephemeral=True)])
    run_for(world, 0.1)
    assert answers[0].code is MetaCode.OK
    timeout_s = world.scenario.metastore.session_timeout_ns / S
    run_for(world, timeout_s * 0.5)
    assert world.metastore.read_applied(Get("/eph")).code is MetaCode.OK
    run_for(world, timeout_s)                          # never pinged
    assert world.metastore.read_applied(Get("/eph")).code is MetaCode.NO_NODE
    answers = submit(world, "p", ["ping", session])
    run_for(world, 0.1)
    assert answers == [False]


def test_the_leader_crashing_loses_requests_in_flight_and_fires_the_callers_watches():
    world, _ = raft_world()
    run_for(world, 1)
    metastore = world.metastore
    fired = []

    class Table:
        def fire_all(self, reason):
            fired.append(reason)

        def fire_changes(self, changes):
            pass

    metastore.attach_watches("p", Table())
    answers = submit(world, "p", ["op", None, Create("/a")])
    leader = metastore.members.leader()
    metastore.crash_member(leader, restart_after_ns=None)
    run_for(world, 0.1)
    assert answers == [LOST] and fired == ["connection lost"]
    run_for(world, 2)                                   # the other two elect a leader
    answers = submit(world, "p", ["op", None, Create("/b")])
    run_for(world, 0.1)
    assert answers[0].code is MetaCode.OK


def test_the_worlds_reads_refuse_when_no_live_member_has_applied_every_acknowledged_change():
    world, _ = raft_world()
    run_for(world, 1)
    metastore = world.metastore
    members = metastore.members
    leader = members.leader()
    lagging = [m for m in members.ids if m != leader][0]
    members.partition({lagging})                       # it hears nothing more
    answers = submit(world, "p", ["op", None, Create("/late")])
    run_for(world, 0.2)
    assert answers[0].code is MetaCode.OK
    for member in members.ids:
        if member != lagging:
            metastore.crash_member(member, restart_after_ns=None)
    assert members.core(lagging).last_applied < members.highest_commit_index
    assert metastore.read_applied(Get("/late")).code is MetaCode.CONNECTION_LOSS
    metastore.heal()                                   # all back; the log brings the lagging one up
    run_for(world, 2)
    assert metastore.read_applied(Get("/late")).code is MetaCode.OK


def answered_at_once(self, token, session_id, now_ns):
    """The bug this file's deposed-leader test must catch: a ping answered from the leader's
    own memory, without a heartbeat round confirming it still leads."""
    if not self.is_leader:
        return False
    self.touch(session_id, now_ns)
    self._effects.append(Reply(token, self.session_alive(session_id)))
    return True


@pytest.mark.parametrize("ping", ["real", "answered at once"])
def test_a_deposed_leader_serves_its_callers_but_never_confirms_their_pings(ping, monkeypatch):
    if ping == "answered at once":
        monkeypatch.setattr(RaftNode, "ping", answered_at_once)
    world, _ = raft_world(metastore=dataclasses.replace(Scenario(seed=1).metastore, session_timeout_ns=1 * S),
                          metastore_check_quorum=False)
    run_for(world, 1)
    metastore, members = world.metastore, world.metastore.members
    answers = submit(world, "owner", ["open", True])
    run_for(world, 0.1)
    session = answers[0]
    old = members.leader()
    members.partition({old})
    run_for(world, 1)
    assert members.core(old).is_leader and members.leader() != old
    pings = submit(world, "owner", ["ping", session])   # still connected to the old leader
    run_for(world, 2.5)
    assert not members.up_to_date().sm.is_session_alive(session)   # the new leader expired it
    if ping == "real":
        assert pings == [LOST]                          # timed out unconfirmed, never True
    else:
        assert pings == [True]                          # the stretched lease this test exists for


def world_with_a_session(session_timeout_ns: int) -> tuple[SimWorld, object, int]:
    """(world, its raft-lite members, a session "owner" opened once a leader was elected)"""
    world, _ = raft_world(metastore=dataclasses.replace(Scenario(seed=1).metastore,
                                                        session_timeout_ns=session_timeout_ns))
    run_for(world, 1)
    answers = submit(world, "owner", ["open", True])
    run_for(world, 0.1)
    return world, world.metastore.members, answers[0]


def test_with_check_quorum_a_cut_off_leader_steps_down_and_its_callers_find_the_next():
    world, members, session = world_with_a_session(1 * S)
    old = members.leader()
    members.partition({old})
    pings = submit(world, "owner", ["ping", session])
    run_for(world, 0.5)
    assert pings == [LOST] and not members.core(old).is_leader     # stepped down: "not leader"
    run_for(world, 0.4)
    pings = submit(world, "owner", ["ping", session])                # at the successor
    run_for(world, 0.1)
    assert pings == [True]


def test_a_deposed_leader_refuses_what_it_is_sent_and_the_request_is_taken_to_its_successor():
    """As the real client: a refusal ("not leader") did nothing, so the request goes on to the
    leader; a read pending when its leader lost its place is asked again; a write pending then
    may or may not be committed by the successor, so it is LOST."""
    world, members, session = world_with_a_session(2 * S)
    created = submit(world, "owner", ["op", session, Create("/a", b"1")])
    run_for(world, 0.1)
    assert created[0].code is MetaCode.OK
    old = members.leader()
    members.partition({old})                    # clients still reach it; it cannot commit
    read = submit(world, "owner", ["op", session, Get("/a")])
    write = submit(world, "owner", ["op", session, Create("/b", b"")])
    run_for(world, 0.9)
    assert not members.core(old).is_leader and members.leader() not in (None, old)
    assert write == [LOST]
    assert [(r.code, r.data) for r in read] == [(MetaCode.OK, b"1")]
    world.metastore._connected["owner"] = old   # still connected to the deposed member
    refused = submit(world, "owner", ["op", session, Create("/c", b"")])
    run_for(world, 0.2)
    assert [r.code for r in refused] == [MetaCode.OK]
    assert world.metastore.read_applied(Get("/c")).code is MetaCode.OK
