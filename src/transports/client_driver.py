"""ClientDriver: runs bkcore's Client over trio — bookie connections, metastore calls, timers.

The application side starts an operation with `await driver.call(lambda op_id, now_ns: ...)`;
the driver pumps the effects (Send to a bookie's connection, MetadataCall to the store, the
Completed that resolves the call) and wakes the caller with the result or raises the error.

Bookies are addressed by id "host:port". A connection is opened on first use (with a connect
timeout); messages sent while it opens wait in its queue. When a connect fails or a connection
breaks, every request it carried fails at once (Client.on_connection_lost), and the bookie is
not dialled again until a backoff (doubling up to RECONNECT_BACKOFF_MAX_S) has passed: requests
meanwhile fail immediately, which the core turns into ensemble changes or other replicas.
Everything queued for a bookie between two writes leaves in one frame; at the end of each
pump the connections it sent on are flushed, so a lone add leaves without a hop to a task.
The driver groups nothing: the core holds adds for a bookie and names it in a HeldSends
effect; the driver pulls that bookie's sends (Client.pull_sends) at once if its connection
can write, or else when it can: once the connection's writer task has written what it had
(FramedConnection's on_writable), or the connection is open or has failed. Adds that queue
meanwhile, in any number of pumps, leave as one AddBatchRequest per run, made by the core.
Adds started with start_add (pipelined) are pumped together once the caller yields, so a burst
of them makes one batch per bookie (a long burst, one per PIPELINED_ADDS_PER_PUMP_MAX adds).

A bookie that refuses this client's credentials (no secret, a wrong one, a TLS handshake that
fails, or, for a client in the clear, a connection closed before any answer) is remembered
until it answers; an operation that fails for want of bookies (NotEnoughBookies, Timeout, ...)
meanwhile says so in its message, naming the credential to give, rather than only that too few
bookies answered.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import random
import ssl
from typing import Callable

import trio

from bkcore.client.client import Client
from bkcore.client.config import ClientConfig
from bkcore.effects import Completed, HeldSends, MetadataCall, Send
from bkcore.ledger.layout import LedgerLayout
from bkcore.metaops import Children, MetaCode, MetaResult
from bkcore.errors import BKException, BookieIOError, Code, NotEnoughBookies, Timeout, Unauthorized
from bkcore.wire import AuthRequest, AuthResponse, BookieInfoRequest, BookieInfoResponse, ErrorResponse
from bkmetastore.api import MetadataStore
from bktransports import stall_recorder
from bktransports.connection import FramedConnection
from bktransports.timer import CoreTimer, now_ns
from bktransports.trio_runtime import TRIO_RUNTIME

log = logging.getLogger("bk.client")

CONNECT_TIMEOUT_S = 5.0
# Pipelined adds started in a row leave together when their caller yields, or as soon as this
# many are waiting: the bookies start on the first ones while the caller starts the rest (one
# writer into one bookie: 67,000-93,000 adds/s against 53,000-61,000 when a burst of 2,000 waited
# whole for the yield).
PIPELINED_ADDS_PER_PUMP_MAX = 256
RECONNECT_BACKOFF_MIN_S = 0.1
RECONNECT_BACKOFF_MAX_S = 2.0
# The errors of an operation that could not reach enough bookies: a refusal explains them.
_UNREACHED_ERRORS = (NotEnoughBookies, Timeout, BookieIOError, Unauthorized)
_SECRET_HINT = "--auth-secret-file, or BK_AUTH_SECRET"


def parse_address(bookie_id: str) -> tuple[str, int]:
    host, _, port = bookie_id.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"bookie id {bookie_id!r} is not host:port")
    return host, int(port)


class _Call:
    __slots__ = ("done", "result", "error")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.result: object = None
        self.error: BaseException | None = None


class _BookieLink:
    """The driver's state for one bookie: its connection (or the attempt to open one)."""

    def __init__(self, bookie_id: str) -> None:
        self.bookie_id = bookie_id
        self.connection: FramedConnection | None = None
        self.waiting: list = []               # messages queued while connecting
        self.is_connecting = False
        self.retry_after: float = 0.0         # trio time before which we do not dial again
        self.backoff_s = RECONNECT_BACKOFF_MIN_S
        # The core holds sends for this bookie that could not be pulled when it named them
        # (connecting, or the connection writing): pull them once that is over.
        self.wants_pull = False


