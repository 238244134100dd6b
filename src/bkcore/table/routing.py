"""Where a table request goes: the one routing decision of thick table clients, in both worlds
(bkclient.table_client over gRPC, the simulator's table clients over its network).

A range's owner is named by its claim node in the metastore (bkcore.table.ownership); a range
nobody owns yet goes to its preferred server among the live ones (bkcore.table.placement, which
the servers compute alike), which claims it on first use. A server that finds the range owned
by another, or preferred by another while nobody owns it, answers NotOwner(that server), and
the request goes there next. The server ids are what the servers registered (host:port, or a simulated process's
role); how a request reaches one is the caller's business (`send`).

Pure async code over a metastore session: no trio, no clock, no randomness.
"""

from __future__ import annotations

from typing import Awaitable, Callable, TypeVar

from bkcore.table.ownership import NotOwner, live_servers, owner_of
from bkcore.table.placement import preferred_server

# NotOwner answers followed before giving up (each one names a newer owner; more than a few in a
# row means ownership is moving faster than the request, which the caller retries later).
REDIRECTS_MAX = 3
Answer = TypeVar("Answer")


class NoServer(ConnectionError):
    """No stream storage server is registered in the metastore."""


async def choose_server(store, root: str, index: tuple[str, str, int]) -> str:
    """The owner of range `index` if it has one, else its preferred live server."""
    owner = await owner_of(store, root, index)
    if owner is not None:
        return owner
    server = preferred_server(index, await live_servers(store, root))
    if server is None:
        raise NoServer("no stream storage server is running (bk standalone, or bk stream-storage)")
    return server


class Routes:
    """Where a client last found each range served: asked of the metastore once, then kept
    while the server answers. NotOwner names the new owner, which is kept instead; any other
    failure forgets the range, so the next call asks the metastore again. A kept route can be
    stale (the range moved and nobody told this client yet): the server it names then either
    redirects, or, deposed without knowing it, refuses reads (its lease ran out) and has its
    journal writes fenced, which is what keeps the answers right."""

    def __init__(self, store, root: str) -> None:
        self._store = store
        self._root = root
        self._servers: dict[tuple[str, str, int], str] = {}

    async def server_for(self, index: tuple[str, str, int]) -> str:
        server = self._servers.get(index)
        if server is None:
            server = self._servers[index] = await choose_server(self._store, self._root, index)
        return server

    def forget(self, index: tuple[str, str, int]) -> None:
        self._servers.pop(index, None)

    async def call(self, index: tuple[str, str, int], send: Callable[[str], Awaitable[Answer]]) -> Answer:
        """`send(server)` to the server range `index` is routed to; on NotOwner, to the owner it
        names, up to REDIRECTS_MAX times. Errors of `send` are raised as they are."""
        server = await self.server_for(index)
        for redirect_count in range(REDIRECTS_MAX + 1):
            try:
                return await send(server)
            except NotOwner as redirect:
                if redirect_count == REDIRECTS_MAX:
                    self.forget(index)
                    raise
                server = self._servers[index] = redirect.owner
            except Exception:
                self.forget(index)
                raise
        raise AssertionError("unreachable")
