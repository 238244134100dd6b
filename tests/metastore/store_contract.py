"""The behaviour every async MetadataStore backend owes its users, as one reusable check.

Each backend's tests call `await check_store_contract(open_store)` where `open_store()` opens a
new session on the same cluster; the check runs under a fresh root so it can share a cluster.
"""

from __future__ import annotations

import itertools

import trio

from bkcore.metaops import Children, Create, Delete, Get, MetaCode, SetData

_roots = itertools.count(1)


async def expect(store, op, code: MetaCode) -> None:
    result = await store.execute(op)
    assert result.code is code, f"{op} answered {result}, not {code.name}"


async def check_store_contract(open_store) -> None:
    root = f"/contract{next(_roots)}"
    async with await open_store() as store, await open_store() as other:
        # create / get / CAS / delete with ZooKeeper's codes
        created = await store.execute(Create(f"{root}/a", b"x"))
        assert (created.code, created.path, created.version) == (MetaCode.OK, f"{root}/a", 0), created
        await expect(store, Create(f"{root}/a", b"y"), MetaCode.NODE_EXISTS)
        got = await other.execute(Get(f"{root}/a"))
        assert (got.code, got.data, got.version) == (MetaCode.OK, b"x", 0), got
        await expect(store, SetData(f"{root}/a", b"z", 5), MetaCode.BAD_VERSION)
        updated = await store.execute(SetData(f"{root}/a", b"z", 0))
        assert (updated.code, updated.version) == (MetaCode.OK, 1), updated
        await expect(store, Get(f"{root}/missing"), MetaCode.NO_NODE)
        await expect(store, Delete(root), MetaCode.NOT_EMPTY)
        await expect(store, Delete(f"{root}/a", 0), MetaCode.BAD_VERSION)

        # sequential ids are increasing
        first = await store.execute(Create(f"{root}/idgen/ID-", is_sequential=True))
        second = await other.execute(Create(f"{root}/idgen/ID-", is_sequential=True))
        assert first.code is second.code is MetaCode.OK, (first, second)
        assert int(first.path.rsplit("ID-", 1)[1]) < int(second.path.rsplit("ID-", 1)[1])

        # a data watch fires on change, a children watch on a new child
        result, data_watch = await other.execute_watch(Get(f"{root}/a"))
        assert result.code is MetaCode.OK and not data_watch.is_fired, result
        result, children_watch = await other.execute_watch(Children(root))
        assert set(result.children) == {"a", "idgen"}, result
        await store.execute(SetData(f"{root}/a", b"w", -1))
        with trio.fail_after(10):
            await data_watch.wait()
        assert not children_watch.is_fired
        await store.execute(Create(f"{root}/b", b""))
        with trio.fail_after(10):
            await children_watch.wait()

        # a watch on a missing node fires when it is created
        result, creation_watch = await other.execute_watch(Get(f"{root}/later"))
        assert result.code is MetaCode.NO_NODE, result
        await store.execute(Create(f"{root}/later", b"1"))
        with trio.fail_after(10):
            await creation_watch.wait()

        # ephemeral nodes vanish when their session closes, and watchers hear of it
        await store.execute(Create(f"{root}/live/bookie-1", b"", is_ephemeral=True))
        result, live_watch = await other.execute_watch(Children(f"{root}/live"))
        assert result.children == ("bookie-1",), result
        await store.aclose()
        assert store.session_lost
        with trio.fail_after(20):
            await live_watch.wait()
        assert (await other.execute(Children(f"{root}/live"))).children == ()
        assert not other.session_lost
