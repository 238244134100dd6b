"""Table calls between two Tables-backed servers over real TCP (streamstorage.peer_calls): A owns
the tables' ranges and B forwards to it. Forwarded calls answer as local ones do, errors come
back as the same class and message, concurrent calls share frames, watches stream the owner's
changes, a connection that breaks fails its calls and watches at once and the next call
reconnects, and a malformed frame closes only the connection that carried it."""

import contextlib
import logging
from dataclasses import dataclass

import pytest
import trio

import bkclient
from bkcore.stream.segments import StreamSettings
from bkcore.table.commands import (
    Compare, CompareResult, CompareTarget, DeleteRange, IllegalOp, Increment, KeyNotFound, Put, RangeRead,
    TableError, Txn, fold_key, pkey_end,
)
from bkcore.table.ownership import NotOwner, RangeOwnership
from bkcore.table.range import WatchTooSlow
from bkcore.table.placement import preferred_server
from bkcore.table.service import Tables
from bkcore.wire import FRAME_HEADER, frame_body
from streamstorage.peer_calls import PeerClient, PeerServer

URI = "memory://peer-calls"
A, B = "127.0.0.1:1", "127.0.0.1:2"      # server ids (nothing listens on these gRPC ports here)
ODD_ONES = ["127.0.0.1:3", "127.0.0.1:4"]    # registered by some tests, besides A and B
NS = "default"


@dataclass
class Servers:
    bk_a: object
    tables_a: Tables
    tables_b: Tables
    peer_a: PeerServer
    peer_b: PeerServer
    client_b: PeerClient           # B's: forwards to A
    client_a: PeerClient           # A's: sends to B
    nursery: trio.Nursery


def tables_preferring_a(count: int) -> list[str]:
    """Names of single-range tables whose range belongs on A whoever else registers (so the
    rebalancer leaves it there)."""
    names = (f"t{n}" for n in range(1000))
    return [name for name in names if preferred_server((NS, name, 0), [A, B, *ODD_ONES]) == A][:count]


@pytest.fixture
async def servers(start_cluster):
    await start_cluster(URI, 3)
    async with bkclient.connect(URI, renew_session=False) as bk_a, bkclient.connect(URI, renew_session=False) as bk_b:
        async with trio.open_nursery() as nursery:
            tables_a = Tables(bk_a, nursery, server_id=A)
            tables_b = Tables(bk_b, nursery, server_id=B)
            peers = []
            for tables in (tables_a, tables_b):
                await tables.register()
                peer = await nursery.start(PeerServer(tables, host="127.0.0.1").run)
                await tables.announce_peer_address(f"127.0.0.1:{peer.port}")
                peers.append(peer)
            await bk_a.streams.create_namespace(NS)
            for name in tables_preferring_a(3):
                await bk_a.streams.create_stream(NS, name, StreamSettings(table_ranges=1))
            yield Servers(bk_a, tables_a, tables_b, *peers,
                          client_b=PeerClient(store=bk_b.store, root=bk_b.layout.root, nursery=nursery),
                          client_a=PeerClient(store=bk_a.store, root=bk_a.layout.root, nursery=nursery),
                          nursery=nursery)
            nursery.cancel_scope.cancel()


def key(pkey: bytes, lkey: bytes) -> bytes:
    return fold_key(pkey, lkey)


P = b"user"
K, N = key(P, b"k"), key(P, b"n")
# What a client does to a table, in order: commands (execute) and reads (read), errors included.
SCRIPT = [
    Put(K, b"v1"), Put(K, b"v2", prev_kv=True), Increment(N, 5), Increment(N, 2, get_total=False),
    RangeRead(K), RangeRead(key(P, b""), pkey_end(key(P, b""))), RangeRead(N, keys_only=True),
    Put(N, b"bytes"),                                                                   # IllegalOp
    Txn((Compare(K, CompareTarget.VALUE, CompareResult.EQUAL, b"v2"),),
        (Put(K, b"v3", prev_kv=True), Increment(N, 1), RangeRead(N)), (RangeRead(K),)),
    Txn((Compare(key(P, b"missing"), CompareTarget.VERSION, CompareResult.EQUAL, 1),),
        (Put(K, b"never"),)),                                                          # KeyNotFound
    Txn((Compare(K, CompareTarget.VALUE, CompareResult.GREATER, b"a"),),
        (Put(N, b"refused in a txn"), Put(K, b"v4"))),                                  # OpRefused inside
    Put(key(b"other", b"k"), b"x"),                              # a key of another pkey: TableError
    DeleteRange(K, prev_kv=True), RangeRead(K, count_only=True),
]


