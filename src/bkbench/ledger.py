"""`bk bench ledger`: the library against a local cluster of real processes on real disk.

Starts a standalone cluster (raft-lite metastore, N bookie processes, journal fdatasync on every
group commit) in a temp dir with free ports, then from this process:
  one at a time   — add, wait for the acknowledgement, repeat: adds/s, p50/p99/p999 latency;
  pipelined       — up to --in-flight adds outstanding (the client coalesces them into
                    multi-entry frames per bookie): adds/s, MiB/s, latency percentiles;
  half peak load  — adds started at a steady half of the pipelined rate: latency percentiles
                    of a writer that does not saturate the cluster;
  tail visibility — a long-polling reader on the same ledger: time from an add's
                    acknowledgement to the reader seeing it (p50/p99).
Before the cluster starts, disk_quorum_fdatasync measures the floor the shared disk sets for
one add: Qw preallocated files written and fdatasynced at the same moment, timed until the
Qa-th is done (bkbench.journal.raw_fdatasync_quorum); raw_sequential is the disk's bandwidth
(1 MiB writes, each fdatasynced). The pipelined run reports what the device wrote meanwhile:
every entry reaches it 2 x Qw times (each bookie's journal, then its entry log), and
disk_bound_adds_per_second is the rate at which those bytes would take all of raw_sequential.
Each phase reports what a raw disk loop beside it saw (disk_probe_*: bkbench.disk_probe), so a
p99 set by the disk stopping on its own is told from one the bookies made.
Pipelined and half peak load report the CPU they took: the client's and the bookies' per add,
and the machine's busy fraction (at 1.0 the adds wait for CPUs, whatever the disk allows).
This process calls bkclient.tune_gc() first, as the library advises for a busy writer (the
bookies do the same in their own processes); --default-gc leaves CPython's collector as it is.
With --peers, once the cluster has stopped, the first two run again against 3-node NATS JetStream
and etcd clusters (bkbench.peers), and "ratios" compares bookkeeper's rates with theirs.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections import deque

import trio

from bkbench import announce
from bkbench.journal import (
    MIB, device_write_rate, device_written_bytes, disk_ceiling, raw_fdatasync_quorum, raw_sequential,
)
from bkbench.cpu_usage import CpuMeter
from bkbench.stalls import AddSamples, PhaseWatch
from bkbench.summaries import adds_summary, percentile_ms


PACE_TICK_S = 0.001
DISK_FLOOR_SECONDS = 2.0
# The pipelined load starts at most this many adds in one step of its loop, then lets the loop
# run: refilling 2,000 in flight at once held this process's loop for 10-20 ms (the stall
# recorder named the bench's own task), and the loop pauses it reports are the client's.
REFILL_SLICE_ADDS = 256


async def _one_at_a_time(bk, args, payload: bytes) -> dict:
    ledger = await bk.create_ledger(ensemble=args.ensemble, write_quorum=args.write_quorum,
                                    ack_quorum=args.ack_quorum, password=b"bench")
    latencies = []
    started = time.perf_counter()
    deadline = started + args.seconds
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        await ledger.add(payload)
        latencies.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - started
    await ledger.close()
    return adds_summary(latencies, elapsed)


class _AddLoad:
    """Adds started without waiting (WriteHandle.start_add, a completion callback each): what
    pipelined and paced measurements share. One writer's adds resolve in the order they were
    started, so their start times wait in a FIFO and one bound method serves every add. (An
    add refused at once, ahead of earlier ones, would shift the FIFO by one; the measurements
    stop at the first error anyway.)"""

    def __init__(self, ledger, payload: bytes, *, samples: AddSamples | None = None) -> None:
        self._ledger, self._payload = ledger, payload
        self.latencies: list[float] = []
        # Each add's wall time started and latency, for a timeline (None: not kept).
        self._samples = samples
        self._wall_offset = time.time() - time.perf_counter()
        self.errors: list[str] = []
        self.in_flight = 0
        self._changed = trio.Event()
        self._started_at: deque[float] = deque()

    def start_add(self) -> None:
        self.in_flight += 1
        self._started_at.append(time.perf_counter())
        self._ledger.start_add(self._payload, self._on_done)

    def _on_done(self, entry_id, error) -> None:
        started_at = self._started_at.popleft()
        if error is not None:
            self.errors.append(repr(error))
        else:
            latency = time.perf_counter() - started_at
            self.latencies.append(latency)
            if self._samples is not None:
                self._samples.append(started_at + self._wall_offset, latency * 1e3)
        self.in_flight -= 1
        self._changed.set()

    async def until_some_complete(self) -> None:
        self._changed = trio.Event()
        await self._changed.wait()

    async def drain(self) -> None:
        while self.in_flight:
            await self.until_some_complete()


async def _pipelined(bk, args, payload: bytes, *, device_dir: str | None = None,
                     processes: dict[str, list[int]] | None = None) -> dict:
    ledger = await bk.create_ledger(ensemble=args.ensemble, write_quorum=args.write_quorum,
                                    ack_quorum=args.ack_quorum, password=b"bench")
    load = _AddLoad(ledger, payload)
    written_before = device_written_bytes(device_dir) if device_dir else None
    started = time.perf_counter()
    cpu = CpuMeter(processes)
    deadline = started + args.seconds
    while time.perf_counter() < deadline and not load.errors:
        while load.in_flight < args.in_flight:
            for _ in range(min(REFILL_SLICE_ADDS, args.in_flight - load.in_flight)):
                load.start_add()
            await trio.lowlevel.checkpoint()
        await load.until_some_complete()
    await load.drain()
    elapsed = time.perf_counter() - started
    cpu_used = cpu.per_operation(len(load.latencies), "add")
    # Every entry reaches the disk 2 x Qw times: each bookie's journal, then its entry log.
    device = device_write_rate(device_dir, written_before, elapsed)
    await ledger.close()
    return {"in_flight": args.in_flight, **adds_summary(load.latencies, elapsed),
            "mib_per_second": round(len(load.latencies) * len(payload) / MIB / elapsed, 2),
            **cpu_used, **device, "errors": load.errors[:3]}


async def _paced(bk, args, payload: bytes, rate: float, *, processes: dict[str, list[int]] | None = None,
                 samples: AddSamples | None = None) -> dict:
    """Adds started at a steady `rate` per second (open loop: not waiting for earlier ones), so
    the latencies are those of a writer at that load, not of one saturating the cluster. With
    the CPU that load took: of the client, of `processes`, and the machine's busy fraction (at
    1.0 the adds queue for CPUs, whatever the disk could do)."""
    ledger = await bk.create_ledger(ensemble=args.ensemble, write_quorum=args.write_quorum,
                                    ack_quorum=args.ack_quorum, password=b"bench")
    load = _AddLoad(ledger, payload, samples=samples)
    started = time.perf_counter()
    cpu = CpuMeter(processes)
    issued = 0
    while (now := time.perf_counter()) - started < args.seconds and not load.errors:
        due = int((now - started) * rate)
        for _ in range(due - issued):
            load.start_add()
        issued = max(issued, due)
        await trio.sleep(PACE_TICK_S)
    await load.drain()
    elapsed = time.perf_counter() - started
    cpu_used = cpu.per_operation(len(load.latencies), "add")
    await ledger.close()
    return {"target_adds_per_second": round(rate), **adds_summary(load.latencies, elapsed), **cpu_used,
            "errors": load.errors[:3]}


async def _tail_visibility(bk, args, payload: bytes) -> dict:
    ledger = await bk.create_ledger(ensemble=args.ensemble, write_quorum=args.write_quorum,
                                    ack_quorum=args.ack_quorum, password=b"bench")
    reader = await bk.open_ledger(ledger.ledger_id, password=b"bench", recovery=False)
    acked_at: dict[int, float] = {}
    delays: list[float] = []
    count = 2000

    async def follow() -> None:
        async for entry_id, _ in reader.tail():
            seen = time.perf_counter()
            if entry_id in acked_at:
                delays.append(max(0.0, seen - acked_at[entry_id]))
            if entry_id == count - 1:
                return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follow)
        deadline = time.perf_counter() + args.seconds
        for _ in range(count):
            entry_id = await ledger.add(payload)
            acked_at[entry_id] = time.perf_counter()
            if time.perf_counter() > deadline:
                break
            await trio.sleep(0.001)    # a steady trickle, so the reader is waiting each time
        await ledger.close()
    return {"entries": len(delays), "visibility_p50_ms": percentile_ms(delays, 0.5),
            "visibility_p99_ms": percentile_ms(delays, 0.99)}


def bench_ledger(args) -> int:
    from bklocal.processes import free_ports
    from bklocal.standalone import StandaloneCluster
    from bktransports.gc_tuning import tune_gc
    from bkclient.library import connect

    root = tempfile.mkdtemp(dir=args.dir, prefix="bench-ledger-")
    announce("the disk's own floor (raw fdatasync, sequential writes)")
    # The floor the disk itself sets for an add: its bookies' journals all live on it.
    disk_floor = raw_fdatasync_quorum(root, DISK_FLOOR_SECONDS, files=args.write_quorum, quorum=args.ack_quorum)
    disk_bandwidth = raw_sequential(root, DISK_FLOOR_SECONDS)
    cluster = StandaloneCluster.on_free_ports(root, bookie_count=args.bookies, http_ports=free_ports(args.bookies))
    payload = os.urandom(args.entry_size)
    try:
        announce("starting the cluster")
        cluster.start(log=lambda line: None)
        if not args.default_gc:
            tune_gc()

        async def measure() -> dict:
            bookies = {"bookies": [bookie.process.pid for bookie in cluster.bookies]}
            async with connect(cluster.metastore_uri) as bk:
                watch = PhaseWatch(bk.stalls, cluster.http_ports, disk_probe_dir=root)
                samples = watch.adds if args.timeline else None
                pipelined = await watch.run("pipelined adds", _pipelined, bk, args, payload, device_dir=root,
                                            processes=bookies)
                pipelined.update(disk_ceiling(pipelined, disk_bandwidth.get("mib_per_second"), "adds_per_second"))
                peak = pipelined["adds_per_second"]
                results = {
                    "one_at_a_time": await watch.run("one add at a time", _one_at_a_time, bk, args, payload),
                    "pipelined": pipelined,
                    "quarter_peak_load": await watch.run("adds at a quarter of the peak rate", _paced, bk, args, payload, peak / 4,
                                                         processes=bookies, samples=samples),
                    "half_peak_load": await watch.run("adds at half the peak rate", _paced, bk, args, payload, peak / 2,
                                                      processes=bookies, samples=samples),
                    "tail_visibility": await watch.run("tail visibility", _tail_visibility, bk, args, payload)}
                if args.timeline:
                    watch.draw(args.timeline)
                    results["timeline"] = args.timeline
                return results

        results = trio.run(measure)
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    report = {"benchmark": "ledger", "bookies": args.bookies, "ensemble": args.ensemble,
              "write_quorum": args.write_quorum, "ack_quorum": args.ack_quorum, "entry_size": args.entry_size,
              "client_gc": "cpython defaults" if args.default_gc else "bkclient.tune_gc()",
              "disk_quorum_fdatasync": disk_floor, "raw_sequential": disk_bandwidth,
              **results}
    failed = False
    if args.peers:
        from bkbench.peers import ratios, run_peers
        announce("the peers (NATS JetStream, etcd)")
        # After the bookkeeper cluster has stopped, so the peers get the same (otherwise idle) machine.
        report["peers"] = run_peers(seconds=args.seconds, payload=payload, directory=args.dir)
        report["ratios"] = ratios(results, report["peers"])
        failed = any("error" in peer for peer in report["peers"].values())
    print(json.dumps(report, indent=2))
    return 1 if failed else 0
