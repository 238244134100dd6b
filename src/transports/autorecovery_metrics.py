"""What an autorecovery daemon publishes at /metrics (docs/metrics.md), under BookKeeper's
names (ReplicationStats): its auditor's under <scope>auditor_, its replication worker's under
<scope>replication_worker_, where the scope is "" for the daemon on its own (`bk autorecovery`,
as BookKeeper's AutoRecoveryMain) and "replication_" for the daemon inside a bookie (as
BookKeeper's EmbeddedServer scopes it). Numbers of our own are autorecovery_*.

Where ours differ: NUM_LEDGERS_CHECKED counts the ledgers whose metadata an audit read (our
audit finds lost bookies there; BookKeeper's ledger checker also reads entries), and
NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED the ledgers fully re-replicated (a worker that copies
part of a ledger counts a failure and tries again).
"""

from __future__ import annotations

from prometheus_client.core import Metric

from bktransports.metrics import bk_counter, counter, gauge, op_stats

STANDALONE_SCOPE = ""
IN_BOOKIE_SCOPE = "replication_"


def autorecovery_families(daemon, scope: str) -> list[Metric]:
    """The families of an Autorecovery daemon (bktransports.autorecovery), read now."""
    counts, auditor, worker = daemon.counts, f"{scope}auditor_", f"{scope}replication_worker_"
    return [
        op_stats(f"{auditor}AUDIT_BOOKIES_TIME", "the latency distribution of auditing all the bookies (ms; an "
                 "audit round)", daemon.audit_stats),
        bk_counter(f"{auditor}NUM_LEDGERS_CHECKED", "the number of ledgers checked by the auditor (their metadata "
                   "read by an audit)", counts["ledgers_checked"]),
        bk_counter(f"{auditor}election_attempts", "attempts to become the auditor", counts["election_attempts"]),
        op_stats(f"{worker}rereplicate", "operation stats of re-replicating ledgers (ms; success: the ledger "
                 "is fully replicated)", daemon.rereplicate_stats),
        bk_counter(f"{worker}NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED", "the number of ledgers re-replicated (fully)",
                   counts["ledgers_replicated"]),
        bk_counter(f"{worker}NUM_ENTRIES_WRITTEN", "the number of entries written by re-replication",
                   counts["entries_copied"]),
        gauge("autorecovery_is_auditor", "1 while this daemon is the cluster's auditor", int(daemon.is_auditor)),
        counter("autorecovery_audits", "audit rounds run", counts["audits"]),
        counter("autorecovery_audits_skipped", "audit rounds skipped: replication switched off",
                counts["audits_skipped"]),
        counter("autorecovery_ledgers_marked", "ledgers this auditor marked under-replicated",
                counts["ledgers_marked"]),
        counter("autorecovery_fragments_copied", "ledger fragments copied to another bookie",
                counts["fragments_copied"]),
        counter("autorecovery_replication_failures", "ledgers a worker could not fully re-replicate (tried again "
                "later)", counts["replication_failures"]),
    ]
