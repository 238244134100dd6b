"""open_service_nursery: its tasks outlive a cancellation of the block until the block (its
cleanup included) has ended; a failing task still cancels the block."""

import pytest
import trio

from bktransports.service_nursery import open_service_nursery


async def test_its_tasks_serve_the_blocks_cleanup_after_a_cancellation_then_stop():
    request_send, request_receive = trio.open_memory_channel(1)
    answer_send, answer_receive = trio.open_memory_channel(1)
    log: list[str] = []

    async def echo() -> None:
        try:
            async for request in request_receive:
                await answer_send.send(request)
        finally:
            log.append("service stopped")

    async def block(task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with open_service_nursery() as services:
            services.start_soon(echo)
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                with trio.CancelScope(shield=True), trio.fail_after(5):
                    await request_send.send("close")
                    log.append(f"cleanup got {await answer_receive.receive()}")

    async with trio.open_nursery() as nursery:
        await nursery.start(block)
        nursery.cancel_scope.cancel()
    assert log == ["cleanup got close", "service stopped"]


async def test_a_failing_task_cancels_the_block():
    async def fail() -> None:
        await trio.sleep(0.01)
        raise ValueError("the service broke")

    with pytest.raises(ExceptionGroup) as raised:
        async with open_service_nursery() as services:
            services.start_soon(fail)
            await trio.sleep_forever()
    assert raised.group_contains(ValueError, depth=2)
