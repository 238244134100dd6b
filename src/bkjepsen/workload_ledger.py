"""The ledger workload: one writer appending pipelined batches (a new ledger after every error,
and now and then after a clean close), two tailing readers following the newest ledger without
recovery, and a recoverer that opens ledgers with recovery while they are being written (fencing
the writer). Every add, read, LAC and close seen goes into the history.

An add's entry id is predicted when it starts (ids are handed out in call order on one handle),
so an add of unknown outcome still names its position; the checker verifies the prediction for
every acknowledged add. After the faults are healed, `final_check` opens every ledger with
recovery from a fresh client and reads it whole: that is where a lost acknowledged entry shows.
"""

from __future__ import annotations

import random

import trio

import bkclient
from bkjepsen.history import History

OP_TIMEOUT_S = 10.0
BATCH_COUNT_MAX = 16
READ_BATCH_COUNT = 64
FINAL_ATTEMPT_COUNT = 8
# What a client call may raise when the cluster misbehaves (a long poll's error comes wrapped
# in an ExceptionGroup from the library's nursery).
ERRORS = (bkclient.BKException, trio.TooSlowError, ConnectionError, OSError, ExceptionGroup)


class LedgerWorkload:
    def __init__(self, history: History, rng: random.Random) -> None:
        self.history, self.rng = history, rng
        self.ledger_ids: list[int] = []

    async def prepare(self, uri: str) -> None:
        """Nothing to create: ledgers are made as the writer goes."""

    async def run(self, uri: str, duration_s: float) -> None:
        deadline = trio.current_time() + duration_s
        async with bkclient.connect(uri) as bk:
            async with trio.open_nursery() as nursery:
                nursery.cancel_scope.deadline = deadline + OP_TIMEOUT_S
                nursery.start_soon(self._writer, bk, deadline)
                for index in range(2):
                    nursery.start_soon(self._tailer, bk, f"tail-{index + 1}", deadline)
                nursery.start_soon(self._recoverer, bk, deadline, random.Random(self.rng.random()))

    # -- the writer -----------------------------------------------------------------------------

    async def _writer(self, bk, deadline: float) -> None:
        for _ in range(100_000):
            if trio.current_time() >= deadline:
                return
            try:
                with trio.fail_after(OP_TIMEOUT_S):
                    ledger = await bk.create_ledger(ensemble=3, write_quorum=self.rng.choice([2, 3]), ack_quorum=2,
                                                    password=b"jepsen")
            except ERRORS:
                await trio.sleep(0.5)
                continue
            self.ledger_ids.append(ledger.ledger_id)
            await self._write_ledger(ledger, deadline)

    async def _write_ledger(self, ledger, deadline: float) -> None:
        next_entry_id = 0
        while trio.current_time() < deadline:
            count = self.rng.randrange(1, BATCH_COUNT_MAX + 1)
            ops = [self.history.invoke("writer", "add", (ledger.ledger_id, next_entry_id + i),
                                       f"L{ledger.ledger_id}-E{next_entry_id + i}-{self.rng.randrange(1 << 30):x}")
                   for i in range(count)]
            next_entry_id += count
            if not await self._add_batch(ledger, ops):
                return                               # an error (fenced, no bookies...): next ledger
            if self.rng.random() < 0.02:
                await self._close(ledger)
                return
            await trio.sleep(self.rng.uniform(0, 0.02))

    async def _add_batch(self, ledger, ops) -> bool:
        remaining = [len(ops)]
        failed = []
        done = trio.Event()

        def on_done(op, entry_id, error) -> None:
            if op.outcome == "pending":
                if error is None:
                    self.history.ok(op, entry_id)
                else:
                    self.history.unknown(op, error)
                    failed.append(error)
            remaining[0] -= 1
            if remaining[0] == 0:
                done.set()

        for op in ops:
            ledger.start_add(op.value.encode(), lambda entry_id, error, op=op: on_done(op, entry_id, error))
        with trio.move_on_after(OP_TIMEOUT_S):
            await done.wait()
        return done.is_set() and not failed

    async def _close(self, ledger) -> None:
        op = self.history.invoke("writer", "close-call", ledger.ledger_id)
        try:
            with trio.fail_after(OP_TIMEOUT_S):
                metadata = await ledger.close()
        except ERRORS as exc:
            self.history.unknown(op, exc)
            return
        self.history.ok(op)
        self.history.observe("writer", "close", ledger.ledger_id, [metadata.last_entry_id, metadata.length])

    # -- readers --------------------------------------------------------------------------------

    async def _tailer(self, bk, process: str, deadline: float) -> None:
        followed = -1
        for _ in range(100_000):
            if trio.current_time() >= deadline:
                return
            newest = self.ledger_ids[-1] if self.ledger_ids else -1
            if newest == followed:
                await trio.sleep(0.2)
                continue
            followed = newest
            try:
                with trio.fail_after(OP_TIMEOUT_S):
                    reader = await bk.open_ledger(newest, password=b"jepsen", recovery=False)
                await self._follow(reader, process, deadline)
            except ERRORS:
                await trio.sleep(0.2)

    async def _follow(self, reader, process: str, deadline: float) -> None:
        next_entry_id = 0
        while trio.current_time() < deadline:
            with trio.fail_after(OP_TIMEOUT_S):
                lac = await reader.wait_for_lac_beyond(next_entry_id - 1, timeout_s=1.0)
            self.history.observe(process, "lac", reader.ledger_id, lac)
            if next_entry_id <= lac:
                last = min(lac, next_entry_id + READ_BATCH_COUNT - 1)
                await self.read_range(reader, process, next_entry_id, last)
                next_entry_id = last + 1
            elif reader.is_closed or (self.ledger_ids and self.ledger_ids[-1] != reader.ledger_id):
                return

    async def read_range(self, reader, process: str, first: int, last: int) -> None:
        """Read first..last, recording each entry; a "no such entry" is pinned to its entry."""
        try:
            with trio.fail_after(OP_TIMEOUT_S):
                payloads = await reader.read(first, last)
        except bkclient.NoSuchEntry:
            for entry_id in range(first, last + 1):
                await self._read_one(reader, process, entry_id)
            return
        for offset, payload in enumerate(payloads):
            self.history.ok(self.history.invoke(process, "read", (reader.ledger_id, first + offset)),
                            bytes(payload).decode("utf-8", "backslashreplace"))

    async def _read_one(self, reader, process: str, entry_id: int) -> None:
        op = self.history.invoke(process, "read", (reader.ledger_id, entry_id))
        try:
            with trio.fail_after(OP_TIMEOUT_S):
                (payload,) = await reader.read(entry_id, entry_id)
        except bkclient.NoSuchEntry:
            self.history.ok(op, None)
        except ERRORS as exc:
            self.history.fail(op, exc)
        else:
            self.history.ok(op, bytes(payload).decode("utf-8", "backslashreplace"))

    async def _recoverer(self, bk, deadline: float, rng: random.Random) -> None:
        for _ in range(100_000):
            await trio.sleep(rng.uniform(3.0, 8.0))
            if trio.current_time() >= deadline:
                return
            if not self.ledger_ids:
                continue
            ledger_id = self.ledger_ids[-1] if rng.random() < 0.6 else rng.choice(self.ledger_ids)
            try:
                await self.recover_and_read(bk, "recoverer", ledger_id)
            except ERRORS:
                pass

    async def recover_and_read(self, bk, process: str, ledger_id: int) -> None:
        with trio.fail_after(OP_TIMEOUT_S * 3):
            reader = await bk.open_ledger(ledger_id, password=b"jepsen")
        metadata = reader.metadata
        self.history.observe(process, "close", ledger_id, [metadata.last_entry_id, metadata.length])
        for first in range(0, metadata.last_entry_id + 1, READ_BATCH_COUNT):
            await self.read_range(reader, process, first, min(metadata.last_entry_id, first + READ_BATCH_COUNT - 1))

    # -- after healing --------------------------------------------------------------------------

    async def final_check(self, uri: str) -> None:
        """Recover and read every ledger from a fresh client; a ledger that cannot be read after
        FINAL_ATTEMPT_COUNT tries is recorded as a failed final read."""
        async with bkclient.connect(uri) as bk:
            for ledger_id in self.ledger_ids:
                op = self.history.invoke("final", "final-read", ledger_id)
                error = None
                for attempt in range(FINAL_ATTEMPT_COUNT):
                    try:
                        await self.recover_and_read(bk, "final", ledger_id)
                        error = None
                        break
                    except ERRORS as exc:
                        error = exc
                        await trio.sleep(1.0 + attempt)
                if error is None:
                    self.history.ok(op)
                else:
                    self.history.fail(op, error)
