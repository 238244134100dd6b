"""bkcore.table.routing (where thick clients send a table request) and the ownership claims it
reads, over the memory:// metastore."""

import pytest

from bkcore.metaops import Get, MetaCode
from bkcore.table.ownership import NotOwner, RangeOwnership, owners_path, range_name
from bkcore.table.placement import preferred_server
from bkcore.table.routing import NoServer, Routes, choose_server
from bkmetastore.memory_store import forget_memory_servers
from bkmetastore.uri import open_metastore

ROOT = "/ledgers"
INDEX = ("ns", "table", 0)


async def test_a_range_goes_to_its_owner_else_to_its_preferred_live_server():
    forget_memory_servers()
    async with await open_metastore("memory://route") as store:
        with pytest.raises(NoServer):
            await choose_server(store, ROOT, INDEX)
        servers = ("s1", "s2", "s3")
        for server in servers:
            await RangeOwnership(store, ROOT, server).register()
        indexes = [("ns", "table", i) for i in range(12)]
        chosen = [await choose_server(store, ROOT, index) for index in indexes]
        assert chosen == [preferred_server(index, servers) for index in indexes]
        assert set(chosen) == set(servers), "unowned ranges spread over the servers"
        other = next(server for server in servers if server != chosen[0])
        assert await RangeOwnership(store, ROOT, other).claim(indexes[0]) is None
        assert await choose_server(store, ROOT, indexes[0]) == other, "an owner wins over the preference"


async def test_a_request_follows_not_owner_answers():
    forget_memory_servers()
    async with await open_metastore("memory://redirect") as store:
        await RangeOwnership(store, ROOT, "s1").register()
        routes = Routes(store, ROOT)
        tried = []

        async def send(server: str) -> str:
            tried.append(server)
            if server != "s3":
                raise NotOwner({"s1": "s2", "s2": "s3"}[server], "range 0")
            return "answer"
        assert await routes.call(INDEX, send) == "answer"
        assert tried == ["s1", "s2", "s3"]
        assert await routes.call(INDEX, send) == "answer"
        assert tried[3:] == ["s3"], "the owner a redirect named is kept for the next call"

        async def always_elsewhere(server: str) -> str:
            raise NotOwner("s1", "range 0")
        with pytest.raises(NotOwner):
            await routes.call(INDEX, always_elsewhere)


async def test_a_route_is_kept_while_it_answers_and_forgotten_when_it_fails():
    forget_memory_servers()
    async with await open_metastore("memory://routes") as store:
        for server in ("s1", "s2"):
            await RangeOwnership(store, ROOT, server).register()
        assert await RangeOwnership(store, ROOT, "s1").claim(INDEX) is None
        routes = Routes(store, ROOT)
        assert await routes.server_for(INDEX) == "s1"
        await RangeOwnership(store, ROOT, "s1").release(INDEX)
        assert await RangeOwnership(store, ROOT, "s2").claim(INDEX) is None
        assert await routes.server_for(INDEX) == "s1", "no metastore read while the route answers"

        async def unreachable(server: str) -> str:
            raise ConnectionError(f"{server} does not answer")
        with pytest.raises(ConnectionError):
            await routes.call(INDEX, unreachable)
        assert await routes.server_for(INDEX) == "s2", "after a failure the metastore is asked again"


async def test_a_restarted_server_replaces_the_claims_of_its_previous_session():
    # Regression (bk sim run --workload table --seed 1): a server restarted under the same id
    # found its old claim, took it for its own, and lost it when the old session expired,
    # while it went on serving the range.
    forget_memory_servers()
    async with await open_metastore("memory://restart") as before, await open_metastore("memory://restart") as after:
        await RangeOwnership(before, ROOT, "s1").register()
        assert await RangeOwnership(before, ROOT, "s1").claim(INDEX) is None
        restarted = RangeOwnership(after, ROOT, "s1")
        await restarted.register()
        assert await restarted.claim(INDEX) is None
        before.expire_session()
        claim = await after.execute(Get(f"{owners_path(ROOT)}/{range_name(INDEX)}"))
        assert (claim.code, claim.data) == (MetaCode.OK, b"s1")
        assert await RangeOwnership(after, ROOT, "s2").claim(INDEX) == "s1"
        assert await choose_server(after, ROOT, ("ns", "table", 1)) == "s1"
