"""Setting streams up for the Spark tests through the library (as an application would)."""

import uuid

from bkcore.stream.segments import StreamSettings


def new_stream(bk, prefix: str = "s", **settings) -> str:
    """A fresh stream "spark/<prefix>-<random>" (the namespace is made once)."""
    async def create(client, name):
        streams = client.streams
        if "spark" not in await streams.list_namespaces():
            await streams.create_namespace("spark", StreamSettings(ensemble_size=3, write_quorum_size=2,
                                                                   ack_quorum_size=2))
        await streams.create_stream("spark", name, StreamSettings(ensemble_size=3, write_quorum_size=2,
                                                                  ack_quorum_size=2, **settings)
                                    if settings else None)
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    bk.run(create, name)
    return f"spark/{name}"


def append(bk, stream: str, payloads, *, segments: int = 1) -> None:
    """Write `payloads` (bytes, or (txid, bytes)) with one writer, rolling into `segments`
    segments of about equal size."""
    namespace, name = stream.split("/")
    items = list(payloads)
    per_segment = -(-len(items) // segments)

    async def write(client):
        async with client.streams.open_writer(namespace, name) as writer:
            for index in range(0, len(items), per_segment):
                if index:
                    await writer.roll()
                await writer.write_many(items[index:index + per_segment])
    bk.run(write)
