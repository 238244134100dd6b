"""Scenario: the shape of one simulated run, drawn from its seed (swarm testing).

One seed decides everything: the cluster (bookies, E/Qw/Qa), the workload's mix, and every
fault knob. Different seeds stress different mixes; any of them can be replayed exactly.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field

from bkcore.bookie.bookie import BookieConfig
from bkcore.client.config import ClientConfig
from bksim.options import DiskOptions, NetworkOptions

US = 1_000
MS = 1_000_000
S = 1_000_000_000

FAULT_KINDS = ("net", "partition", "crash", "pause", "disk", "metastore")
# What a run does: "ledger" (the protocol alone), "stream" (log streams in simulated
# processes), "table" (the table service), "mixed" (streams and tables side by side).
WORKLOADS = ("ledger", "stream", "table", "mixed")
METASTORE_KINDS = ("memory", "raftlite")


@dataclass(frozen=True, slots=True)
class MetastoreOptions:
    """Latency of the metastore, windows when it is unreachable, and answers lost on the way
    back (the op applied, the caller told CONNECTION_LOSS)."""

    latency_min_ns: int = 200_000
    latency_mean_ns: int = 500_000
    outage_probability_per_second: float = 0.0
    outage_duration_mean_ns: int = 0
    response_loss_probability: float = 0.0
    session_timeout_ns: int = 2 * S
    # A caller learns of an unreachable metastore within this long (ZooKeeper's client reports
    # connection loss well before the session expires).
    connection_timeout_ns: int = 500 * MS

    @classmethod
    def swarm(cls, rng: random.Random) -> MetastoreOptions:
        return cls(outage_probability_per_second=rng.choice([0.0, 0.05, 0.2]),
                   outage_duration_mean_ns=rng.choice([200 * MS, 1 * S, 3 * S]),
                   response_loss_probability=rng.choice([0.0, 0.01, 0.05]))


@dataclass(frozen=True, slots=True)
class Scenario:
    seed: int
    bookie_count: int = 4
    ensemble_size: int = 3
    write_quorum_size: int = 3
    ack_quorum_size: int = 2
    writer_count: int = 2
    tailing_reader_count: int = 1
    recoverer_count: int = 2
    adds_in_flight_max: int = 8
    add_interval_mean_ns: int = 5 * MS
    entries_per_ledger_max: int = 200
    recovery_interval_mean_ns: int = 3 * S
    concurrent_recovery_probability: float = 0.3
    delete_probability: float = 0.1
    duration_ns: int = 10 * S
    settle_ns: int = 30 * S             # after healing: the bound for liveness
    is_liveness: bool = False
    faults: frozenset[str] = frozenset(FAULT_KINDS)
    network: NetworkOptions = field(default_factory=NetworkOptions.none)
    disk: DiskOptions = field(default_factory=DiskOptions.none)
    metastore: MetastoreOptions = field(default_factory=MetastoreOptions)
    crash_probability_per_second: float = 0.0
    pause_probability_per_second: float = 0.0
    restart_delay_mean_ns: int = 1 * S
    # Client timeouts are a deployment's choice; seeds draw them so short ones get exercised.
    request_timeout_ns: int = 1 * S
    # Size of each bookie's disk: small ones fill up and turn bookies readonly.
    disk_capacity_size: int = 1 << 40
    # Journal preallocation chunk (journalPreAllocSizeMB, scaled to the simulator's small
    # journal files); 0: journals are appended to. Seeds draw it, so both paths are exercised.
    journal_prealloc_size: int = 16 << 10
    # Journal writes a bookie keeps in flight (journal_writes_in_flight_max): 1 writes the next
    # group once the last is answered; more let a later write complete while answers are still
    # to come. Seeds draw it, so both orders of events are exercised.
    journal_writes_in_flight_max: int = 2
    # How long a client's connection to a bookie stays busy writing after it was given sends:
    # bookies the core names in a HeldSends meanwhile are pulled when it is done, so adds
    # held across several inputs leave in one batch (0: every bookie is pulled at once).
    client_write_busy_ns: int = 0
    workload: str = "ledger"
    # Wall clocks of application processes differ by up to this much (TTLs, segment ctimes).
    clock_skew_max_ns: int = 0
    # Stream workload: readers, the segment size that rolls, retention by size (0: none).
    stream_reader_count: int = 2
    stream_rolling_size: int = 16 << 10
    stream_retention_size: int = 0
    # Table workload: server and client processes, hash ranges of the table, commands between
    # checkpoints of a range (small: checkpoints are written and restored in every run), and
    # how long a client waits for an answer before the outcome counts as unknown.
    table_server_count: int = 2
    table_client_count: int = 2
    table_watcher_count: int = 1
    table_range_count: int = 2
    table_checkpoint_every: int = 20
    table_request_timeout_ns: int = 1 * S
    # Servers that join the table service late (after the first ones, at a time the workload
    # draws), so ranges are handed over to a newcomer while clients use them.
    table_late_server_count: int = 0
    # The metastore: "memory" (one tree, faults drawn as outages and lost answers) or
    # "raftlite" (three raft-lite members that crash and get cut off; sessions expire by the
    # leader's rule). Drawn for the workloads of application processes.
    metastore_kind: str = "memory"
    # raft-lite only: how often its leader is cut off from the other members (clients still
    # reach it, and a deposed leader goes on believing it leads until it hears otherwise).
    metastore_leader_cut_off_per_second: float = 0.0
    # raft-lite only: whether a leader that stops hearing from a majority steps down (check
    # quorum). Without it a deposed leader lingers until it hears of its successor: the worst
    # case for its reads and pings, which must still never be answered.
    metastore_check_quorum: bool = True

    def bookie_config(self) -> BookieConfig:
        return BookieConfig(journal_writes_in_flight_max=self.journal_writes_in_flight_max)

    def client_config(self) -> ClientConfig:
        return ClientConfig(add_entry_timeout_ns=self.request_timeout_ns,
                            read_entry_timeout_ns=self.request_timeout_ns,
                            speculative_read_timeout_ns=max(self.request_timeout_ns // 4, 1 * MS),
                            explicit_lac_interval_ns=200 * MS, explicit_lac_hold_ns=200 * MS)

    @classmethod
    def standard(cls, *, seed: int, duration_ns: int = 10 * S, faults=FAULT_KINDS,
                 is_liveness: bool = False, workload: str = "ledger") -> Scenario:
        """The benchmark's fixed shape: 3 bookies + a spare, E3 Qw3 Qa2, 2 writers, 1 tailing
        reader; fault knobs still drawn from the seed."""
        return cls.draw(seed=seed, duration_ns=duration_ns, faults=faults, is_liveness=is_liveness,
                        is_shape_fixed=True, workload=workload)

    @classmethod
    def draw(cls, *, seed: int, duration_ns: int = 10 * S, faults=FAULT_KINDS,
             is_liveness: bool = False, is_shape_fixed: bool = False, workload: str | None = None) -> Scenario:
        """The scenario of `seed`; its workload is drawn from the seed too unless given (the
        other knobs do not depend on whether it was)."""
        rng = random.Random(seed)
        faults = frozenset(faults)
        unknown = faults - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {', '.join(FAULT_KINDS)}")
        shape: dict = {}
        if not is_shape_fixed:
            ack = rng.choice([1, 2, 2, 2, 3])
            write = rng.choice([w for w in (1, 2, 3, 3, 4) if w >= ack])
            ensemble = rng.choice([e for e in (2, 3, 3, 4, 5) if e >= write])
            shape = dict(
                bookie_count=ensemble + rng.choice([0, 1, 1, 2, 3]),
                ensemble_size=ensemble, write_quorum_size=write, ack_quorum_size=ack,
                writer_count=rng.choice([1, 2, 3]), tailing_reader_count=rng.choice([0, 1, 2]),
                recoverer_count=rng.choice([1, 2]), adds_in_flight_max=rng.choice([1, 4, 16]),
                add_interval_mean_ns=rng.choice([1 * MS, 5 * MS, 20 * MS]),
                entries_per_ledger_max=rng.choice([20, 200, 2000]),
                recovery_interval_mean_ns=rng.choice([1 * S, 3 * S, 8 * S]),
                concurrent_recovery_probability=rng.choice([0.0, 0.3, 0.8]),
                delete_probability=rng.choice([0.0, 0.1, 0.3]))
        # Draw every knob whether or not its fault kind is on, so the other knobs of a seed do
        # not shift when a kind is switched off.
        network = NetworkOptions.swarm(rng)
        disk = DiskOptions.swarm(rng)
        metastore = MetastoreOptions.swarm(rng)
        crash = rng.choice([0.0, 0.05, 0.2, 0.5])
        pause = rng.choice([0.0, 0.05, 0.2])
        restart_delay = rng.choice([200 * MS, 1 * S, 4 * S])
        request_timeout = rng.choice([250 * MS, 1 * S, 1 * S, 5 * S])
        disk_capacity = rng.choice([1 << 40, 1 << 40, 48 << 10, 160 << 10])
        journal_prealloc = rng.choice([0, 4 << 10, 16 << 10])
        journal_writes_in_flight = rng.choice([1, 2, 3])
        client_write_busy = rng.choice([0, 100 * US, 1 * MS])
        # Knobs added later are drawn after the earlier ones, so those keep their values.
        clock_skew = rng.choice([0, 0, 5 * MS, 50 * MS])
        services = dict(stream_reader_count=rng.choice([1, 2, 3]),
                        stream_rolling_size=rng.choice([2 << 10, 16 << 10, 128 << 10]),
                        stream_retention_size=rng.choice([0, 0, 32 << 10]))
        drawn_workload = rng.choice(WORKLOADS)
        workload = drawn_workload if workload is None else workload
        tables = dict(table_server_count=rng.choice([1, 2, 3]), table_client_count=rng.choice([1, 2, 3]),
                      table_watcher_count=rng.choice([1, 2]), table_range_count=rng.choice([1, 2, 3]),
                      table_checkpoint_every=rng.choice([2, 5, 15]),
                      table_request_timeout_ns=rng.choice([300 * MS, 1 * S, 3 * S]))
        # Short sessions make a cut-off range owner lose its ranges within a short run (the
        # ledger workload keeps the default: its bookies' sessions are not what it tests).
        session_timeout = rng.choice([500 * MS, 1 * S, 2 * S])
        metastore_kind = rng.choice(METASTORE_KINDS)
        leader_cut_off = rng.choice([0.2, 0.5, 1.0])
        check_quorum = rng.choice([True, False])
        tables["table_late_server_count"] = rng.choice([0, 0, 1, 2])
        if workload != "ledger":
            metastore = dataclasses.replace(metastore, session_timeout_ns=session_timeout)
        else:
            metastore_kind = "memory"
        if workload not in WORKLOADS:
            raise ValueError(f"unknown workload {workload!r}; known: {', '.join(WORKLOADS)}")
        if "net" not in faults:
            network = dataclasses.replace(network, loss_probability=0.0, duplicate_probability=0.0,
                                          reorder_probability=0.0)
        if "partition" not in faults:
            network = dataclasses.replace(network, partition_probability_per_second=0.0)
        return cls(
            seed=seed, duration_ns=duration_ns, is_liveness=is_liveness, faults=faults, **shape,
            network=network,
            disk=disk if "disk" in faults else DiskOptions.none(),
            metastore=metastore if "metastore" in faults else MetastoreOptions(),
            crash_probability_per_second=crash if "crash" in faults else 0.0,
            pause_probability_per_second=pause if "pause" in faults else 0.0,
            restart_delay_mean_ns=restart_delay, request_timeout_ns=request_timeout,
            disk_capacity_size=disk_capacity if "disk" in faults else 1 << 40,
            journal_prealloc_size=journal_prealloc, journal_writes_in_flight_max=journal_writes_in_flight,
            client_write_busy_ns=client_write_busy,
            workload=workload, clock_skew_max_ns=clock_skew,
            **services, **tables, metastore_kind=metastore_kind,
            metastore_leader_cut_off_per_second=leader_cut_off if "metastore" in faults else 0.0,
            metastore_check_quorum=check_quorum)

    def describe(self) -> list[str]:
        return [
            f"seed={self.seed} workload={self.workload} mode={'liveness' if self.is_liveness else 'safety'} "
            f"duration={self.duration_ns / S:g}s faults={','.join(sorted(self.faults)) or 'none'}",
            f"cluster: bookies={self.bookie_count} E={self.ensemble_size} Qw={self.write_quorum_size} "
            f"Qa={self.ack_quorum_size} journal_prealloc={self.journal_prealloc_size} "
            f"journal_writes_in_flight_max={self.journal_writes_in_flight_max}",
            f"workload: writers={self.writer_count} tailing_readers={self.tailing_reader_count} "
            f"recoverers={self.recoverer_count} adds_in_flight_max={self.adds_in_flight_max} "
            f"add_interval_mean={self.add_interval_mean_ns / MS:g}ms entries_per_ledger_max={self.entries_per_ledger_max}",
            f"network: {self.network}",
            f"disk: {self.disk} capacity={self.disk_capacity_size}",
            f"metastore: {self.metastore_kind} {self.metastore}"
            + (f" leader_cut_off/s={self.metastore_leader_cut_off_per_second}"
               f" check_quorum={self.metastore_check_quorum}" if self.metastore_kind == "raftlite" else ""),
            f"process: crash/s={self.crash_probability_per_second} pause/s={self.pause_probability_per_second} "
            f"restart_delay_mean={self.restart_delay_mean_ns / MS:g}ms "
            f"client_request_timeout={self.request_timeout_ns / MS:g}ms "
            f"client_write_busy={self.client_write_busy_ns / MS:g}ms clock_skew_max={self.clock_skew_max_ns / MS:g}ms",
            f"streams: readers={self.stream_reader_count} rolling_size={self.stream_rolling_size} "
            f"retention_size={self.stream_retention_size}",
            f"tables: servers={self.table_server_count} late_servers={self.table_late_server_count} "
            f"clients={self.table_client_count} watchers={self.table_watcher_count} ranges={self.table_range_count} "
            f"checkpoint_every={self.table_checkpoint_every} request_timeout={self.table_request_timeout_ns / MS:g}ms",
        ]
