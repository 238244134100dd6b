"""The stream workload: writers in generations (each new writer fences the one before while it
may still be writing: writer failover), two readers following the stream from its start, and
at the end a last writer that marks the end of the stream and a fresh reader that reads it all.

Writes record their acknowledged positions (DLSNs); reads record (position, payload). A reader
that fails is replaced by a new one from the start under a new name, so each name's sequence
must be a prefix of the final read (bkjepsen.checkers.check_streams).
"""

from __future__ import annotations

import random

import trio

import bkclient
from bkcore.stream.errors import NamespaceExists, StreamException
from bkjepsen.history import History

NAMESPACE, STREAM = "default", "jepsen-stream"
OP_TIMEOUT_S = 10.0
BATCH_COUNT_MAX = 8
# trio.EndOfChannel: a reader whose read-ahead ended without an end marker (seen under faults).
ERRORS = (bkclient.BKException, StreamException, trio.TooSlowError, trio.EndOfChannel, ConnectionError, OSError,
          ExceptionGroup)


async def create_stream(bk, namespace: str, stream: str) -> None:
    try:
        await bk.streams.create_namespace(namespace)
    except NamespaceExists:
        pass
    await bk.streams.create_stream(namespace, stream)


async def prepare_stream(uri: str, namespace: str, stream: str) -> None:
    """Create the stream a workload uses (and its namespace), within 30 s."""
    async with bkclient.connect(uri) as bk:
        with trio.fail_after(30):
            await create_stream(bk, namespace, stream)


class StreamWorkload:
    def __init__(self, history: History, rng: random.Random) -> None:
        self.history, self.rng = history, rng

    async def prepare(self, uri: str) -> None:
        await prepare_stream(uri, NAMESPACE, STREAM)

    async def run(self, uri: str, duration_s: float) -> None:
        deadline = trio.current_time() + duration_s
        async with bkclient.connect(uri) as bk:
            async with trio.open_nursery() as nursery:
                nursery.cancel_scope.deadline = deadline + OP_TIMEOUT_S
                nursery.start_soon(self._writers, bk, deadline)
                for index in range(2):
                    nursery.start_soon(self._reader, bk, index + 1, deadline)

    async def _writers(self, bk, deadline: float) -> None:
        async with trio.open_nursery() as nursery:
            for generation in range(10_000):
                if trio.current_time() >= deadline:
                    break
                stop = trio.Event()
                nursery.start_soon(self._generation, bk, f"writer-{generation % 2 + 1}", stop, deadline)
                await trio.sleep(self.rng.uniform(3.0, 8.0))
                # The next generation opens while this one may still write: it fences it.
                nursery.start_soon(self._stop_later, stop, self.rng.uniform(0.0, 1.0))

    @staticmethod
    async def _stop_later(stop: trio.Event, delay_s: float) -> None:
        await trio.sleep(delay_s)
        stop.set()

    async def _generation(self, bk, process: str, stop: trio.Event, deadline: float) -> None:
        async with trio.open_nursery() as nursery:
            try:
                with trio.fail_after(OP_TIMEOUT_S):
                    writer = await bk.streams.start_writer(nursery, NAMESPACE, STREAM)
            except ERRORS:
                nursery.cancel_scope.cancel()
                return
            for sequence in range(1_000_000):
                if stop.is_set() or trio.current_time() >= deadline:
                    break
                count = self.rng.randrange(1, BATCH_COUNT_MAX + 1)
                ops = [self.history.invoke(process, "write", STREAM, f"{process}-{self.rng.randrange(1 << 40):x}")
                       for _ in range(count)]
                try:
                    with trio.fail_after(OP_TIMEOUT_S):
                        positions = await writer.write_many([op.value.encode() for op in ops])
                except ERRORS as exc:
                    for op in ops:
                        self.history.unknown(op, exc)
                    break
                for op, position in zip(ops, positions):
                    self.history.ok(op, list(position))
                await trio.sleep(self.rng.uniform(0, 0.02))
            nursery.cancel_scope.cancel()      # abandoned: the next writer fences what is left

    async def _reader(self, bk, index: int, deadline: float) -> None:
        for attempt in range(1000):
            if trio.current_time() >= deadline:
                return
            try:
                await self.read_all(bk, f"reader-{index}.{attempt}", deadline=deadline)
            except ERRORS:
                await trio.sleep(0.5)

    async def read_all(self, bk, process: str, *, deadline: float | None = None, idle_s: float = 1.0) -> bool:
        """Read from the start until the deadline (or, without one, until the end of the
        stream); True when the end-of-stream marker was reached."""
        async with bk.streams.open_reader(NAMESPACE, STREAM) as reader:
            for _ in range(10_000_000):
                if deadline is not None and trio.current_time() >= deadline:
                    return False
                record = await reader.read_next(timeout_s=idle_s)
                if record is None:
                    if reader.is_ended:
                        return True
                    continue
                self.history.ok(self.history.invoke(process, "read", "from-start"),
                                [list(record.dlsn), bytes(record.payload).decode("utf-8", "backslashreplace")])
        return False

    async def final_check(self, uri: str) -> None:
        """A last writer fences the others and marks the end; a fresh reader reads everything."""
        async with bkclient.connect(uri) as bk:
            op = self.history.invoke("final", "final-read", STREAM)
            error = "not tried"
            for attempt in range(8):
                try:
                    with trio.fail_after(60):
                        async with bk.streams.open_writer(NAMESPACE, STREAM) as writer:
                            await writer.mark_end_of_stream()
                        name = f"final.{attempt}"
                        if await self.read_all(bk, name, idle_s=5.0):
                            self.history.ok(op, name)
                            return
                        error = "the reader did not reach the end of the stream"
                except ERRORS as exc:
                    error = exc
                await trio.sleep(1.0 + attempt)
            self.history.fail(op, error)
