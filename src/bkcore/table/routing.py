"""Where a table request goes: the one routing decision of thick table clients, in both worlds
(bkclient.table_client over gRPC, the simulator's table clients over its network).

A range's owner is named by its claim node in the metastore (bkcore.table.ownership); a range
nobody owns yet goes to a live server chosen at random, which claims it on first use. A server
that finds the range owned by another answers NotOwner(owner), and the request goes there
next. The server ids are what the servers registered (host:port, or a simulated process's
role); how a request reaches one is the caller's business (`send`).

Pure async code over a metastore session and an injected random.Random: no trio, no clock.
"""

from __future__ import annotations

from typing import Awaitable, Callable, TypeVar

from bkcore.table.ownership import NotOwner, live_servers, owner_of

# NotOwner answers followed before giving up (each one names a newer owner; more than a few in a
# row means ownership is moving faster than the request, which the caller retries later).
REDIRECTS_MAX = 3
Answer = TypeVar("Answer")


class NoServer(ConnectionError):
    """No stream storage server is registered in the metastore."""


async def choose_server(store, root: str, index: tuple[str, str, int], rng) -> str:
    """The owner of range `index` if it has one, else a live server chosen with `rng`."""
    owner = await owner_of(store, root, index)
    if owner is not None:
        return owner
    servers = await live_servers(store, root)
    if not servers:
        raise NoServer("no stream storage server is running (bk standalone, or bk stream-storage)")
    return rng.choice(servers)


async def call_owner(store, root: str, index: tuple[str, str, int], rng,
                     send: Callable[[str], Awaitable[Answer]]) -> Answer:
    """`send(server)` to the server routing chooses for range `index`; on NotOwner, to the owner
    it names, up to REDIRECTS_MAX times. Other errors of `send` are raised as they are."""
    server = await choose_server(store, root, index, rng)
    for _ in range(REDIRECTS_MAX):
        try:
            return await send(server)
        except NotOwner as redirect:
            server = redirect.owner
    return await send(server)
