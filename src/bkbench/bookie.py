"""`bk bench bookie`: one real bookie process over TCP on real files, beside the raw disk limits.

The bookie is a `bk bookie` child process (its own core); this process is the load: it speaks
the wire protocol directly with entries packed before the clock starts, so the figures are the
bookie's (receive, journal group commit with fdatasync, answer), not a client library's.
For 100 B, 1 KiB and 64 KiB entries:
  pipelined   — one AddBatchRequest of many entries per frame (as the client library coalesces
                pending adds), up to `window` adds in flight: entries/s, MiB/s,
                p50/p99 add latency (send to acknowledgement), fraction of raw bandwidth, and
                what the disk itself wrote meanwhile (sysfs): a bookie whose journal and entry
                logs share one disk writes every entry there twice (journal, then the entry
                log at each checkpoint), and disk_bound_adds_per_second is the rate at which
                those bytes per entry would take all of the raw bandwidth (the device can pass
                "raw", 1 MiB writes each fdatasynced, when journal and log writes overlap);
  one at a time — one add, wait for its answer, repeat: p50/p99 latency;
  overload    — 1 KiB adds with OVERLOAD_WINDOW in flight, four times the bookie's
                maxAddsInProgressLimit: the bookie must refuse the excess (TOO_MANY_REQUESTS)
                rather than queue it, and its memory must stay bounded.
After every measurement the bookie's resident memory (VmRSS) and its peak so far (VmHWM) are
read from /proc. The bookie preallocates its journal in chunks of --journal-prealloc-mb
(journalPreAllocSizeMB); --compare-prealloc then starts two fresh bookies, with preallocation off
and on (--journal-prealloc-mb, or 16 if that is 0), and measures 1 KiB adds one at a time and
pipelined on both in alternating rounds: on/off ratios.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time

import trio

from bkbench import announce
from bkbench.journal import (
    FRAME_PAYLOAD_BYTES, MIB, device_write_rate, device_written_bytes, disk_ceiling, percentile, preallocation_rounds,
    raw_fdatasync, raw_sequential, summarize_preallocation,
)
from bklocal.processes import spawn_bookie
from bkcore.digest import Digester, DigestType, master_key
from bkcore.errors import Code
from bkcore.wire import AddBatchRequest, AddRequest, FrameDecoder, encode_frame

PASSWORD = b"bench"
PIPELINED_WINDOW_MAX = 8_000         # under the bookie's maxAddsInProgressLimit (10,000)
OVERLOAD_WINDOW = 40_000
SETTLE_SECONDS = 1.5                 # a checkpoint (flushInterval 1000 ms) has come and gone


def bookie_memory_mib(pid: int) -> dict:
    """The process's resident memory now and at its peak, from /proc (Linux)."""
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                fields[name] = round(int(value.split()[0]) / 1024, 1)
    return {"rss_mib": fields.get("VmRSS"), "rss_peak_mib": fields.get("VmHWM")}


def _bodies(ledger_id: int, entry_size: int, count: int) -> list[bytes]:
    digester = Digester(ledger_id=ledger_id, digest_type=DigestType.CRC32C, password=PASSWORD)
    payload = os.urandom(entry_size)
    return [digester.pack_entry(entry_id=i, lac=i - 1, length=(i + 1) * entry_size, payload=payload)
            for i in range(count)]