class ClientDriver:
    runtime = TRIO_RUNTIME       # for bkcore.client.handles and the layers above them

    def __init__(self, *, store: MetadataStore, layout: LedgerLayout, config: ClientConfig = ClientConfig(),
                 client_id: str = "", connect_timeout_s: float = CONNECT_TIMEOUT_S,
                 tls: ssl.SSLContext | None = None, auth_secret: bytes = b"") -> None:
        self.store = store
        self.layout = layout
        self.client_id = client_id or f"client-{random.getrandbits(32):08x}"
        self.client = Client(client_id=self.client_id, rng=random.Random(), config=config, layout=layout)
        self.connect_timeout_s = connect_timeout_s
        self.tls = tls
        self.auth_secret = auth_secret
        self._calls: dict[int, _Call] = {}
        self._op_ids = itertools.count(1)
        self._links: dict[str, _BookieLink] = {}
        self._nursery: trio.Nursery | None = None
        self._timer = CoreTimer(self._on_timer_due)
        self._on_completed: dict[int, Callable[[object, BKException | None], None]] = {}
        # Driver-level requests (bookie info) use ids far above the core's.
        self._info_ids = itertools.count(1 << 62)
        self._info_waiters: dict[int, _Call] = {}
        # A pump asked for by start_add, run by _pump_when_asked once the caller yields.
        self._pump_asked = trio.Event()
        # Bookie id -> why it refused this client's credentials, said after its id (one per
        # bookie dialled; gone once it answers).
        self._refusals: dict[str, str] = {}
        self._started_since_pump = 0
        self._burst_started_ns = 0
        self._is_pumping = False        # pump() is taking effects (start_add need not ask for one)
        # What held this process's loop up (bktransports.stall_recorder): the run's own, once running.
        self.stalls = stall_recorder.StallRecorder()

    # -- lifetime ---------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self.stalls = stall_recorder.for_current_run()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._timer.run)
            nursery.start_soon(self._watch_bookies)
            nursery.start_soon(self._pump_when_asked)
            task_status.started()

    def close(self) -> None:
        """Close every bookie connection and stop the driver's tasks."""
        for link in self._links.values():
            if link.connection is not None:
                link.connection.close("client closing")
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    # -- operations -------------------------------------------------------------------------

    async def call(self, start: Callable[[int, int], None]) -> object:
        """Run `start(op_id, now_ns)` against the core and wait for its Completed."""
        call = self.start(start)
        await call.done.wait()
        if call.error is not None:
            raise call.error
        return call.result

    def start(self, start: Callable[[int, int], None]) -> _Call:
        op_id = next(self._op_ids)
        call = self._calls[op_id] = _Call()
        start(op_id, now_ns())
        self.pump()
        return call

    def start_add(self, writer, payload: bytes, on_done: Callable[[object, BKException | None], None], *,
                  alone: bool = False) -> None:
        """A pipelined add to `writer`: `on_done(entry_id, None)` or `on_done(None, error)` runs
        once it resolves, instead of waking a waiter (a task per add would cost more than the
        add). The effects wait for the caller to yield, so that the adds it starts in a row
        travel together, up to PIPELINED_ADDS_PER_PUMP_MAX of them. Every add of such a burst is
        stamped with the burst's start time: they leave together, timed from the first one. An
        add started by a callback of a pump (an acknowledgement that sends the next entry) is
        taken by that pump: no pump to ask for, no task switch. An add started `alone` (no other
        follows in a row: an idle table range's journal entry) is pumped at once, unless it
        joins a burst already waiting."""
        op_id = next(self._op_ids)
        self._on_completed[op_id] = on_done
        if self._is_pumping:      # (from a callback of the pump under way, which takes its effects)
            writer.add(op_id, payload, now_ns=now_ns())
            return
        started_count = self._started_since_pump
        if alone and not started_count:
            writer.add(op_id, payload, now_ns=now_ns())
            self.pump()
            return
        if not started_count:
            self._burst_started_ns = now_ns()
            self._pump_asked.set()
        writer.add(op_id, payload, now_ns=self._burst_started_ns)
        if started_count + 1 >= PIPELINED_ADDS_PER_PUMP_MAX:
            self.pump()
        else:
            self._started_since_pump = started_count + 1

    async def _pump_when_asked(self) -> None:
        while True:
            await self._pump_asked.wait()
            self._pump_asked = trio.Event()
            self.pump()

    # -- effects ----------------------------------------------------------------------------

    def pump(self) -> None:
        self._started_since_pump = 0
        client = self.client
        sent_on = set()
        on_completed_pop = self._on_completed.pop
        was_pumping, self._is_pumping = self._is_pumping, True
        try:
            self._take_effects(client, sent_on, on_completed_pop)
        finally:
            self._is_pumping = was_pumping
        for connection in sent_on:
            if connection is not None:
                connection.flush()      # what this pump sends leaves now, not after a task hop
        deadline_ns = client.next_deadline_ns()
        self._timer.set(deadline_ns)

    def _take_effects(self, client: Client, sent_on: set, on_completed_pop) -> None:
        """Perform the core's effects until it has none (callbacks of completed adds may start
        more adds: their effects are taken here too)."""
        while effects := client.take_effects():
            for effect in effects:
                kind = type(effect)
                if kind is Completed:         # most effects: one per add, a Send per batch
                    if effect.error is not None and self._refusals:
                        effect = self._explained(effect)
                    # (_complete, with the pipelined adds' lookup spelled out)
                    on_done = on_completed_pop(effect.op_id, None)
                    if on_done is not None:
                        on_done(effect.result, effect.error)
                    else:
                        self._complete(effect)
                elif kind is Send:
                    sent_on.add(self._send(effect.destination, effect.message, wake_writer=False))
                elif kind is HeldSends:
                    ready = self._writable_now(effect.destinations)
                    if ready:       # (their Sends come in the next round)
                        client.pull_sends(ready, now_ns=now_ns())
                elif kind is MetadataCall:
                    self._nursery.start_soon(self._call_metastore, effect)
                else:
                    raise AssertionError(f"client effect {effect!r}")

    def _explained(self, effect: Completed) -> Completed:
        """The effect, its error's message extended by the bookies' refusals when it is one
        that their refusals may cause."""
        error = effect.error
        if not isinstance(error, _UNREACHED_ERRORS):
            return effect
        refused_by: dict[str, list[str]] = {}
        for bookie_id in sorted(self._refusals):
            refused_by.setdefault(self._refusals[bookie_id], []).append(bookie_id)
        reasons = "; ".join(f"{'bookies' if len(ids) > 1 else 'bookie'} {', '.join(ids)} {reason}"
                            for reason, ids in refused_by.items())
        return dataclasses.replace(effect, error=type(error)(f"{error}: {reasons}"))

    def _writable_now(self, destinations: list[str]) -> list[str]:
        """Of these bookies, those whose sends can be written now. The others are connecting
        or their connection is writing: they are pulled when that is over (_pull_wanted)."""
        ready = []
        links = self._links
        for bookie_id in destinations:
            link = links.get(bookie_id)
            if link is not None and (link.is_connecting or (link.connection is not None
                                                            and link.connection.is_writing)):
                link.wants_pull = True
            else:
                ready.append(bookie_id)
        return ready

    def _pull_wanted(self, link: _BookieLink) -> None:
        """The sends the core held for this bookie while it could not write leave now (to its
        connection, or to the next attempt to open one, or fail if it may not be dialled)."""
        if link.wants_pull:
            link.wants_pull = False
            self.client.pull_sends([link.bookie_id], now_ns=now_ns())

    def _on_writable(self, connection: FramedConnection) -> None:
        link = self._links.get(connection.name)
        if link is not None and link.wants_pull and link.connection is connection:
            self._pull_wanted(link)
            self.pump()

    def _complete(self, effect: Completed) -> None:
        on_done = self._on_completed.pop(effect.op_id, None)
        if on_done is not None:
            on_done(effect.result, effect.error)
            return
        call = self._calls.pop(effect.op_id, None)
        if call is not None:
            call.result, call.error = effect.result, effect.error
            call.done.set()

    async def _call_metastore(self, effect: MetadataCall) -> None:
        try:
            result = await self.store.execute(effect.op)
        except Exception as exc:     # a backend bug must not take the client down; the core retries
            log.warning("metastore call %r failed: %r", effect.op, exc)
            result = MetaResult(MetaCode.CONNECTION_LOSS)
        self.client.on_metadata_result(effect.token, result, now_ns=now_ns())
        self.pump()

    async def _watch_bookies(self) -> None:
        """Watch the writable bookies' registrations; when one vanishes (its session expired),
        open writers replace it at once instead of at their next failed add."""
        known: set[str] | None = None
        while True:
            result, watch = await self.store.execute_watch(Children(self.layout.available_path))
            if result.code is MetaCode.OK:
                current = {name for name in result.children if name != "readonly"}
                lost = sorted(known - current) if known is not None else []
                known = current
                if lost:
                    log.info("bookies %s are gone from %s", lost, self.layout.available_path)
                    self.client.on_bookies_lost(lost, now_ns=now_ns())
                    self.pump()
            if self.store.session_lost:
                return
            await watch.wait()

    def _on_timer_due(self, at_ns: int) -> None:
        self.client.on_timer(at_ns)
        self.pump()

    async def bookie_info(self, bookie_id: str, *, timeout_s: float = 10.0) -> BookieInfoResponse:
        """Ask one bookie about its disks and state (a driver-level request the core never sees)."""
        request_id = next(self._info_ids)
        waiter = self._info_waiters[request_id] = _Call()
        self._send(bookie_id, BookieInfoRequest(request_id))
        try:
            with trio.fail_after(timeout_s):
                await waiter.done.wait()
        finally:
            self._info_waiters.pop(request_id, None)
        return waiter.result

    # -- bookie connections -----------------------------------------------------------------

    def _send(self, bookie_id: str, message: object, *, wake_writer: bool = True) -> FramedConnection | None:
        """Queue the message on the bookie's connection and return that connection, or None
        if it waits for one (or failed at once). wake_writer=False: the caller flushes the
        connection before it yields (FramedConnection.send)."""
        link = self._links.get(bookie_id)
        if link is None:
            link = self._links[bookie_id] = _BookieLink(bookie_id)
        connection = link.connection
        if connection is not None and not connection.is_closed:
            if not connection.send(message, wake_writer=wake_writer):
                self.client.on_send_failed(message, destination=bookie_id, now_ns=now_ns())
            return connection
        if link.is_connecting:
            link.waiting.append(message)
            return None
        if trio.current_time() < link.retry_after:
            self.client.on_send_failed(message, destination=bookie_id, now_ns=now_ns())
            return None
        link.is_connecting = True
        link.waiting.append(message)
        self._nursery.start_soon(self._connect, link)
        return None

    async def _connect(self, link: _BookieLink) -> None:
        try:
            host, port = parse_address(link.bookie_id)
            with trio.fail_after(self.connect_timeout_s):
                stream = await trio.open_tcp_stream(host, port)
                if self.tls is not None:
                    stream = trio.SSLStream(stream, self.tls, server_hostname=host)
                    await stream.do_handshake()
        except (OSError, trio.TooSlowError, trio.BrokenResourceError, ValueError) as exc:
            if isinstance(exc, trio.BrokenResourceError):         # (only the TLS handshake raises it)
                self._refusals[link.bookie_id] = (f"failed the TLS handshake ({exc.__cause__ or exc}): --tls-ca must "
                                                  f"name the CA that signed the bookies' certificates")
            link.is_connecting = False
            link.retry_after = trio.current_time() + link.backoff_s
            link.backoff_s = min(link.backoff_s * 2, RECONNECT_BACKOFF_MAX_S)
            log.info("cannot connect to bookie %s: %r", link.bookie_id, exc)
            waiting, link.waiting = link.waiting, []
            at_ns = now_ns()
            for message in waiting:
                self.client.on_send_failed(message, destination=link.bookie_id, now_ns=at_ns)
            self._pull_wanted(link)           # (they fail at once: no dialling before retry_after)
            self.pump()
            return
        connection = FramedConnection(stream, name=link.bookie_id, on_messages=self._on_messages,
                                      on_writable=self._on_writable)
        link.connection = connection
        link.is_connecting = False
        link.backoff_s = RECONNECT_BACKOFF_MIN_S
        if self.auth_secret:
            connection.send(AuthRequest(0, self.auth_secret))
        waiting, link.waiting = link.waiting, []
        for message in waiting:
            connection.send(message)
        if link.wants_pull:
            self._pull_wanted(link)
            self.pump()
        try:
            await connection.run()
        finally:
            if link.connection is connection:
                link.connection = None
            if self.tls is None and not connection.received_frame_count and link.bookie_id not in self._refusals:
                self._refusals[link.bookie_id] = ("closed the connection unanswered (does it speak TLS? then "
                                                  "pass --tls-ca)")
            log.info("connection to bookie %s closed: %s", link.bookie_id, connection.close_reason)
            self.client.on_connection_lost(link.bookie_id, now_ns=now_ns())
            self._pull_wanted(link)           # to the next connection, or failed at once
            self.pump()

    def _on_messages(self, messages: list, connection: FramedConnection) -> None:
        client = self.client
        at_ns = now_ns()
        source = connection.name
        if self._refusals:
            self._refusals.pop(source, None)            # (it answered; a refusal below says otherwise)
        for message in messages:
            if type(message) is BookieInfoResponse:
                waiter = self._info_waiters.pop(message.request_id, None)
                if waiter is not None:
                    waiter.result = message
                    waiter.done.set()
            elif type(message) is AuthResponse:
                if message.code != Code.OK:
                    log.info("bookie %s refused our auth secret", source)       # (the error says it)
                    self._refusals[source] = f"refused this client's auth secret: it asks for another ({_SECRET_HINT})"
            else:
                if type(message) is ErrorResponse and message.code == Code.UNAUTHORIZED:
                    self._refusals[source] = (f"asked for the cluster's auth secret, which this client lacks "
                                              f"({_SECRET_HINT})")
                client.receive(message, source=source, now_ns=at_ns)
        self.pump()