async def run_script(run, table: str) -> list:
    """Each step's result, or (error class, message) for a step that raised."""
    outcomes = []
    for step in SCRIPT:
        try:
            outcomes.append(await run(table, step))
        except Exception as exc:       # noqa: BLE001 - the error is the outcome compared
            outcomes.append((type(exc), str(exc)))
    return outcomes


async def test_forwarded_calls_give_what_local_calls_give(servers):
    """The same script on two fresh tables of A: locally on A, and from B through A's peer
    port. Same results (revisions included: both ranges start empty), same errors."""
    local_table, forwarded_table = tables_preferring_a(2)

    async def local(table, step):
        if isinstance(step, RangeRead):
            return await servers.tables_a.read(NS, table, P, step)
        return await servers.tables_a.execute(NS, table, P, step)

    async def forwarded(table, step):
        if isinstance(step, RangeRead):
            return await servers.client_b.read(A, NS, table, P, step)
        return await servers.client_b.execute(A, NS, table, P, step)

    with trio.fail_after(60):
        expected = await run_script(local, local_table)
        got = await run_script(forwarded, forwarded_table)
    assert got == expected
    errors = [outcome[0] for outcome in expected if isinstance(outcome, tuple)]
    assert errors == [IllegalOp, KeyNotFound, TableError], "the script covers the errors it means to"
    assert not servers.tables_b.ranges_here(), "B served nothing itself"
    assert servers.peer_a.statistics().call_count == len(SCRIPT)
    # Once the range was open on A, A queued B's commands into it, and read from it while its
    # lease held, without a task per call; the first call opened the range (in a task).
    assert len(SCRIPT) // 2 <= servers.peer_a.statistics().served_without_task_count < len(SCRIPT)
    status_of = pytest.importorskip("streamstorage.grpc_gateway").status_of
    assert [status_of(o[0]("")) for o in got if isinstance(o, tuple)] == [
        status_of(o[0]("")) for o in expected if isinstance(o, tuple)]


async def test_a_call_to_a_server_that_does_not_own_the_range_gets_not_owner(servers):
    table = tables_preferring_a(1)[0]
    with trio.fail_after(30):
        await servers.tables_a.execute(NS, table, P, Put(K, b"v"))          # A owns the range now
        with pytest.raises(NotOwner) as raised:
            await servers.client_a.execute(B, NS, table, P, Put(K, b"w"))   # sent to B: not sent on
        assert raised.value.owner == A
        assert str(raised.value) == f"range 0 of table {NS}/{table} is served by {A}"
        with pytest.raises(NotOwner):
            await servers.client_a.read(B, NS, table, P, RangeRead(K))
        assert (await servers.tables_a.read(NS, table, P, RangeRead(K))).kvs[0].value == b"v"
    assert not servers.tables_b.ranges_here()


async def test_concurrent_calls_share_frames(servers):
    table = tables_preferring_a(1)[0]
    with trio.fail_after(60):
        await servers.client_b.execute(A, NS, table, P, Put(K, b"first"))     # connected, range open
        client_before, server_before = servers.client_b.statistics(), servers.peer_a.statistics()
        results = {}

        async def put(index):
            results[index] = await servers.client_b.execute(A, NS, table, P, Put(key(P, b"%d" % index), b"v"))

        async with trio.open_nursery() as nursery:
            for index in range(50):
                nursery.start_soon(put, index)
    client_after, server_after = servers.client_b.statistics(), servers.peer_a.statistics()
    assert sorted(r.revision for r in results.values()) == list(range(2, 52))
    assert client_after.call_count - client_before.call_count == 50
    assert client_after.sent_frame_count - client_before.sent_frame_count < 10
    assert server_after.received_frame_count - server_before.received_frame_count < 10
    assert server_after.sent_frame_count - server_before.sent_frame_count < 10
    assert client_after.received_frame_count - client_before.received_frame_count < 10


