"""TCP proxies on 127.0.0.1, one per directed link between two processes, run in the harness's
trio loop: the nemesis cuts them, delays them or makes them one-way.

A Link listens on its own port and forwards every connection to its target port. Processes are
configured to dial each other through links (bookies advertise their link's port, raft-lite
peers list link ports, clients get metastore URIs of link ports), so the harness sits on every
path it may want to break.

Modes, each direction judged separately ("forward" is source -> target):
  open      bytes flow both ways;
  cut       nothing flows: bytes already read are held, new connections are accepted but not
            dialled onward. Like packets dropped by iptables: TCP on both ends sees silence, and
            only the processes' own timeouts end it. When healed, held bytes flow again in order;
  forward   only source -> target flows (one-way partition; answers are held);
  backward  only target -> source flows.
A delay (seconds) holds every chunk that long before passing it on.

Limits: reads are at most CHUNK_SIZE_MAX bytes; a link keeps at most CONNECTION_COUNT_MAX
connections (more are closed at once); everything stops when the proxy's nursery is cancelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import trio

CHUNK_SIZE_MAX = 65536
CONNECTION_COUNT_MAX = 256
MODES = ("open", "cut", "forward", "backward")


@dataclass
class Link:
    source: str               # the process that dials (a name like "b1", "m2", "client")
    target: str               # the process dialled
    target_port: int
    listen_port: int = 0
    mode: str = "open"
    delay_s: float = 0.0
    connection_count: int = 0
    bytes_count: int = 0
    _changed: trio.Event = field(default_factory=trio.Event)

    @property
    def name(self) -> str:
        return f"{self.source}->{self.target}"

    def set(self, *, mode: str | None = None, delay_s: float | None = None) -> None:
        assert mode is None or mode in MODES, mode
        if mode is not None:
            self.mode = mode
        if delay_s is not None:
            assert delay_s >= 0
            self.delay_s = delay_s
        changed, self._changed = self._changed, trio.Event()
        changed.set()

    def is_flowing(self, *, forward: bool) -> bool:
        return self.mode == "open" or self.mode == ("forward" if forward else "backward")

    async def wait_flowing(self, *, forward: bool) -> None:
        while not self.is_flowing(forward=forward):
            await self._changed.wait()

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(self.listen_port, host="127.0.0.1")
        self.listen_port = listeners[0].socket.getsockname()[1]
        task_status.started(self.listen_port)
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, downstream: trio.SocketStream) -> None:
        if self.connection_count >= CONNECTION_COUNT_MAX:
            await trio.aclose_forcefully(downstream)
            return
        self.connection_count += 1
        try:
            await self.wait_flowing(forward=True)
            try:
                upstream = await trio.open_tcp_stream("127.0.0.1", self.target_port)
            except OSError:
                return           # the target is down: the dialler sees its connection closed
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._pump, downstream, upstream, True, nursery.cancel_scope)
                    nursery.start_soon(self._pump, upstream, downstream, False, nursery.cancel_scope)
            finally:
                await trio.aclose_forcefully(upstream)
        finally:
            self.connection_count -= 1
            await trio.aclose_forcefully(downstream)

    async def _pump(self, source: trio.SocketStream, sink: trio.SocketStream, forward: bool,
                    scope: trio.CancelScope) -> None:
        """Copy one direction until either end closes (then the whole connection ends)."""
        try:
            while True:
                await self.wait_flowing(forward=forward)
                data = await source.receive_some(CHUNK_SIZE_MAX)
                if not data:
                    break
                if self.delay_s:
                    await trio.sleep(self.delay_s)
                await self.wait_flowing(forward=forward)
                await sink.send_all(data)
                self.bytes_count += len(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        scope.cancel()


class Proxies:
    """Every link of a cluster, by (source, target); started in a nursery the caller owns."""

    def __init__(self) -> None:
        self.links: dict[tuple[str, str], Link] = {}

    async def add(self, nursery: trio.Nursery, *, source: str, target: str, target_port: int) -> Link:
        key = (source, target)
        assert key not in self.links, key
        link = self.links[key] = Link(source, target, target_port)
        await nursery.start(link.serve)
        return link

    def port(self, source: str, target: str) -> int:
        return self.links[source, target].listen_port

    def touching(self, node: str) -> list[Link]:
        return [link for link in self.links.values() if node in (link.source, link.target)]

    def heal(self) -> None:
        for link in self.links.values():
            if link.mode != "open" or link.delay_s:
                link.set(mode="open", delay_s=0.0)

    def partition(self, side: set[str]) -> list[str]:
        """Cut every link between `side` and the rest; returns the names of the cut links."""
        cut = []
        for link in self.links.values():
            if (link.source in side) != (link.target in side):
                link.set(mode="cut")
                cut.append(link.name)
        return cut
