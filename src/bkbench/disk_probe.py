"""A raw disk loop beside a benchmark phase: did the disk itself stall while the phase ran?

A process of its own (so it takes no GIL from the bench or the bookies) writes 4 KiB into a file
it wrote in full beforehand, fdatasyncs it, and sleeps PROBE_INTERVAL_S, over and over, until it
is told to stop (SIGTERM); then it prints one JSON line: fdatasync p50, p99 and max, and how
many took STALL_MS or more, and when the longest of those began (`stalls`: a timeline marks
them). The file is overwritten in place, round and round, so a sync
never has to persist new blocks or a new size: its time is the disk's, and the queue it waits
in, which the phase's own writes share. On a virtual machine whose disk now and then stops for
tens or hundreds of milliseconds with nothing else running, an add's p99 is only read rightly
beside this.

    with DiskProbe(directory) as probe:      # returns once the probe's file is written
        ... the phase ...
    probe.report                             # {"fdatasync_p50_ms": ..., ...}
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from bkbench.journal import percentile

PROBE_FILE_SIZE = 8 * 1024 * 1024
PROBE_WRITE_SIZE = 4096
PROBE_INTERVAL_S = 0.005
STALL_MS = 20.0
STALLS_KEPT = 200               # the longest ones, for a timeline


def summarize(latencies_s: list[float], started_at_s: list[float] | None = None) -> dict:
    """The figures of a run of syncs; with their wall-clock start times, also `stalls`: the
    STALLS_KEPT longest of STALL_MS or more, as {"at_s", "duration_ms"}, in time order."""
    if not latencies_s:
        return {"fdatasyncs": 0}
    ordered = sorted(latencies_s)
    summary = {"fdatasyncs": len(ordered),
               "fdatasync_p50_ms": round(percentile(ordered, 0.5) * 1e3, 3),
               "fdatasync_p99_ms": round(percentile(ordered, 0.99) * 1e3, 3),
               "fdatasync_max_ms": round(ordered[-1] * 1e3, 3),
               f"fdatasyncs_over_{STALL_MS:.0f}_ms": sum(1 for value in ordered if value * 1e3 >= STALL_MS)}
    if started_at_s is not None:
        stalls = sorted(((latency, at) for latency, at in zip(latencies_s, started_at_s)
                         if latency * 1e3 >= STALL_MS), reverse=True)[:STALLS_KEPT]
        summary["stalls"] = [{"at_s": at, "duration_ms": round(latency * 1e3, 3)}
                             for latency, at in sorted(stalls, key=lambda stall: stall[1])]
    return summary


def run_probe(path: str) -> dict:
    """The loop itself (in the probe's process): prints "ready" once its file is written, then
    syncs until SIGTERM; returns the summary."""
    stopping = False

    def stop(signum, frame) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        chunk = bytes(1024 * 1024)
        for offset in range(0, PROBE_FILE_SIZE, len(chunk)):
            os.pwrite(fd, chunk, offset)
        os.fsync(fd)
        print("ready", flush=True)
        record = os.urandom(PROBE_WRITE_SIZE)
        latencies: list[float] = []
        started_at: list[float] = []           # wall clock, for the timeline's marks
        wall_offset = time.time() - time.perf_counter()
        offset = 0
        while not stopping:
            os.pwrite(fd, record, offset)
            offset = (offset + PROBE_WRITE_SIZE) % PROBE_FILE_SIZE
            started = time.perf_counter()
            os.fdatasync(fd)
            latencies.append(time.perf_counter() - started)
            started_at.append(started + wall_offset)
            time.sleep(PROBE_INTERVAL_S)
        return summarize(latencies, started_at)
    finally:
        os.close(fd)
        os.unlink(path)


class DiskProbe:
    """The probe's process around a `with` block; `report` once the block is left ({} if the
    probe could not run: a benchmark goes on without it)."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, f"disk-probe-{os.getpid()}.dat")
        self.report: dict = {}
        self._process: subprocess.Popen | None = None

    def __enter__(self) -> DiskProbe:
        self._process = subprocess.Popen([sys.executable, "-m", "bkbench.disk_probe", self.path],
                                         stdout=subprocess.PIPE, text=True)
        if self._process.stdout.readline().strip() != "ready":
            self._process.wait()
            self._process = None
        return self

    def __exit__(self, *exc_info) -> None:
        if self._process is None:
            return
        self._process.send_signal(signal.SIGTERM)
        output, _ = self._process.communicate(timeout=30)
        try:
            self.report = json.loads(output.strip().splitlines()[-1])
        except (ValueError, IndexError):
            self.report = {}


if __name__ == "__main__":
    print(json.dumps(run_probe(sys.argv[1])), flush=True)