class HeldTables:
    """A's Tables, whose calls wait until `release` is set: calls in flight at the owner."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables
        self.arrived = 0
        self.release = trio.Event()

    async def execute(self, *args):
        self.arrived += 1
        await self.release.wait()
        return await self.tables.execute(*args)

    async def read(self, *args):
        self.arrived += 1
        await self.release.wait()
        return await self.tables.read(*args)

    # The owner's ways of answering without a task are declined: every call takes the waiting one.
    def read_in_thread(self, *args):
        return None

    def submit_here(self, *args):
        return False


async def test_a_broken_connection_fails_its_calls_at_once_and_the_next_call_reconnects(servers):
    table = tables_preferring_a(1)[0]
    held = HeldTables(servers.tables_a)
    owner_process = trio.CancelScope()

    async def owner(task_status=trio.TASK_STATUS_IGNORED):
        with owner_process:
            async with trio.open_nursery() as nursery:
                task_status.started(await nursery.start(PeerServer(held, host="127.0.0.1").run))

    with trio.fail_after(60):
        peer = await servers.nursery.start(owner)
        await servers.tables_a.announce_peer_address(f"127.0.0.1:{peer.port}")
        failures = []

        async def put(index):
            try:
                await servers.client_b.execute(A, NS, table, P, Put(key(P, b"%d" % index), b"v"))
            except ConnectionError as exc:
                failures.append((str(exc), trio.current_time()))

        async with trio.open_nursery() as callers:
            for index in range(5):
                callers.start_soon(put, index)
            while held.arrived < 5:
                await trio.sleep(0.01)
            died_at = trio.current_time()
            owner_process.cancel()          # its listener and connections close
        assert len(failures) == 5
        assert all(A in reason for reason, _ in failures)
        assert max(at for _, at in failures) - died_at < 1.0, "failed when the connection broke, not at a timeout"
        # The owner comes back on another port; the next call looks it up and connects again.
        peer = await servers.nursery.start(PeerServer(servers.tables_a, host="127.0.0.1").run)
        await servers.tables_a.announce_peer_address(f"127.0.0.1:{peer.port}")
        result = await servers.client_b.execute(A, NS, table, P, Put(K, b"after"))
        assert (await servers.tables_a.read(NS, table, P, RangeRead(K))).kvs[0].mod_revision == result.revision
    statistics = servers.client_b.statistics()
    assert statistics.connect_count == 2 and statistics.connection_failure_count == 1


async def test_a_watch_of_a_range_owned_elsewhere_is_the_owners_watch(servers):
    """B watches A's range over the channel: the watch starts where A says, A's changes come as
    they happen, leaving the watch ends A's watch too, and a watch sent to a server that does not
    own the range comes back NotOwner naming the owner."""
    table = tables_preferring_a(1)[0]
    await servers.tables_a.execute(NS, table, P, Put(K, b"0"))
    created, seen = [], []
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            async def watch():
                async for event in servers.client_b.watch(A, NS, table, P, b"k", started=created.append):
                    seen.append((event.kind, event.kv.value, event.revision))
                    if len(seen) == 2:
                        return
            nursery.start_soon(watch)
            while not created:
                await trio.sleep(0.01)
            await servers.tables_a.execute(NS, table, P, Put(K, b"1"))
            await servers.tables_a.execute(NS, table, P, DeleteRange(K))
        (table_range,) = servers.tables_a._ranges.values()
        assert created == [1] and seen == [("put", b"1", 2), ("delete", b"", 3)]
        while table_range._watchers:           # the cancel reached A
            await trio.sleep(0.01)
        # From a past revision: the history A keeps.
        async for event in servers.client_b.watch(A, NS, table, P, b"k", start_revision=2):
            assert (event.kind, event.revision) == ("put", 2)
            break
        with pytest.raises(NotOwner) as refused:
            async for _ in servers.client_a.watch(B, NS, table, P, b"k"):
                pass
        assert refused.value.owner == A
    assert servers.peer_a.statistics().call_count == 2 and servers.peer_b.statistics().call_count == 1


async def test_a_watcher_too_slow_for_its_changes_is_ended_here_and_at_the_owner(servers, monkeypatch):
    monkeypatch.setattr("streamstorage.peer_calls.WATCH_BUFFER_EVENTS", 3)
    table = tables_preferring_a(1)[0]
    await servers.tables_a.execute(NS, table, P, Put(K, b"0"))
    with trio.fail_after(30):
        with pytest.raises(WatchTooSlow):
            async for event in servers.client_b.watch(A, NS, table, P, b"k", start_revision=1):
                for n in range(6):          # while this watcher dawdles, six changes come
                    await servers.tables_a.execute(NS, table, P, Put(K, b"%d" % n))
                await trio.sleep(0.5)
        (table_range,) = servers.tables_a._ranges.values()
        while table_range._watchers:           # the cancel reached A
            await trio.sleep(0.01)


async def test_a_watch_whose_connection_breaks_ends_at_once(servers):
    table = tables_preferring_a(1)[0]
    owner_process = trio.CancelScope()

    async def owner(task_status=trio.TASK_STATUS_IGNORED):
        with owner_process:
            async with trio.open_nursery() as nursery:
                task_status.started(await nursery.start(PeerServer(servers.tables_a, host="127.0.0.1").run))

    with trio.fail_after(30):
        peer = await servers.nursery.start(owner)
        await servers.tables_a.announce_peer_address(f"127.0.0.1:{peer.port}")
        created = trio.Event()
        died_at = []

        async def kill_the_owner_once_watched():
            await created.wait()
            died_at.append(trio.current_time())
            owner_process.cancel()          # its listener and connections close

        servers.nursery.start_soon(kill_the_owner_once_watched)
        with pytest.raises(ConnectionError, match=A):
            async for _ in servers.client_b.watch(A, NS, table, P, b"k", started=lambda revision: created.set()):
                pass
            raise AssertionError("the watch ended without an error")
        assert trio.current_time() - died_at[0] < 1.0, "ended when the connection broke"


async def held_owner_and_impatient_client(servers) -> tuple[str, HeldTables, PeerClient]:
    """A table A prefers, A's peer server over HeldTables (calls wait for `release`), and a
    client of A that waits 0.5 s for an answer."""
    table = tables_preferring_a(1)[0]
    held = HeldTables(servers.tables_a)
    peer = await servers.nursery.start(PeerServer(held, host="127.0.0.1").run)
    await servers.tables_a.announce_peer_address(f"127.0.0.1:{peer.port}")
    impatient = PeerClient(store=servers.bk_a.store, root=servers.bk_a.layout.root, nursery=servers.nursery,
                           timeout_s=0.5)
    return table, held, impatient


async def test_a_call_not_answered_in_time_fails_and_its_late_answer_is_dropped(servers):
    table, held, impatient = await held_owner_and_impatient_client(servers)
    with trio.fail_after(30):
        with pytest.raises(ConnectionError, match="did not answer a table call within 0.5 s"):
            await impatient.execute(A, NS, table, P, Put(K, b"late"))
        held.release.set()
        while impatient.statistics().late_answer_count == 0:
            await trio.sleep(0.01)
        assert (await impatient.read(A, NS, table, P, RangeRead(K))).kvs[0].value == b"late"
    assert impatient.statistics().timeout_count == 1 and impatient.statistics().connect_count == 1


async def test_a_submitted_call_not_answered_in_time_fails_through_its_callback(servers):
    """submit() sends only on an open connection, and a call its owner holds past timeout_s
    gets a ConnectionError through its callback (the owner's late answer is dropped)."""
    table, held, impatient = await held_owner_and_impatient_client(servers)
    outcomes = []
    assert not impatient.submit(A, NS, table, P, Put(K, b"v"), lambda *outcome: outcomes.append(outcome)), \
        "no connection to A yet: nothing sent"
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_quietly, impatient.read(A, NS, table, P, RangeRead(K)))   # connects; held
            while held.arrived == 0:
                await trio.sleep(0.01)
            assert impatient.submit(A, NS, table, P, Put(K, b"v"), lambda *outcome: outcomes.append(outcome))
            while not outcomes:
                await trio.sleep(0.01)
        held.release.set()
        while impatient.statistics().late_answer_count < 2:
            await trio.sleep(0.01)
    ((result, error),) = outcomes
    assert result is None and isinstance(error, ConnectionError)
    assert "did not answer a table call within 0.5 s" in str(error)
    statistics = impatient.statistics()
    assert statistics.timeout_count == 2 and statistics.submitted_call_count == 1 and statistics.call_count == 2


