"""Which stream storage server owns which table range, in the metastore:

    <root>/stream-storage/owners/<namespace>~<stream>~<range>    ephemeral, data = owner's "host:port"
    <root>/stream-storage/servers/<host:port>                     ephemeral: the servers up now,
                                                                  data = {"peer": "host:port"} (JSON)

A server claims a range by creating its node (ephemeral: it vanishes when the server's metastore
session ends, so a dead server's ranges become free) and only then opens the range, whose
journal writer fences whoever wrote before. The node says where to send requests; it is not
what keeps two owners apart — journal fencing is: a server whose session expired while it was
paused fails on its next journal write, even if it still thinks it owns the range.

A server's id is its own gRPC address. Its registration node also says where it takes table
calls from the other servers (streamstorage.peer_calls), once it listens for them: a server
that gets a request for a range another owns looks the owner's peer address up there.
"""

from __future__ import annotations

import json

from bkcore.metaops import Children, Create, Delete, Get, MetaCode, SetData


def owners_path(root: str) -> str:
    return f"{root}/stream-storage/owners"


def servers_path(root: str) -> str:
    return f"{root}/stream-storage/servers"


def range_name(index: tuple[str, str, int]) -> str:
    namespace, stream, range_id = index
    return f"{namespace}~{stream}~{range_id}"


async def owner_of(store, root: str, index: tuple[str, str, int]) -> str | None:
    """The server serving a range now, if any."""
    result = await store.execute(Get(f"{owners_path(root)}/{range_name(index)}"))
    _check_reachable(result.code, "find the owner of a table range")
    return result.data.decode() if result.code is MetaCode.OK else None


async def live_servers(store, root: str) -> list[str]:
    result = await store.execute(Children(servers_path(root)))
    _check_reachable(result.code, "list the stream storage servers")
    return sorted(result.children) if result.code is MetaCode.OK else []


async def peer_address_of(store, root: str, server_id: str) -> str:
    """Where server `server_id` takes table calls from other servers ("host:port"); a
    ConnectionError (which the caller's client retries) if it is not registered now, or has not
    said yet."""
    result = await store.execute(Get(f"{servers_path(root)}/{server_id}"))
    _check_reachable(result.code, f"find the peer address of stream storage server {server_id}")
    if result.code is not MetaCode.OK:
        raise ConnectionError(f"stream storage server {server_id} is not registered (it is down or starting)")
    try:
        address = json.loads(result.data)["peer"] if result.data else None
    except (ValueError, TypeError, KeyError):
        address = None
    if not isinstance(address, str) or ":" not in address:
        raise ConnectionError(f"stream storage server {server_id} has not said where it takes table calls yet")
    return address


def _check_reachable(code: MetaCode, what: str) -> None:
    """A metastore that did not answer is not an answer of "nobody": say what happened."""
    if code is MetaCode.SESSION_EXPIRED:
        raise ConnectionError(f"cannot {what}: the metastore session of this client expired; connect again")
    if code is MetaCode.CONNECTION_LOSS:
        raise ConnectionError(f"cannot {what}: the metastore did not answer (connection lost); try again")


class NotOwner(Exception):
    """Another server owns the range; send the request there."""

    def __init__(self, owner: str, what: str) -> None:
        super().__init__(f"{what} is served by {owner}")
        self.owner = owner
        self.what = what


class OwnershipUncertain(ConnectionError):
    """This server cannot be sure it still owns the range (its metastore session has not been
    confirmed for too long), so it does not answer reads from its state; retry, here or at the
    range's next owner."""


class RangeOwnership:
    def __init__(self, store, root: str, server_id: str) -> None:
        self._store = store
        self._layout_root = root
        self._root = owners_path(root)
        self._servers = servers_path(root)
        self.server_id = server_id
        # Where this server takes table calls from the others ("host:port"), once it listens:
        # the data of its registration node.
        self.peer_address: str | None = None
        # The ranges this instance claimed and has not released. A claim node naming this
        # server that is not among them was left by an earlier run of the server.
        self._claimed: set[tuple[str, str, int]] = set()

    def _path(self, index: tuple[str, str, int]) -> str:
        return f"{self._root}/{range_name(index)}"

    async def register(self) -> None:
        """Announce this server (ephemeral) so thick clients can find one."""
        parts = self._servers.strip("/").split("/")
        for depth in range(1, len(parts) + 1):
            await self._store.execute(Create("/" + "/".join(parts[:depth])))
        path = f"{self._servers}/{self.server_id}"
        # A node left by an earlier run of this server (whose session has not expired yet) would
        # vanish with that session: replace it with one of this session.
        await self._store.execute(Delete(path))
        result = await self._store.execute(Create(path, self._registration_data(), is_ephemeral=True))
        if result.code is not MetaCode.OK:
            raise ConnectionError(f"could not register stream storage server {self.server_id}: {result.code.name}")

    async def announce_peer_address(self, address: str) -> None:
        """Say in this server's registration node that it takes table calls at `address`
        (register() writes it too from now on)."""
        self.peer_address = address
        result = await self._store.execute(SetData(f"{self._servers}/{self.server_id}", self._registration_data(), -1))
        if result.code is not MetaCode.OK:
            raise ConnectionError(f"could not announce the peer address of stream storage server "
                                  f"{self.server_id}: {result.code.name}")

    def _registration_data(self) -> bytes:
        return json.dumps({"peer": self.peer_address}).encode() if self.peer_address else b""

    async def owner(self, index: tuple[str, str, int]) -> str | None:
        """The server the range's claim node names now, if any."""
        return await owner_of(self._store, self._layout_root, index)

    async def claim(self, index: tuple[str, str, int]) -> str | None:
        """Take the range if nobody holds it; None if it is ours now, else the owner's id."""
        path = self._path(index)
        for _ in range(3):
            result = await self._store.execute(Create(path, self.server_id.encode(), is_ephemeral=True))
            if result.code is MetaCode.OK:
                self._claimed.add(index)
                return None
            if result.code is MetaCode.NO_NODE:
                for parent in (self._root.rsplit("/", 1)[0], self._root):
                    await self._store.execute(Create(parent))
                continue
            current = await self._store.execute(Get(path))
            if current.code is MetaCode.OK:
                owner = current.data.decode()
                if owner != self.server_id:
                    return owner
                if index in self._claimed:
                    return None
                # Left by an earlier run of this server (one id, one server at a time), under a
                # session that has not expired yet; once it does, the node vanishes and another
                # server may claim the range while this one serves it. Claim it anew.
                await self._store.execute(Delete(path, current.version))
        raise ConnectionError(f"could not claim table range {index} in the metastore")

    async def release(self, index: tuple[str, str, int]) -> None:
        """Give the range up (only if the node is still this server's)."""
        path = self._path(index)
        current = await self._store.execute(Get(path))
        self._claimed.discard(index)
        if current.code is MetaCode.OK and current.data.decode() == self.server_id:
            await self._store.execute(Delete(path, current.version))
