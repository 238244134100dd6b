"""The stream storage server of a simulated process, and the requests it answers over bksim.rpc.

A server process runs the product's table service, bkcore.table.service.Tables, with its
metastore ownership (server id: the process's stable role, ss<i>, which a restarted process
keeps, as a real server keeps its host:port), registers itself, and answers table requests:

    TableWrite(pkey, command)           Tables.execute  -> Done(result)
    TableRead(pkey, lkey, lkey_end)     Tables.range    -> Done(RangeResult)
    WatchRequest(...)                   Tables.watch    -> WatchStarted(r), WatchChange(event)...,
                                                           WatchEnded() after duration_s
and, for any of them, Redirect(owner) (NotOwner: another server owns the range), Refused
(a TableError: the command changed nothing), Compacted (a watch's start revision is gone) or
Failed (anything else the layers below raise: the outcome of a write is unknown).

A server whose metastore session is lost cannot claim or keep ranges any more (an expired
session is final, in ZooKeeper as here); the process then exits and is restarted, as a
supervisor restarts a real one.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from bkcore.errors import BKException
from bkcore.stream.errors import StreamException
from bkcore.table.commands import Command, TableError
from bkcore.table.kv import WatchEvent
from bkcore.table.ownership import NotOwner
from bkcore.table.range import RangeClosed, WatchCompacted, WatchTooSlow
from bkcore.table.service import Tables
from bksim.rpc import RpcEndpoint
from bksim.workload_stream import leaf_exceptions

# Failures the layers below may raise at a request; anything else escaping a handler is a bug.
EXPECTED = (BKException, StreamException, ConnectionError, RangeClosed, WatchTooSlow)
REGISTER_RETRY_S = 0.2


@dataclass(frozen=True, slots=True)
class TableWrite:
    pkey: bytes
    command: Command


@dataclass(frozen=True, slots=True)
class TableRead:
    pkey: bytes
    lkey: bytes
    lkey_end: bytes | None = None        # None: the one key; b"": to the end of the pkey


@dataclass(frozen=True, slots=True)
class WatchRequest:
    pkey: bytes
    lkey: bytes
    lkey_end: bytes | None
    start_revision: int                  # 0: from now on
    duration_s: float                    # the server ends the watch after this long


@dataclass(frozen=True, slots=True)
class Done:
    result: object


@dataclass(frozen=True, slots=True)
class Redirect:
    owner: str


@dataclass(frozen=True, slots=True)
class Refused:
    reason: str


@dataclass(frozen=True, slots=True)
class Compacted:
    reason: str


@dataclass(frozen=True, slots=True)
class Failed:
    error: str


@dataclass(frozen=True, slots=True)
class WatchStarted:
    revision: int                        # every change above it follows


@dataclass(frozen=True, slots=True)
class WatchChange:
    event: WatchEvent


@dataclass(frozen=True, slots=True)
class WatchEnded:
    pass


class TableServer:
    def __init__(self, *, world, process, namespace: str, stream: str, checkpoint_every: int) -> None:
        self._world = world
        self._process = process
        self._rt = process.runtime
        self._namespace, self._stream = namespace, stream
        self._checkpoint_every = checkpoint_every
        self.tables: Tables | None = None

    async def run(self) -> None:
        """Register, then serve until the process ends (the workload ends it once its
        metastore session is lost)."""
        process, rt = self._process, self._rt
        async with rt.open_nursery() as nursery:
            self.tables = Tables(process.bk, nursery, server_id=process.role, checkpoint_every=self._checkpoint_every)
            RpcEndpoint(world=self._world, process=process, handler=self.handle)
            while True:
                try:
                    await self.tables.register()
                    break
                except ConnectionError:
                    await rt.sleep(REGISTER_RETRY_S)
            await rt.sleep_forever()

    async def handle(self, source: str, body: object, reply) -> object:
        tables, namespace, stream = self.tables, self._namespace, self._stream
        try:
            if type(body) is TableWrite:
                return Done(await tables.execute(namespace, stream, body.pkey, body.command))
            if type(body) is TableRead:
                return Done(await tables.range(namespace, stream, body.pkey, body.lkey, body.lkey_end))
            assert type(body) is WatchRequest, body
            events = tables.watch(namespace, stream, body.pkey, body.lkey, body.lkey_end,
                                  start_revision=body.start_revision,
                                  started=lambda revision: reply(WatchStarted(revision)))
            # Closed here, not whenever the collector finds it (a moment no seed decides).
            async with contextlib.aclosing(events):
                with self._rt.move_on_after(body.duration_s):
                    async for event in events:
                        reply(WatchChange(event))
            return WatchEnded()
        except NotOwner as exc:
            return Redirect(exc.owner)
        except TableError as exc:
            return Refused(str(exc))
        except WatchCompacted as exc:
            return Compacted(str(exc))
        except EXPECTED as exc:
            return Failed(type(exc).__name__)
        except BaseExceptionGroup as group:
            leaves = leaf_exceptions(group)
            if all(isinstance(leaf, EXPECTED) for leaf in leaves):
                return Failed(type(leaves[0]).__name__)
            raise