async def _quietly(awaitable) -> None:
    with contextlib.suppress(ConnectionError):
        await awaitable


async def test_a_malformed_frame_closes_only_its_connection(servers, caplog):
    table = tables_preferring_a(1)[0]
    with trio.fail_after(30):
        await servers.client_b.execute(A, NS, table, P, Put(K, b"before"))
        body = frame_body(b"\x91\x92\x01\x02")               # msgpack [[1, 2]]: no table call
        for garbage in (FRAME_HEADER.pack(12, 0) + b"12345678", body):      # bad checksum; bad call
            caplog.clear()
            stream = await trio.open_tcp_stream("127.0.0.1", servers.peer_a.port)
            await stream.send_all(garbage)
            assert await stream.receive_some(1024) == b"", "the server closed the connection"
            await stream.aclose()
            await trio.sleep(0.05)
            lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
            assert len(lines) == 1 and "malformed frame" in lines[0] and "\n" not in lines[0]
        # B's connection to A, and A itself, carry on.
        assert (await servers.client_b.read(A, NS, table, P, RangeRead(K))).kvs[0].value == b"before"
    assert servers.peer_a.statistics().malformed_frame_count == 2
    assert servers.client_b.statistics().connect_count == 1


async def test_a_malformed_answer_fails_the_calls_on_that_connection(servers, caplog):
    """A 'server' that answers garbage: the call fails with a ConnectionError, one line is
    logged, and calls to other servers go on."""
    await RangeOwnership(servers.bk_a.store, servers.bk_a.layout.root, "127.0.0.1:3").register()
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")

    async def answer_garbage(stream):
        await stream.receive_some(1024)
        await stream.send_all(frame_body(b"\x91\x93\x01\x00\x90"))       # [[1, 0, []]]: no result
        await trio.sleep_forever()

    servers.nursery.start_soon(trio.serve_listeners, answer_garbage, listeners)
    await RangeOwnership(servers.bk_a.store, servers.bk_a.layout.root, "127.0.0.1:3").announce_peer_address(
        f"127.0.0.1:{listeners[0].socket.getsockname()[1]}")
    table = tables_preferring_a(1)[0]
    with trio.fail_after(30):
        with pytest.raises(ConnectionError, match="127.0.0.1:3"):
            await servers.client_b.execute("127.0.0.1:3", NS, table, P, Put(K, b"v"))
        lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(lines) == 1 and "malformed frame" in lines[0]
        assert (await servers.client_b.execute(A, NS, table, P, Put(K, b"v"))).revision == 1
    assert servers.client_b.statistics().malformed_frame_count == 1


