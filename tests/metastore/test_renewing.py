"""bkmetastore.renewing: a library client's metastore session that expires is replaced by a new
one (as BookKeeper's ZooKeeperClient does), on the memory:// backend, whose sessions a test can
expire, and the library's connect() over it."""

import pytest

from bkcore.metaops import Create, Get, MetaCode
from bkmetastore.memory_store import MemoryStore, forget_memory_servers, memory_server
from bkmetastore.renewing import RenewingStore


@pytest.fixture(autouse=True)
def fresh_servers():
    forget_memory_servers()
    yield
    forget_memory_servers()


async def test_an_expired_session_is_replaced_and_the_op_goes_through():
    server = memory_server("renew")
    sessions = [MemoryStore(server)]

    async def reopen():
        sessions.append(MemoryStore(server))
        return sessions[-1]

    store = RenewingStore(sessions[0], reopen)
    assert (await store.execute(Create("/before", b"1"))).code is MetaCode.OK
    result, watch = await store.execute_watch(Get("/before"))
    sessions[0].expire_session()
    assert watch.is_fired                                  # the old session's watches fire
    assert not store.session_lost
    assert (await store.execute(Create("/after", b"2"))).code is MetaCode.OK
    assert len(sessions) == 2 and store.renewal_count == 1
    assert (await store.execute(Get("/before"))).data == b"1"
    await store.aclose()
    assert store.session_lost


async def test_without_renewal_an_expired_session_stays_expired():
    server = memory_server("final")
    store = MemoryStore(server)
    store.expire_session()
    assert store.session_lost
    assert (await store.execute(Get("/"))).code is MetaCode.SESSION_EXPIRED


async def test_a_session_that_cannot_be_reopened_says_so_and_is_tried_again():
    server = memory_server("flaky")
    first = MemoryStore(server)
    attempts = []

    async def reopen():
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("nothing listening")
        return MemoryStore(server)

    store = RenewingStore(first, reopen)
    first.expire_session()
    with pytest.raises(ConnectionError, match="session expired and a new one could not be opened"):
        await store.execute(Get("/"))
    assert (await store.execute(Get("/"))).code is MetaCode.OK
    assert len(attempts) == 2
