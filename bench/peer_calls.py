"""Forwarded table calls (streamstorage.peer_calls) against local ones, in one process: server A
owns a one-range table, B forwards to A over TCP. Prints JSON: latency (p50/p99 of calls one at
a time) and CPU per call (this process's, so both servers' and the in-process bookies') for
puts and reads, one at a time and 64 at once. The forwarded figure minus the local one is what
the hop costs both servers together.

    PYTHONPATH=src:tests python bench/peer_calls.py [--calls 400]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import tempfile
import time

import trio

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))

import bkclient  # noqa: E402
from bkcore.stream.segments import StreamSettings  # noqa: E402
from bkcore.table.commands import Put, RangeRead, fold_key  # noqa: E402
from bkcore.table.service import Tables  # noqa: E402
from inprocess_cluster import InProcessCluster  # noqa: E402
from streamstorage.peer_calls import PeerClient, PeerServer  # noqa: E402

URI = "memory://peer-calls-bench"
A, B = "127.0.0.1:1", "127.0.0.1:2"
CONCURRENCY = 64


async def measure(call, count: int, concurrency: int) -> dict:
    latencies = []
    cpu_before, wall_before = time.process_time(), time.perf_counter()

    async def worker(indexes):
        for index in indexes:
            started = time.perf_counter()
            await call(index)
            latencies.append(time.perf_counter() - started)

    async with trio.open_nursery() as nursery:
        for lane in range(concurrency):
            nursery.start_soon(worker, range(lane, count, concurrency))
    cpu, wall = time.process_time() - cpu_before, time.perf_counter() - wall_before
    latencies.sort()
    return {"calls_per_s": round(count / wall), "cpu_us_per_call": round(cpu / count * 1e6),
            "p50_ms": round(statistics.median(latencies) * 1e3, 3),
            "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1e3, 3)}


async def main(calls: int) -> None:
    async with trio.open_nursery() as nursery:
        with tempfile.TemporaryDirectory() as data:
            cluster = InProcessCluster(nursery, pathlib.Path(data), URI)
            for _ in range(3):
                await cluster.add_bookie()
            async with bkclient.connect(URI, renew_session=False) as bk_a, \
                    bkclient.connect(URI, renew_session=False) as bk_b:
                tables_a = Tables(bk_a, nursery, server_id=A)
                await tables_a.register()
                peer = await nursery.start(PeerServer(tables_a, host="127.0.0.1").run)
                await tables_a.announce_peer_address(f"127.0.0.1:{peer.port}")
                client = PeerClient(store=bk_b.store, root=bk_b.layout.root, nursery=nursery)
                await bk_a.streams.create_namespace("bench")
                await bk_a.streams.create_stream("bench", "t", StreamSettings(table_ranges=1))
                pkey = b"p"

                def put(index):
                    return Put(fold_key(pkey, b"%d" % (index % 100)), b"x" * 100)

                read = RangeRead(fold_key(pkey, b"1"))
                kinds = {
                    "put_local": lambda i: tables_a.execute("bench", "t", pkey, put(i)),
                    "put_forwarded": lambda i: client.execute(A, "bench", "t", pkey, put(i)),
                    "read_local": lambda i: tables_a.read("bench", "t", pkey, read),
                    "read_forwarded": lambda i: client.read(A, "bench", "t", pkey, read),
                }
                for call in kinds.values():                  # warm: the range open, connected
                    await measure(call, 50, 1)
                report = {}
                for concurrency in (1, CONCURRENCY):
                    for name, call in kinds.items():
                        before = client.statistics().sent_frame_count
                        report[f"{name}_x{concurrency}"] = figures = await measure(call, calls, concurrency)
                        if "forwarded" in name:
                            figures["calls_per_frame_sent"] = round(
                                calls / (client.statistics().sent_frame_count - before), 1)
                print(json.dumps(report, indent=1))
                for bookie in cluster.bookies:
                    bookie.scope.cancel()
                nursery.cancel_scope.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=400)
    trio.run(main, parser.parse_args().calls)
