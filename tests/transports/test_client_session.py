"""open_client: the driver serves the block that uses it until that block has ended, its
cleanup after a cancellation from outside included (a stream storage server cancelled from
outside seals its ranges' journals through its driver in such a cleanup)."""

import trio

from bkcore.client.handles import BookKeeperClient
from bktransports.client_session import open_client

URI = "memory://client-session"


async def test_a_block_cancelled_from_outside_can_still_use_the_driver_in_its_cleanup(start_cluster):
    await start_cluster(URI, 3)
    closed = []

    async def use_the_cluster(task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with open_client(URI) as driver:
            ledger = await BookKeeperClient(driver).create_ledger(password=b"pw")
            await ledger.add(b"acknowledged")
            ledger.start_add(b"in flight", lambda entry_id, error: None)
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                # Sealing waits for the add in flight (the bookies' answers) and writes the
                # metadata: the driver's tasks must still run. (Before, the cancellation reached
                # them too: the close found the driver's nursery closed, lost the add in flight,
                # or waited forever for tasks cancelled as they began.)
                with trio.CancelScope(shield=True), trio.fail_after(10):
                    closed.append(await ledger.close())

    async with trio.open_nursery() as nursery:
        await nursery.start(use_the_cluster)
        nursery.cancel_scope.cancel()
    assert [metadata.last_entry_id for metadata in closed] == [1]
