"""What a raft-lite metastore node publishes at /metrics (docs/metrics.md). BookKeeper has no
such process (its metadata lives in ZooKeeper or etcd), so every name is ours: metastore_raft_*
for the consensus (term, role, indexes), metastore_* for the tree and the clients it serves.
"""

from __future__ import annotations

from prometheus_client.core import Metric

from bkmetastore.raftlite.core import Role
from bktransports.metrics import counter, gauge


def metastore_families(server) -> list[Metric]:
    """The families of a RaftServer (bktransports.raftlite_server), read now."""
    core = server.core
    tree = core.sm.statistics()
    return [
        gauge("metastore_raft_term", "the node's current term", core.term),
        gauge("metastore_raft_role", "1 for the node's current role (follower, candidate, leader)",
              [({"role": role.value}, int(core.role is role)) for role in Role]),
        gauge("metastore_raft_leader", "the node id of the leader this node knows (-1: none)",
              -1 if core.leader_id is None else core.leader_id),
        gauge("metastore_raft_commit_index", "the highest log index known committed", core.commit_index),
        gauge("metastore_raft_last_applied", "the highest log index applied to the tree", core.last_applied),
        gauge("metastore_raft_last_index", "the highest index in the node's log", core.last_index),
        gauge("metastore_raft_snapshot_index", "the log index of the node's snapshot", core.snapshot_index),
        gauge("metastore_nodes", "nodes in the tree (as applied here)", tree.node_count),
        gauge("metastore_ephemeral_nodes", "ephemeral nodes in the tree", tree.ephemeral_count),
        gauge("metastore_sessions", "client sessions open", tree.session_count),
        counter("metastore_ops", "metadata operations applied to the tree", tree.op_count),
        counter("metastore_version_conflicts", "operations refused for a stale version (BAD_VERSION)",
                tree.conflict_count),
        counter("metastore_client_requests", "client requests received by this node, by kind (a follower "
                "refuses all but status)", [({"kind": kind}, n) for kind, n in sorted(server.request_counts.items())]),
        gauge("metastore_client_connections", "client connections open to this node", server.client_connection_count),
    ]
