"""Harness: a fault-free SimWorld driven by hand, for scenario tests.

Tests start operations with `run()` / `start()` and the harness advances virtual time until
the operation completes (or a bound passes). Faults are applied explicitly: crash, restart,
pause, partition, or a message filter. Same machinery as the simulator: one driver, not two.
"""

from __future__ import annotations

import random
from typing import Callable

from bkcore.bookie.bookie import BookieConfig
from bkcore.client.client import Client, LedgerSpec
from bkcore.client.config import ClientConfig
from bkcore.effects import Completed
from bksim.metastore_client import ignore_answer
from bksim.options import DiskOptions, NetworkOptions
from bksim.scenario import MS, S, Scenario
from bksim.world import SimWorld

STEP_NS = 1 * MS


class OperationTimedOut(AssertionError):
    pass


class Harness:
    def __init__(self, *, bookie_count: int = 3, seed: int = 1,
                 client_config: ClientConfig = ClientConfig(),
                 bookie_config: BookieConfig = BookieConfig()) -> None:
        scenario = Scenario(seed=seed, bookie_count=bookie_count, faults=frozenset(),
                            network=NetworkOptions.none(), disk=DiskOptions.none())
        self.world = SimWorld(scenario=scenario, bookie_config=bookie_config, client_config=client_config)
        self.world.faults_enabled = False
        self.rng = random.Random(seed)
        self.completed: dict[tuple[str, int], Completed] = {}
        self._next_op_id = 1
        self.bookie_ids = [f"bookie-{i}" for i in range(bookie_count)]
        for bookie_id in self.bookie_ids:
            self.world.add_bookie(bookie_id)
        self.world.start_checkpoints()   # checkpoints, GC and the disk monitor, as in a real bookie
        self.clients: dict[str, Client] = {}

    # -- operations -----------------------------------------------------------------------

    def client(self, name: str = "client") -> Client:
        if name not in self.clients:
            self.clients[name] = self.world.add_client(name, self._on_completed)
        return self.clients[name]

    def _on_completed(self, client_id: str, completed: Completed, now_ns: int) -> None:
        self.completed[client_id, completed.op_id] = completed

    @property
    def now_ns(self) -> int:
        return self.world.now_ns

    def start(self, client_name: str, action: Callable[[int], object]) -> tuple[str, int]:
        """Start an operation (action gets the op id); returns a key for wait()."""
        op_id = self._next_op_id
        self._next_op_id += 1
        self.client(client_name)
        action(op_id)
        self.world.client_did_something(client_name)
        return client_name, op_id

    def wait(self, key: tuple[str, int], *, timeout_ns: int = 60 * S) -> Completed:
        deadline_ns = self.now_ns + timeout_ns
        while key not in self.completed:
            if self.now_ns >= deadline_ns:
                raise OperationTimedOut(f"operation {key} did not complete within {timeout_ns / S:g}s")
            self.world.loop.run_until(self.now_ns + STEP_NS)
        return self.completed.pop(key)

    def run(self, client_name: str, action: Callable[[int], object], *, timeout_ns: int = 60 * S) -> Completed:
        return self.wait(self.start(client_name, action), timeout_ns=timeout_ns)

    def ok(self, client_name: str, action: Callable[[int], object], *, timeout_ns: int = 60 * S):
        """Run an operation that must succeed; returns its result."""
        completed = self.run(client_name, action, timeout_ns=timeout_ns)
        if completed.error is not None:
            raise AssertionError(f"operation failed: {completed.error!r}")
        return completed.result

    def advance(self, duration_ns: int) -> None:
        self.world.loop.run_until(self.now_ns + duration_ns)

    # -- conveniences ---------------------------------------------------------------------

    def create_ledger(self, client_name: str = "client", *, password: bytes = b"pw", **spec):
        client = self.client(client_name)
        return self.ok(client_name, lambda op: client.create_ledger(
            op, password=password, spec=LedgerSpec(**spec), now_ns=self.now_ns))

    def add(self, writer, payload: bytes, client_name: str = "client") -> int:
        return self.ok(client_name, lambda op: writer.add(op, payload, now_ns=self.now_ns))

    def close(self, writer, client_name: str = "client"):
        return self.ok(client_name, lambda op: writer.close(op, now_ns=self.now_ns))

    def open(self, ledger_id: int, client_name: str = "reader", *, password: bytes = b"pw",
             is_recovery: bool = True, is_forced: bool = False):
        client = self.client(client_name)
        return self.run(client_name, lambda op: client.open_ledger(
            op, ledger_id, password=password, is_recovery=is_recovery, is_forced=is_forced, now_ns=self.now_ns))

    def read(self, reader, first: int, last: int) -> Completed:
        return self.run(reader.ctx.client_id, lambda op: reader.read(op, first, last, now_ns=self.now_ns))

    # -- faults ---------------------------------------------------------------------------

    def crash(self, bookie_id: str) -> None:
        self.world.crash_bookie(bookie_id, restart_after_ns=None)
        # Tests want the registration gone at once, as after a session timeout.
        node = self.world.bookies[bookie_id]
        if node.session_id is not None:
            self.world.metastore.submit(bookie_id, ["expire", node.session_id], ignore_answer)
            node.session_id = None

    def restart(self, bookie_id: str) -> None:
        self.world._restart_bookie(bookie_id)

    def bookie(self, bookie_id: str):
        return self.world.bookies[bookie_id].core

    def drop_messages(self, predicate: Callable[[str, str, object], bool] | None) -> None:
        """Drop every message for which predicate(source, destination, message) is true."""
        self.world.message_filter = None if predicate is None else (lambda s, d, m: not predicate(s, d, m))