async def _pipelined(port: int, ledger_id: int, entry_size: int, seconds: float, window_bytes: int, *,
                     window_max: int = PIPELINED_WINDOW_MAX, device_dir: str | None = None) -> dict:
    per_frame = max(1, FRAME_PAYLOAD_BYTES // (entry_size + 64))
    window = min(window_max, max(per_frame * 2, window_bytes // (entry_size + 64)))
    # Enough entries for the run at ~400 MB/s, capped; packed before the clock starts.
    count = min(400_000, max(window * 4, int(seconds * 400 * MIB / (entry_size + 64))))
    key = master_key(PASSWORD)
    bodies = _bodies(ledger_id, entry_size, count)
    frames = [encode_frame([AddBatchRequest(request_id=first, ledger_id=ledger_id, first_entry_id=first,
                                            master_key=key, bodies=bodies[first:first + per_frame])])
              for first in range(0, count, per_frame)]
    del bodies
    sent_at = [0.0] * count
    latencies: list[float] = []
    acked = [0]
    errors: dict[int, int] = {}
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    in_flight = [0]
    room_freed = [trio.Event()]
    device_written_before = device_written_bytes(device_dir) if device_dir else None
    started = time.perf_counter()
    deadline = started + seconds

    async def send() -> None:
        for index, frame in enumerate(frames):
            if time.perf_counter() >= deadline:
                return
            first = index * per_frame
            last = min(count, first + per_frame)
            while in_flight[0] + (last - first) > window:
                await room_freed[0].wait()
            in_flight[0] += last - first
            now = time.perf_counter()
            for i in range(first, last):
                sent_at[i] = now
            await stream.send_all(frame)

    async def receive(nursery) -> None:
        decoder = FrameDecoder()
        while True:
            data = await stream.receive_some(1 << 20)
            if not data:
                raise RuntimeError("the bookie closed the connection")
            decoder.feed(data)
            now = time.perf_counter()
            while (messages := decoder.next_frame()) is not None:
                for message in messages:
                    if message.code == Code.OK:
                        acked[0] += message.count
                        latencies.extend([now - sent_at[message.request_id]] * message.count)
                    else:
                        errors[message.code] = errors.get(message.code, 0) + message.count
                    in_flight[0] -= message.count
                room_freed[0].set()
                room_freed[0] = trio.Event()
            if now >= deadline or acked[0] + sum(errors.values()) >= count:
                nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send)
        nursery.start_soon(receive, nursery)
    elapsed = time.perf_counter() - started
    device = device_write_rate(device_dir, device_written_before, elapsed)
    await stream.aclose()
    return {"entry_size": entry_size, "entries_per_frame": per_frame, "window": window,
            "entries_per_second": round(acked[0] / elapsed), "mib_per_second": round(acked[0] * entry_size / MIB / elapsed, 1),
            "add_latency_p50_ms": round(percentile(latencies, 0.5) * 1e3, 3) if latencies else None,
            "add_latency_p99_ms": round(percentile(latencies, 0.99) * 1e3, 3) if latencies else None,
            "errors": {Code(code).name: n for code, n in errors.items()}, **device}


async def _one_at_a_time(port: int, ledger_id: int, entry_size: int, seconds: float) -> dict:
    key = master_key(PASSWORD)
    bodies = _bodies(ledger_id, entry_size, 20_000)
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    decoder = FrameDecoder()
    latencies = []
    deadline = time.perf_counter() + seconds
    for i, body in enumerate(bodies):
        if time.perf_counter() >= deadline:
            break
        frame = encode_frame([AddRequest(request_id=i, ledger_id=ledger_id, entry_id=i, master_key=key, body=body)])
        started = time.perf_counter()
        await stream.send_all(frame)
        answer = None
        while answer is None:
            decoder.feed(await stream.receive_some(65536))
            answer = decoder.next_frame()
        latencies.append(time.perf_counter() - started)
        if answer[0].code != Code.OK:
            raise RuntimeError(f"add answered {Code(answer[0].code).name}")
    await stream.aclose()
    return {"entry_size": entry_size, "adds": len(latencies),
            "add_latency_p50_ms": round(percentile(latencies, 0.5) * 1e3, 3),
            "add_latency_p99_ms": round(percentile(latencies, 0.99) * 1e3, 3)}


async def _compare_preallocation(ports: dict[str, int], seconds: float, window_bytes: int) -> dict:
    """1 KiB adds one at a time, then pipelined, on the bookies with preallocation "off" and "on"
    in alternating order, each measurement on a ledger of its own and after SETTLE_SECONDS (the
    last checkpoint's writes done)."""
    runs = {"one_at_a_time": {"off": [], "on": []}, "pipelined": {"off": [], "on": []}}
    ledger_id = 100
    for name in runs:
        for order in preallocation_rounds():
            for setting in order:
                await trio.sleep(SETTLE_SECONDS)
                ledger_id += 1
                if name == "one_at_a_time":
                    single = await _one_at_a_time(ports[setting], ledger_id, 1024, seconds)
                    runs[name][setting].append({**single, "entries_per_second": round(single["adds"] / seconds)})
                else:
                    runs[name][setting].append(await _pipelined(ports[setting], ledger_id, 1024, seconds, window_bytes))
    return {name: summarize_preallocation(by_setting) for name, by_setting in runs.items()}


def bench_bookie(args) -> int:
    announce("the disk's own floor (raw fdatasync, sequential writes)")
    raw_sync = raw_fdatasync(args.dir, args.seconds)
    raw_bandwidth = raw_sequential(args.dir, args.seconds)
    root = tempfile.mkdtemp(dir=args.dir, prefix="bench-bookie-")
    prealloc_mb = args.journal_prealloc_mb
    try:
        bookie = _spawn(root, "bookie", prealloc_mb)
        try:
            async def measure() -> dict:
                pid = bookie.process.pid
                runs = []
                raw = raw_bandwidth["mib_per_second"]
                for index, size in enumerate((100, 1024, 65536)):
                    announce(f"pipelined {size}-byte adds")
                    run = await _pipelined(bookie.port, 1 + index, size, args.seconds, args.window_bytes,
                                           device_dir=root)
                    run["fraction_of_raw_bandwidth"] = round(run["mib_per_second"] / raw, 3)
                    run.update(disk_ceiling(run, raw, "entries_per_second"))
                    runs.append({**run, "bookie_memory": bookie_memory_mib(pid)})
                announce("one add at a time")
                single = await _one_at_a_time(bookie.port, 10, 1024, args.seconds)
                announce("overload")
                before = bookie_memory_mib(pid)
                overload = await _pipelined(bookie.port, 20, 1024, args.seconds, OVERLOAD_WINDOW * 1100,
                                            window_max=OVERLOAD_WINDOW)
                return {"pipelined": runs, "one_at_a_time": single,
                        "overload": {**overload, "bookie_memory_before": before,
                                     "bookie_memory": bookie_memory_mib(pid)}}

            results = trio.run(measure)
        finally:
            bookie.stop()
        if args.compare_prealloc:
            announce("journal preallocation off and on, fresh bookies")
            results["journal_preallocation"] = {"prealloc_size": (prealloc_mb or 16) * MIB,
                                                **_compare_fresh_bookies(root, prealloc_mb or 16, args)}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({"benchmark": "bookie", "journal_prealloc_size": prealloc_mb * MIB, "raw_fdatasync": raw_sync,
                      "raw_sequential": raw_bandwidth, **results}, indent=2))
    return 0


def _spawn(root: str, name: str, prealloc_mb: int):
    return spawn_bookie(data_dir=os.path.join(root, name), metastore_uri="memory://bench",
                        extra={"flushInterval": 1000, "journalPreAllocSizeMB": prealloc_mb})


def _compare_fresh_bookies(root: str, prealloc_mb: int, args) -> dict:
    """Two new bookies, alike but for preallocation, so that neither carries the main run's data."""
    bookies = {}
    try:
        bookies["off"] = _spawn(root, "bookie-prealloc-off", 0)
        bookies["on"] = _spawn(root, "bookie-prealloc-on", prealloc_mb)
        ports = {setting: bookie.port for setting, bookie in bookies.items()}
        return trio.run(_compare_preallocation, ports, args.seconds, args.window_bytes)
    finally:
        for bookie in bookies.values():
            bookie.stop()
