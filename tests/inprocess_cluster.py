"""Bookies served in this process over real TCP and real files, for library tests.

Each bookie runs in its own cancel scope with its own metastore session, so a test can stop one
(its connections drop, its session ends, its files stay) and start it again on the same port.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import trio

from bklocal.processes import free_port
from bkcore.bookie.journal_files import JournalConfig
from bkmetastore.layout_node import resolve_layout
from bkmetastore.uri import open_metastore, parse_metastore_uri
from bktransports.bookie_server import BookieServer, BookieServerConfig


@dataclass
class RunningBookie:
    config: BookieServerConfig
    server: BookieServer | None = None
    scope: trio.CancelScope | None = None
    stopped: trio.Event = field(default_factory=trio.Event)

    @property
    def bookie_id(self) -> str:
        return self.config.bookie_id


class InProcessCluster:
    def __init__(self, nursery: trio.Nursery, data_root, uri: str) -> None:
        self.nursery = nursery
        self.data_root = data_root
        self.uri = uri
        self.bookies: list[RunningBookie] = []

    async def add_bookie(self, **overrides) -> RunningBookie:
        index = len(self.bookies)
        config = BookieServerConfig(data_dir=str(self.data_root / f"bookie{index}"), port=0,
                                    journal=JournalConfig(journal_max_size=4 * 1024 * 1024), **overrides)
        bookie = RunningBookie(config)
        await self._start(bookie, port=0)
        self.bookies.append(bookie)
        return bookie

    async def _start(self, bookie: RunningBookie, *, port: int) -> None:
        # The bookie id is host:port, so the port is fixed before the bookie registers.
        bookie.config = dataclasses.replace(bookie.config, port=port or free_port())
        bookie.stopped = trio.Event()
        bookie.scope = trio.CancelScope()

        async def run(task_status=trio.TASK_STATUS_IGNORED) -> None:
            parsed = parse_metastore_uri(self.uri)
            with bookie.scope:
                async with await open_metastore(parsed) as store:
                    bookie.server = BookieServer(bookie.config, store, await resolve_layout(store, parsed),
                                                 reopen_store=lambda: open_metastore(parsed))
                    await bookie.server.serve(task_status=task_status)
            bookie.stopped.set()

        await self.nursery.start(run)

    async def stop(self, bookie: RunningBookie) -> None:
        bookie.scope.cancel()
        await bookie.stopped.wait()

    async def restart(self, bookie: RunningBookie) -> None:
        await self._start(bookie, port=bookie.config.port)
