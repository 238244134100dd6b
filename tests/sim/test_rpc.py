"""bksim.rpc: requests between simulated processes over the world's network."""

import dataclasses
import random

from bksim.options import NetworkOptions
from bksim.processes import Processes
from bksim.rpc import RpcEndpoint, RpcRefused, RpcTimeout
from bksim.scenario import S, Scenario
from bksim.world import SimWorld


def world_with(network: NetworkOptions = NetworkOptions.none()) -> tuple[SimWorld, Processes]:
    world = SimWorld(scenario=dataclasses.replace(Scenario(seed=1), network=network))
    return world, Processes(world=world, rng=random.Random(1))


def serve(processes: Processes, role: str, served: list) -> None:
    async def handler(source, body, reply):
        served.append(body)
        for part in range(body):
            reply(part)
        return "done"

    async def main(process):
        RpcEndpoint(world=processes.world, process=process, handler=handler)
        await process.runtime.sleep_forever()
    processes.start(role, main)


def run_client(world: SimWorld, processes: Processes, body) -> list:
    outcome = []

    async def main(process):
        endpoint = RpcEndpoint(world=world, process=process)
        try:
            outcome.append(await endpoint.call("server.1.rpc", 0, timeout_s=1.0))
            stream = endpoint.request("server.1.rpc", 3)
            outcome.extend([await stream.next(1.0) for _ in range(4)])
            stream.close()
            outcome.append(await endpoint.call("server.1.rpc", body, timeout_s=1.0))
        except (RpcTimeout, RpcRefused) as exc:
            outcome.append(type(exc))
    processes.start("client", main)
    world.loop.run_until(world.now_ns + 5 * S)
    return outcome


def test_calls_and_streams_are_answered_in_order_once_each_despite_duplicates_and_reordering():
    world, processes = world_with(dataclasses.replace(NetworkOptions.none(), duplicate_probability=0.5,
                                                      reorder_probability=0.5, reorder_delay_max_ns=5_000_000))
    served = []
    serve(processes, "server", served)
    # (a call takes the first reply: the last call's answer is its intermediate reply 0)
    assert run_client(world, processes, 1) == ["done", 0, 1, 2, "done", 0]
    assert served == [0, 3, 1]


def test_a_crashed_server_refuses_and_a_lost_request_times_out():
    world, processes = world_with()
    served = []
    serve(processes, "server", served)
    world.loop.run_until(1 * S)
    processes.crash("server", restart_after_ns=None)
    assert run_client(world, processes, 0) == [RpcRefused]
    lossy, lossy_processes = world_with(dataclasses.replace(NetworkOptions.none(), loss_probability=1.0))
    serve(lossy_processes, "server", [])
    assert run_client(lossy, lossy_processes, 0) == [RpcTimeout]