async def test_a_server_that_never_said_where_it_takes_calls_is_a_connection_error(servers):
    await RangeOwnership(servers.bk_a.store, servers.bk_a.layout.root, "127.0.0.1:4").register()
    with trio.fail_after(30):
        with pytest.raises(ConnectionError, match="has not said where it takes table calls"):
            await servers.client_b.execute("127.0.0.1:4", NS, "t", P, Put(K, b"v"))
        with pytest.raises(ConnectionError, match="is not registered"):
            await servers.client_b.execute("127.0.0.1:5", NS, "t", P, Put(K, b"v"))


async def test_a_secured_owner_runs_only_the_calls_of_servers_with_the_secret_over_tls(servers, caplog):
    """An owner with the cluster's secret and TLS: a server in the clear, one without the
    secret, one with a wrong secret and one that does not trust its certificate are each
    refused with a line saying why, and none of their calls is run; the first refusal of the
    host is logged once. A server with the CA and the secret is served."""
    import ssl

    import trustme
    ca = trustme.CA()
    serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(serving)
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)
    table = tables_preferring_a(1)[0]
    peer = await servers.nursery.start(PeerServer(servers.tables_a, host="127.0.0.1", tls=serving,
                                                  auth_secret=b"s3cret").run)
    await servers.tables_a.announce_peer_address(f"127.0.0.1:{peer.port}")

    def client(**credentials) -> PeerClient:
        return PeerClient(store=servers.bk_a.store, root=servers.bk_a.layout.root, nursery=servers.nursery,
                          **credentials)
    refused = [
        (client(), "ended"),                                      # in the clear: the handshake fails there
        (client(tls=trusting), "sent a table call without the cluster's secret"),
        (client(tls=trusting, auth_secret=b"wrong"), "sent a wrong secret"),
        (client(tls=ssl.create_default_context(), auth_secret=b"s3cret"), "TLS handshake with stream storage"),
    ]
    with trio.fail_after(60):
        for index, (refused_client, reason) in enumerate(refused):
            with pytest.raises(ConnectionError, match=reason):
                await refused_client.execute(A, NS, table, P, Put(K, b"refused %d" % index))
        secured = client(tls=trusting, auth_secret=b"s3cret")
        result = await secured.execute(A, NS, table, P, Put(K, b"with the secret"))
        read = await secured.read(A, NS, table, P, RangeRead(K))
    assert [(kv.value, kv.version) for kv in read.kvs] == [(b"with the secret", 1)]
    assert result.revision == 1                      # nothing before it was applied
    statistics = peer.statistics()
    assert statistics.call_count == 2 and statistics.refused_connection_count == len(refused)
    lines = [r.getMessage() for r in caplog.records if r.name == "bk.stream-storage" and "refused 127.0.0.1" in
             r.getMessage()]
    assert len(lines) == 1, lines
