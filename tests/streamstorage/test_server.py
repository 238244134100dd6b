"""run_stream_storage: a server whose metastore session expires serves again, on the same port,
with a new session (its old claims are gone, so it claims its ranges again)."""

import functools

import trio

import bkclient
from bkclient.storage_client import StorageClient
from bkcore.table.ownership import peer_address_of
from streamstorage.server import run_stream_storage

URI = "memory://stream-storage-server"


async def test_a_server_that_loses_its_session_serves_again_with_a_new_one(start_cluster, tmp_path, caplog):
    await start_cluster(URI, 3)
    with trio.fail_after(60):
        await serve_lose_the_session_and_serve_again(tmp_path, caplog)


async def serve_lose_the_session_and_serve_again(tmp_path, caplog) -> None:
    async with trio.open_nursery() as nursery:
        gateway = await nursery.start(functools.partial(run_stream_storage, URI, host="127.0.0.1", port=0,
                                                        index_dir=str(tmp_path / "indexes")))
        address = f"127.0.0.1:{gateway.port}"

        def count(amount: int) -> int:
            with StorageClient(address) as client:
                if amount == 1:
                    client.create_stream("default", "counters")
                return client.table("default", "counters").increment(b"visits", amount)

        assert await trio.to_thread.run_sync(count, 1) == 1
        async with bkclient.connect(URI) as bk:
            peer_address = await peer_address_of(bk.store, bk.layout.root, address)
        assert peer_address.startswith("127.0.0.1:") and peer_address != address
        first_store = gateway.tables._bk.store
        first_store.expire_session()                    # what a session timeout does
        with trio.fail_after(30):
            # Until the server notices, the old session's server may still answer (a range
            # write needs no lease): wait for it to start over, so the new one answers.
            while "serving again with a new one" not in caplog.text:
                await trio.sleep(0.05)
            while True:
                await trio.sleep(0.2)
                try:
                    total = await trio.to_thread.run_sync(count, 2)
                    break
                except Exception:      # noqa: BLE001 - the server is starting over meanwhile
                    continue
        assert total == 3, "the acknowledged increment survives the new session"
        # Where it takes table calls from other servers: announced again, on the same port,
        # once it serves with its new session (the increment above may have been the old one's).
        async with bkclient.connect(URI) as bk:
            while True:
                try:
                    assert await peer_address_of(bk.store, bk.layout.root, address) == peer_address
                    break
                except ConnectionError:
                    await trio.sleep(0.1)
        nursery.cancel_scope.cancel()
