"""`bk bench journal`: the bookie's journal path on real files, beside the raw disk limits
measured in the same run (a write+fdatasync loop, sequential write bandwidth with fdatasync).

The journal path is the real one — Bookie core, group commit, journal records, Journal files,
fdatasync — driven in-process without a network: adds are handed to the core in batches (as a
bookie handles a whole receive buffer at once), each batch becomes one journal group. Figures:
entries/s, MB/s, and per-add latency from receive to acknowledgement (p50/p99).

Each entry size runs twice: one AddRequest per entry, and AddBatchRequests of 256 KiB (what the
client library sends when several adds for a bookie are pending, so the path most adds take).
It also reads entries back after a checkpoint (entry logs + lmdb index, nothing in memory),
in order, with read-ahead off and on: entries/s of each and their ratio.

Journals are preallocated in chunks of --journal-prealloc-mb (journalPreAllocSizeMB, 16 as in
BookKeeper; 0 = off). --compare-prealloc also measures 1 KiB adds with preallocation off and on,
alternating rounds so that both see the same disk weather, and reports on/off ratios.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time

from bkbench import announce
from bkcore.bookie.bookie import BookieConfig
from bkcore.bookie.durable_storage import DurableLedgerStorage, StorageConfig
from bkcore.bookie.journal_files import JournalConfig
from bkcore.bookie.stack import BookieStack
from bkcore.bookie.index import MemoryIndexStore
from bkcore.effects import JournalWrite
from bkcore.digest import Digester, DigestType
from bkcore.wire import AddBatchRequest, AddRequest
from bktransports.filesystem import OsFileSystem
from bktransports.lmdb_index import LmdbIndexStore

MIB = 1024 * 1024
FRAME_PAYLOAD_BYTES = 256 * 1024     # entries per AddBatchRequest (and per frame in bench bookie), by size


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def raw_fdatasync(directory: str, seconds: float) -> dict:
    path = os.path.join(directory, "raw-fsync")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    block = b"x" * 4096
    latencies = []
    cpu_started = time.thread_time()
    end = time.perf_counter() + seconds
    try:
        while time.perf_counter() < end:
            started = time.perf_counter()
            os.write(fd, block)
            os.fdatasync(fd)
            latencies.append(time.perf_counter() - started)
    finally:
        cpu_s = time.thread_time() - cpu_started
        os.close(fd)
        os.unlink(path)
    return {"fdatasyncs_per_second": round(len(latencies) / seconds),
            "p50_ms": round(percentile(latencies, 0.5) * 1e3, 3),
            # (user + system: most of it is the kernel's work for the sync)
            "cpu_us_per_write_and_sync": round(cpu_s / max(1, len(latencies)) * 1e6, 1)}


def raw_fdatasync_quorum(directory: str, seconds: float, *, files: int = 3, quorum: int = 2,
                         size: int = 1100) -> dict:
    """The disk's own floor for a replicated add when every bookie shares it: in each round,
    `files` threads (one per bookie journal, each file preallocated) write `size` bytes and
    fdatasync at the same moment; the round's time is when the quorum-th of them finished, as
    an add with that ack quorum would. fdatasync releases the GIL, so the syncs overlap."""
    paths = [os.path.join(directory, f"raw-quorum-{n}") for n in range(files)]
    fds = [os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) for path in paths]
    for fd in fds:
        os.posix_fallocate(fd, 0, 64 * MIB)
    record = b"x" * size
    barrier = threading.Barrier(files + 1)
    finished: list[list[float]] = [[] for _ in fds]
    stop = threading.Event()

    def sync_in_rounds(index: int) -> None:
        fd, offset = fds[index], 0
        while True:
            barrier.wait()
            if stop.is_set():
                return
            os.pwrite(fd, record, offset)
            os.fdatasync(fd)
            finished[index].append(time.perf_counter())
            offset = (offset + size) % (64 * MIB - size)
            barrier.wait()

    threads = [threading.Thread(target=sync_in_rounds, args=(n,), daemon=True) for n in range(files)]
    for thread in threads:
        thread.start()
    round_times = []
    end = time.perf_counter() + seconds
    try:
        while time.perf_counter() < end:
            barrier.wait()                     # go
            started = time.perf_counter()
            barrier.wait()                     # every file synced
            round_times.append(sorted(done[-1] for done in finished)[quorum - 1] - started)
        stop.set()
        barrier.wait()
    finally:
        for thread in threads:
            thread.join(timeout=5)
        for fd, path in zip(fds, paths):
            os.close(fd)
            os.unlink(path)
    return {"files": files, "quorum": quorum, "rounds_per_second": round(len(round_times) / seconds),
            "p50_ms": round(percentile(round_times, 0.5) * 1e3, 3),
            "p99_ms": round(percentile(round_times, 0.99) * 1e3, 3)}


def raw_sequential(directory: str, seconds: float) -> dict:
    path = os.path.join(directory, "raw-seq")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    chunk = os.urandom(MIB)
    written = 0
    started = time.perf_counter()
    try:
        while time.perf_counter() - started < seconds:
            os.write(fd, chunk)
            os.fdatasync(fd)
            written += len(chunk)
    finally:
        os.close(fd)
        os.unlink(path)
    return {"mib_per_second": round(written / MIB / (time.perf_counter() - started), 1)}


def device_written_bytes(directory: str) -> int | None:
    """Bytes the block device holding `directory` has written since boot (its sysfs stat: the
    seventh field counts 512-byte sectors), or None where that is not readable. Whatever else
    writes to the device meanwhile counts too."""
    device = os.stat(directory).st_dev
    try:
        with open(f"/sys/dev/block/{os.major(device)}:{os.minor(device)}/stat") as stat:
            return int(stat.read().split()[6]) * 512
    except (OSError, IndexError, ValueError):
        return None


def device_write_rate(directory: str | None, written_before: int | None, elapsed_s: float) -> dict:
    """{"device_write_mib_per_second": ...} since device_written_bytes(directory) gave
    written_before, elapsed_s ago; {} when either reading is missing."""
    written_after = device_written_bytes(directory) if directory and written_before is not None else None
    if written_after is None:
        return {}
    return {"device_write_mib_per_second": round((written_after - written_before) / MIB / elapsed_s, 1)}


def disk_ceiling(run: dict, raw_mib_per_second: float | None, rate_key: str) -> dict:
    """What the disk allows at the bytes each add cost the device in `run` (every journal and
    entry log it reached, headers included): the device's share of the raw sequential
    bandwidth, and the adds/s (run[rate_key] scaled) at which it would be all of it. {} when the
    device counters are missing."""
    device = run.get("device_write_mib_per_second")
    if not device or not raw_mib_per_second:
        return {}
    fraction = device / raw_mib_per_second
    return {"device_write_fraction_of_raw": round(fraction, 3),
            "disk_bound_adds_per_second": round(run[rate_key] / fraction)}


def journal_run(directory: str, entry_size: int, seconds: float, batch_bytes: int, *, batched: bool = False,
                prealloc_size: int = JournalConfig().journal_prealloc_size) -> dict:
    """Adds of `entry_size` handed to a bookie core `batch_bytes` at a time, each group written and
    fdatasync'ed on real files. `batched`: as AddBatchRequests of up to FRAME_PAYLOAD_BYTES (what
    the client library sends when adds are pending), else one AddRequest per entry."""
    root = tempfile.mkdtemp(dir=directory)
    fs = OsFileSystem(root)
    stack = BookieStack(bookie_id="bench", fs=fs, index=MemoryIndexStore(),
                        bookie_config=BookieConfig(pending_adds_count_max=1_000_000,
                                                   journal_buffered_writes_threshold_size=batch_bytes),
                        journal_config=JournalConfig(journal_max_size=256 * MIB, journal_prealloc_size=prealloc_size),
                        storage_config=StorageConfig())
    stack.start(now_ms=1)
    core = stack.core
    payload = os.urandom(entry_size)
    batch_count = max(1, batch_bytes // (entry_size + 64))
    key = b"k" * 32
    # Entries are packed by clients, not bookies: build one group's bodies up front and send
    # them again for every group (the ledger is dropped in between), so the timed loop is the
    # bookie's work alone.
    bodies = [Digester(ledger_id=0, digest_type=DigestType.CRC32C, password=b"").pack_entry(
        entry_id=i, lac=i - 1, length=0, payload=payload) for i in range(batch_count)]
    per_message = max(1, FRAME_PAYLOAD_BYTES // (entry_size + 64)) if batched else 1
    ledger_id = 0
    request_id = 0
    acked = 0
    latencies = []
    started = time.perf_counter()
    try:
        while time.perf_counter() - started < seconds:
            batch_started = time.perf_counter()
            for first in range(0, len(bodies), per_message):
                if batched:
                    request = AddBatchRequest(request_id=request_id, ledger_id=ledger_id, first_entry_id=first,
                                              master_key=key, bodies=bodies[first:first + per_message])
                else:
                    request = AddRequest(request_id=request_id, ledger_id=ledger_id, entry_id=first,
                                         master_key=key, body=bodies[first])
                core.receive(request, source="c", now_ns=0)
                request_id += 1
            core.on_timer(10**18)   # the group-wait deadline: write what the batch collected
            answer_count = 0
            while effects := core.take_effects():
                for effect in effects:
                    if isinstance(effect, JournalWrite):
                        stack.write_journal(effect, now_ms=1)
                        stack.sync_journal(effect.token)
                        core.on_persisted(effect.token, 0)
                    else:
                        answer_count += getattr(effect.message, "count", 1)
            acked += answer_count
            latencies.extend([time.perf_counter() - batch_started] * answer_count)
            # This measures the journal: drop what a checkpoint would have moved out.
            stack.storage.delete_ledger(ledger_id)
    finally:
        elapsed = time.perf_counter() - started
        fs.close()
        shutil.rmtree(root, ignore_errors=True)
    return {"entry_size": entry_size, "entries_per_group": batch_count, "entries_per_message": per_message,
            "entries_per_second": round(acked / elapsed), "mib_per_second": round(acked * entry_size / MIB / elapsed, 1),
            "add_latency_p50_ms": round(percentile(latencies, 0.5) * 1e3, 3),
            "add_latency_p99_ms": round(percentile(latencies, 0.99) * 1e3, 3)}


def entry_log_read_runs(directory: str, entry_size: int, count: int) -> dict:
    """Write `count` entries of one ledger to the entry logs (one checkpoint), then read them
    all in order from a storage that has nothing in memory, without and with read-ahead."""
    root = tempfile.mkdtemp(dir=directory)
    os.makedirs(f"{root}/index")
    fs, index = OsFileSystem(f"{root}/files"), LmdbIndexStore(f"{root}/index")
    try:
        writer = DurableLedgerStorage(fs=fs, index=index)
        writer.set_master_key(1, b"k" * 32)
        payload = os.urandom(entry_size)
        for entry_id in range(count):
            writer.add_entry(1, entry_id, payload)
        writer.checkpoint()
        figures = {}
        for name, read_ahead_count_max in (("without_read_ahead", 0), ("with_read_ahead", 100)):
            reader = DurableLedgerStorage(fs=fs, index=index, config=StorageConfig(
                read_ahead_count_max=read_ahead_count_max))
            started = time.perf_counter()
            for entry_id in range(count):
                reader.get_entry(1, entry_id)
            figures[f"{name}_entries_per_second"] = round(count / (time.perf_counter() - started))
        figures["read_ahead_ratio"] = round(figures["with_read_ahead_entries_per_second"]
                                            / figures["without_read_ahead_entries_per_second"], 2)
        return {"entry_size": entry_size, "entries": count, **figures}
    finally:
        index.close()
        fs.close()
        shutil.rmtree(root, ignore_errors=True)


PREALLOC_ROUND_COUNT = 5


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def ratio(numerator: float, denominator: float) -> float | None:
    return round(numerator / denominator, 3) if denominator else None


def preallocation_rounds() -> list[tuple[str, str]]:
    """The order of the settings in each comparison round: alternating, so that neither always
    runs right after the other (and after whatever the disk was still writing back)."""
    return [("off", "on") if index % 2 == 0 else ("on", "off") for index in range(PREALLOC_ROUND_COUNT)]


def summarize_preallocation(runs: dict[str, list[dict]]) -> dict:
    """Runs with preallocation "off" and "on": the median of each figure per setting, and on/off
    ratios (below 1: on is lower)."""
    figures = ("add_latency_p50_ms", "add_latency_p99_ms", "entries_per_second")
    medians = {name: {figure: median([run[figure] for run in setting]) for figure in figures}
               for name, setting in runs.items()}
    return {**medians, "rounds": len(runs["on"]),
            **{f"{figure}_ratio_on_to_off": ratio(medians["on"][figure], medians["off"][figure]) for figure in figures}}


def compare_preallocation(measure, prealloc_size: int) -> dict:
    """summarize_preallocation of `measure(journal_prealloc_size)` with preallocation off and on."""
    runs: dict[str, list[dict]] = {"off": [], "on": []}
    for order in preallocation_rounds():
        for setting in order:
            runs[setting].append(measure(prealloc_size if setting == "on" else 0))
    return summarize_preallocation(runs)


def bench_journal(args) -> int:
    prealloc_size = args.journal_prealloc_mb * MIB
    announce("the disk's own floor (raw fdatasync, sequential writes)")
    raw_sync = raw_fdatasync(args.dir, args.seconds)
    raw_bandwidth = raw_sequential(args.dir, args.seconds)
    runs, batched_runs = [], []
    for is_batched, into in ((False, runs), (True, batched_runs)):
        for size in (100, 1024, 65536):
            announce(f"journal, {size}-byte adds{' in batches' if is_batched else ''}")
            into.append(journal_run(args.dir, size, args.seconds, args.group_bytes, batched=is_batched,
                                    prealloc_size=prealloc_size))
    for run in runs + batched_runs:
        run["fraction_of_raw_bandwidth"] = round(run["mib_per_second"] / raw_bandwidth["mib_per_second"], 3)
    announce("journal, one add per group")
    one_at_a_time = journal_run(args.dir, 1024, args.seconds, 1, prealloc_size=prealloc_size)
    announce("entry log reads")
    reads = entry_log_read_runs(args.dir, 1024, 50_000)
    report = {"benchmark": "journal", "journal_prealloc_size": prealloc_size, "raw_fdatasync": raw_sync,
              "raw_sequential": raw_bandwidth, "journal": runs, "journal_batched": batched_runs,
              "journal_one_add_per_group": one_at_a_time, "entry_log_reads": reads}
    if args.compare_prealloc:
        chunk = prealloc_size or 16 * MIB
        announce("journal preallocation off and on")
        report["journal_preallocation"] = {
            "prealloc_size": chunk,
            "one_add_per_group": compare_preallocation(
                lambda size: journal_run(args.dir, 1024, args.seconds, 1, prealloc_size=size), chunk),
            "groups_of_1k_adds": compare_preallocation(
                lambda size: journal_run(args.dir, 1024, args.seconds, args.group_bytes, prealloc_size=size), chunk)}
    print(json.dumps(report, indent=2))
    return 0
