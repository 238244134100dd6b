"""Table clients for `bk bench table`: threads in this process, or spread over client processes.

One Python process drives only so many gRPC calls a second (the GIL), so with
--client-processes P the same total client count runs as threads in P spawned interpreters:
what is measured is then the server, not the Python client. Each phase starts once every client
of every process is connected and has found its table (the caller's before_start() runs then:
the bench starts its CPU meters there, so setting up is not measured) and runs for the same
seconds; the latencies come back to be summarised together.

    operation(name, value, keys_per_client)   the (table, client_index, n) -> None of a phase
"""

from __future__ import annotations

import multiprocessing
import random
import threading
import time
from typing import Callable

def operation(name: str, value: bytes, keys_per_client: int = 1):
    """What each client does in a phase: "put" distinct keys, "get" keys the puts wrote,
    "increment" one of eight shared counters."""
    if name == "put":
        return lambda table, i, n: table.put(b"key-%d-%d" % (i, n), value)
    if name == "get":
        return lambda table, i, n: table.get(b"key-%d-%d" % (i, random.randrange(max(1, keys_per_client))))
    if name == "increment":
        return lambda table, i, n: table.increment(b"counter-%d" % (n % 8), 1)
    raise ValueError(f"unknown table operation {name!r}")


def run_client_threads(address: str, first_index: int, clients: int, seconds: float, op, *,
                       before_start: Callable[[], None] | None = None) -> tuple[list[float], int, float]:
    """`op(table, client_index, n)` in `clients` threads (client indexes from first_index) for
    `seconds`, from when all are connected and before_start() (if given) has returned. Returns
    every latency, the error count and the elapsed seconds."""
    from bkclient.storage_client import StorageClient
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors = [0]
    connected = threading.Barrier(clients + 1)
    go = threading.Barrier(clients + 1)

    def client(slot: int) -> None:
        with StorageClient(address) as storage:
            table = storage.table("default", "bench")
            connected.wait()
            go.wait()
            deadline = time.perf_counter() + seconds
            n = 0
            while (now := time.perf_counter()) < deadline:
                try:
                    op(table, first_index + slot, n)
                except Exception:       # noqa: BLE001 - counted, the run goes on
                    errors[0] += 1
                latencies[slot].append(time.perf_counter() - now)
                n += 1

    threads = [threading.Thread(target=client, args=(slot,)) for slot in range(clients)]
    for thread in threads:
        thread.start()
    connected.wait()
    if before_start is not None:
        before_start()
    go.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    return [x for per_client in latencies for x in per_client], errors[0], time.perf_counter() - began


def _child(connection) -> None:
    """A client process: runs the phases it is sent until told to stop (None). Once its
    clients are connected it says "connected" and starts them at the word "go"."""
    def connected_then_wait_for_go() -> None:
        connection.send("connected")
        connection.recv()

    while (phase := connection.recv()) is not None:
        address, first_index, clients, seconds, name, value, keys_per_client = phase
        connection.send(run_client_threads(address, first_index, clients, seconds,
                                           operation(name, value, keys_per_client),
                                           before_start=connected_then_wait_for_go))


class ClientProcesses:
    """`count` spawned client processes, kept for every phase of a run (with ... as clients)."""

    def __init__(self, count: int) -> None:
        context = multiprocessing.get_context("spawn")
        self._connections = []
        self._processes = []
        for _ in range(count):
            ours, theirs = context.Pipe()
            process = context.Process(target=_child, args=(theirs,), daemon=True)
            process.start()
            self._connections.append(ours)
            self._processes.append(process)

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self._processes]

    def run(self, address: str, clients: int, seconds: float, name: str, value: bytes,
            keys_per_client: int = 1, *,
            before_start: Callable[[], None] | None = None) -> tuple[list[float], int, float]:
        """One phase with `clients` clients in all, shared out over the processes; it starts
        once every process has its clients connected and before_start() has returned."""
        count = len(self._processes)
        first = 0
        for index, connection in enumerate(self._connections):
            share = clients // count + (1 if index < clients % count else 0)
            connection.send((address, first, share, seconds, name, value, keys_per_client))
            first += share
        for connection in self._connections:
            connection.recv()                   # "connected"
        if before_start is not None:
            before_start()
        for connection in self._connections:
            connection.send("go")
        latencies, errors, elapsed = [], 0, 0.0
        for connection in self._connections:
            part, part_errors, part_elapsed = connection.recv()
            latencies.extend(part)
            errors += part_errors
            elapsed = max(elapsed, part_elapsed)
        return latencies, errors, elapsed

    def close(self) -> None:
        for connection in self._connections:
            try:
                connection.send(None)
            except OSError:
                pass
        for process in self._processes:
            process.join(10)
            if process.is_alive():
                process.kill()
