"""RenewingStore: a metastore session that is opened again when it expires.

An expired session is final (ZooKeeper's rule, and raft-lite's). A process that owns something
through its session (a bookie's registration, a table server's claims) must notice and start
over. A plain client owns nothing there: BookKeeper's own ZooKeeperClient opens a new session by
itself when one expires, and so does this wrapper, for the connections library users make
(bkclient.connect). An op answered SESSION_EXPIRED was not applied, so it is sent again once,
under the new session; watches of the old session have fired already ("session expired").
If the new session cannot be opened, the error says why, and the next op tries again.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable

import trio

from bkcore.metaops import Children, Get, MetaCode, MetaOp, MetaResult
from bkmetastore.api import MetadataStore, Watch

log = logging.getLogger("bk.metastore")


class RenewingStore(MetadataStore):
    def __init__(self, store: MetadataStore, reopen: Callable[[], Awaitable[MetadataStore]]) -> None:
        self._store = store
        self._reopen = reopen
        self._lock = trio.Lock()
        self._is_closed = False
        self.renewal_count = 0

    async def execute(self, op: MetaOp) -> MetaResult:
        result = await (await self._current()).execute(op)
        if result.code is MetaCode.SESSION_EXPIRED and not self._is_closed:
            result = await (await self._current()).execute(op)
        return result

    async def execute_watch(self, op: Get | Children) -> tuple[MetaResult, Watch]:
        result, watch = await (await self._current()).execute_watch(op)
        if result.code is MetaCode.SESSION_EXPIRED and not self._is_closed:
            result, watch = await (await self._current()).execute_watch(op)
        return result, watch

    @property
    def current(self) -> MetadataStore:
        """The session in use now (a new one after each renewal)."""
        return self._store

    @property
    def session_lost(self) -> bool:
        """Only once closed: an expired session is replaced by the next op."""
        return self._is_closed

    def session_lease_s(self) -> float:
        return self._store.session_lease_s()

    async def aclose(self) -> None:
        self._is_closed = True
        await self._store.aclose()

    async def _current(self) -> MetadataStore:
        """The live session, opening a new one first if the current one expired."""
        if self._store.session_lost and not self._is_closed:
            async with self._lock:
                if self._store.session_lost and not self._is_closed:
                    expired = self._store
                    try:
                        self._store = await self._reopen()
                    except (ConnectionError, OSError) as exc:
                        raise ConnectionError(f"the metastore session expired and a new one could not be "
                                              f"opened: {exc}") from None
                    self.renewal_count += 1
                    log.warning("the metastore session expired; a new one is open (renewal %d)",
                                self.renewal_count)
                    with trio.CancelScope(shield=True):
                        await expired.aclose()
        return self._store
