"""The ledger handles (bkcore.client.handles) in a simulated process: behaviour that only shows
over time, which the simulator's virtual clock measures exactly."""

import dataclasses
import random

from bksim.processes import Processes
from bksim.scenario import S, Scenario
from bksim.world import SimWorld


def test_waiting_on_a_fenced_ledger_that_nobody_closes_polls_at_a_pause_not_at_network_pace():
    """Bookies answer a long poll on a fenced ledger at once (so a tailing reader learns of a
    recovery), and a recovery may stall before it closes the ledger: the wait must not turn into
    a loop at the network's round-trip pace (it once made 2,000,000 events of a 10 s simulated
    run, found under the raft-lite metastore)."""
    world = SimWorld(scenario=dataclasses.replace(Scenario(seed=1), metastore_kind="memory"))
    for index in range(3):
        world.add_bookie(f"bookie-{index}")
    processes = Processes(world=world, rng=random.Random(1))
    polls = []

    async def main(process):
        writer = await process.bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2)
        await writer.add(b"the only entry")
        for name in sorted(world.bookies):
            # Fenced (as by a recovery's first step, in memory until its journal write lands).
            world.bookies[name].core._fenced.add(writer.ledger_id)
        reader = await process.bk.open_ledger(writer.ledger_id, recovery=False)
        call = process.call

        async def counting_call(start):
            polls.append(world.now_ns)
            return await call(start)

        process.call = counting_call
        with process.runtime.move_on_after(1.0):
            await reader.wait_for_lac_beyond(0)        # entry 1 will never come

    processes.start("tailer", main)
    world.loop.run_until(world.now_ns + 3 * S)
    assert polls, "the wait never polled"
    assert len(polls) <= 40, f"{len(polls)} polls in one simulated second"
