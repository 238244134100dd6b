"""The bookie's journal thread (real TCP, real files): journal writes queued behind a sync that
is taking long are written together and share the next fdatasync; every add is answered only
once its group is synced, in order, and reads back, also after the bookie stopped and this
process served its files again. (Durability of this path across crashes is the jepsen-like
tests': they kill real bookie processes running the default, two writes in flight.)"""

import threading

import trio

import bkclient
from bkcore.bookie.bookie import BookieConfig
from bkcore.digest import Digester, DigestType, master_key
from bkcore.errors import Code
from bkcore.wire import AddRequest, FrameDecoder, ReadRequest, encode_frame
from bktransports import bookie_server
from bktransports.connection import DELIVERY_SLICE_COUNT

URI = "memory://journal-thread"
BURST_COUNT = 6
ADDS_PER_BURST = 20
LEDGER_ID = 7


async def test_writes_queued_behind_a_slow_sync_share_one_and_every_add_reads_back(start_cluster, monkeypatch):
    cluster = await start_cluster(URI, 0)
    # Every group goes to the thread (none is synced inline), and up to 4 are out at once.
    bookie = await cluster.add_bookie(journal_sync_inline_size_max=0, bookie=BookieConfig(
        journal_flush_when_queue_empty=True, journal_writes_in_flight_max=4))
    server = bookie.server
    stack = server.stack
    release = threading.Event()
    write_journal, sync_journal = stack.write_journal, stack.sync_journal
    written_tokens: list[int] = []
    synced_tokens: list[int] = []

    def recorded_write(effect, *, now_ms):   # in the journal thread, like the sync
        write_journal(effect, now_ms=now_ms)
        written_tokens.append(effect.token)

    def slow_first_sync(token):
        release.wait(30)
        sync_journal(token)
        synced_tokens.append(token)

    monkeypatch.setattr(stack, "write_journal", recorded_write)
    monkeypatch.setattr(stack, "sync_journal", slow_first_sync)
    acknowledged: list[int] = []
    async with bkclient.connect(URI) as bk:
        ledger = await bk.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, password=b"pw")
        payloads = [b"entry %d" % n for n in range(BURST_COUNT * ADDS_PER_BURST)]

        def on_done(entry_id, error) -> None:
            assert error is None, error
            acknowledged.append(entry_id)

        for burst in range(BURST_COUNT):     # separate frames: each makes a group of its own
            for payload in payloads[burst * ADDS_PER_BURST:(burst + 1) * ADDS_PER_BURST]:
                ledger.start_add(payload, on_done)
            await trio.sleep(0.05)
        writes_out = server._journal.outstanding
        assert writes_out == server.core.config.journal_writes_in_flight_max
        assert acknowledged == [], "nothing is answered before its group is synced"
        release.set()
        with trio.fail_after(20):
            while len(acknowledged) < len(payloads):
                await trio.sleep(0.01)
        assert acknowledged == list(range(len(payloads)))
        # A group of no adds (an explicit LAC) may still be on its way: its sync is counted in the
        # journal thread before the loop hears of it.
        with trio.fail_after(5):
            while server._journal.outstanding:
                await trio.sleep(0.01)
        # The groups that queued behind the held sync were written together and synced once.
        assert written_tokens == sorted(written_tokens) and synced_tokens == sorted(synced_tokens)
        assert synced_tokens[-1] == written_tokens[-1]
        assert len(synced_tokens) < len(written_tokens)
        assert server._journal.batch_count == len(synced_tokens)
        await ledger.close()
        reader = await bk.open_ledger(ledger.ledger_id, password=b"pw")
        assert await reader.read(0, len(payloads) - 1) == payloads
    # Served again by this process from the same files: everything is still there.
    await cluster.stop(bookie)
    await cluster.restart(bookie)
    async with bkclient.connect(URI) as bk:
        reader = await bk.open_ledger(ledger.ledger_id, password=b"pw")
        assert await reader.read(0, len(payloads) - 1) == payloads


# -- writes applied in slices ---------------------------------------------------------------

SLICE_RECORD_COUNT_MAX = 4
# Single adds, one record each (and the ledger's MASTER_KEY before the first): as many as the
# bookie hands its core at once, so that a frame of them is one group.
GROUP_ENTRY_COUNT = DELIVERY_SLICE_COUNT
DIGESTER = Digester(ledger_id=LEDGER_ID, digest_type=DigestType.CRC32C, password=b"pw")


class _StepCounter(trio.abc.Instrument):
    def __init__(self) -> None:
        self.count = 0

    def after_task_step(self, task) -> None:
        self.count += 1


class _Wire:
    """A client speaking the bookie's wire protocol directly: each send is one frame, so each
    burst of adds is one receive of the bookie, one group of its journal."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()
        self.received: list = []

    async def send(self, messages: list) -> None:
        await self.stream.send_all(encode_frame(messages))

    async def receive_until(self, count: int) -> list:
        while len(self.received) < count:
            data = await self.stream.receive_some(1 << 16)
            assert data, "the bookie closed the connection"
            self.decoder.feed(data)
            while (messages := self.decoder.next_frame()) is not None:
                self.received.extend(messages)
        return self.received


def _adds(first: int, count: int) -> list[AddRequest]:
    return [AddRequest(request_id=e, ledger_id=LEDGER_ID, entry_id=e, master_key=master_key(b"pw"),
                       body=DIGESTER.pack_entry(entry_id=e, lac=e - 1, length=e + 1, payload=b"p%d" % e))
            for e in range(first, first + count)]


async def _held_first_sync(cluster, monkeypatch):
    """A bookie whose groups all go to the journal thread, whose first sync waits for `release`
    (`holding` is set once it does),
    that applies at most SLICE_RECORD_COUNT_MAX records a loop step, and that logs (into `log`)
    each slice it applies, each receive and each batch the thread reports, in loop order;
    `reported` is set once the thread has handed the loop its report of write 2."""
    monkeypatch.setattr(bookie_server, "JOURNALED_APPLY_RECORD_COUNT_MAX", SLICE_RECORD_COUNT_MAX)
    bookie = await cluster.add_bookie(journal_sync_inline_size_max=0)
    server = bookie.server
    stack, core, journal = server.stack, server.core, server._journal
    holding, release = threading.Event(), threading.Event()
    steps = _StepCounter()
    trio.lowlevel.add_instrument(steps)
    log: list[tuple] = []
    sync_journal, apply_persisted = stack.sync_journal, core.apply_persisted
    on_batch_done, on_messages = journal._on_batch_done, server._on_messages

    def held_sync(token):                 # in the journal thread
        if token == 1:
            holding.set()
            release.wait(30)
        sync_journal(token)

    def logged_apply(now_ns, *, record_count_max):
        token = core._unapplied_token
        applied_count = apply_persisted(now_ns, record_count_max=record_count_max)
        log.append(("apply", token, applied_count, steps.count, core.is_applying))
        return applied_count

    def logged_batch_done(writes, started, error):
        log.append(("reported", [write.token for write in writes]))
        on_batch_done(writes, started, error)

    def logged_messages(messages, connection):
        log.append(("received", type(messages[0]).__name__))
        on_messages(messages, connection)

    reported = threading.Event()         # the thread has handed the loop its report of write 2
    report = journal._report

    def noted_report(callback, *args):    # in the journal thread
        report(callback, *args)
        if callback == journal._batch_done and any(write.token == 2 for write in args[0]):
            reported.set()

    monkeypatch.setattr(journal, "_report", noted_report)
    monkeypatch.setattr(stack, "sync_journal", held_sync)
    monkeypatch.setattr(core, "apply_persisted", logged_apply)
    monkeypatch.setattr(journal, "_on_batch_done", logged_batch_done)
    monkeypatch.setattr(server, "_on_messages", logged_messages)
    return bookie, holding, release, reported, log, steps


async def _two_writes_behind_a_held_sync(start_cluster, monkeypatch):
    """_held_first_sync's bookie with write 1 (GROUP_ENTRY_COUNT adds, on `writer`) held in its
    sync, and write 2 sent and queued behind it: (cluster, bookie, writer, release, reported, log)."""
    cluster = await start_cluster(URI, 0)
    bookie, holding, release, reported, log, _ = await _held_first_sync(cluster, monkeypatch)
    server = bookie.server
    writer = _Wire(await trio.open_tcp_stream("127.0.0.1", server.listen_port))
    await writer.send(_adds(0, GROUP_ENTRY_COUNT))                     # write 1: its sync is held
    with trio.fail_after(10):
        while not holding.is_set():
            await trio.sleep(0.01)
    await writer.send(_adds(GROUP_ENTRY_COUNT, GROUP_ENTRY_COUNT))     # write 2, queued behind it
    with trio.fail_after(10):
        while server._journal.outstanding < 2:
            await trio.sleep(0.01)
    return cluster, bookie, writer, release, reported, log


async def test_a_large_write_is_applied_in_slices_the_loop_serving_others_between_in_journal_order(
        start_cluster, monkeypatch):
    cluster, bookie, writer, release, reported, log = await _two_writes_behind_a_held_sync(start_cluster, monkeypatch)
    server = bookie.server
    reader = _Wire(await trio.open_tcp_stream("127.0.0.1", server.listen_port))
    first_sliced = trio.Event()
    core_apply = server.core.apply_persisted

    def apply_then_wait(now_ns, *, record_count_max):
        applied_count = core_apply(now_ns, record_count_max=record_count_max)
        slice_count = sum(entry[0] == "apply" for entry in log)
        if slice_count == 1:
            first_sliced.set()
        elif slice_count == 2:
            # Hold the loop until the thread has synced write 2 and handed the loop its report:
            # the report comes while write 1 is still being applied.
            assert reported.wait(10)
        return applied_count

    monkeypatch.setattr(server.core, "apply_persisted", apply_then_wait)
    release.set()
    with trio.fail_after(10):
        await first_sliced.wait()
    # Between two slices of write 1 a read from another connection is served (of an entry the
    # first slice applied).
    await reader.send([ReadRequest(request_id=7, ledger_id=LEDGER_ID, entry_id=0)])
    with trio.fail_after(10):
        (answer,) = await reader.receive_until(1)
    assert answer.code == Code.OK and answer.body == _adds(0, 1)[0].body
    with trio.fail_after(10):
        answers = await writer.receive_until(2 * GROUP_ENTRY_COUNT)
    assert [(a.entry_id, a.code) for a in answers] == [(e, Code.OK) for e in range(2 * GROUP_ENTRY_COUNT)]

    slices = [entry for entry in log if entry[0] == "apply"]
    first = [entry for entry in slices if entry[1] == 1]
    # A MASTER_KEY, then one ENTRY per add, 4 a step: each slice in a loop step of its own.
    assert len(first) == -(-(GROUP_ENTRY_COUNT + 1) // SLICE_RECORD_COUNT_MAX)
    assert all(entry[2] <= SLICE_RECORD_COUNT_MAX for entry in first)
    step_counts = [entry[3] for entry in first]
    assert step_counts == sorted(set(step_counts))
    # Served between them: the read; and write 2 was reported meanwhile, but applied after.
    first_index, last_index = log.index(first[0]), log.index(first[-1])
    assert ("received", "ReadRequest") in log[first_index:last_index]
    assert ("reported", [2]) in log[first_index:last_index]
    assert [entry[1] for entry in slices] == sorted(entry[1] for entry in slices)
    assert not server._durable_writes and not server.core.is_applying



async def test_a_bookie_stopped_while_applying_a_write_in_slices_finishes_it_before_closing_its_files(
        start_cluster, monkeypatch):
    cluster, bookie, writer, release, reported, log = await _two_writes_behind_a_held_sync(start_cluster, monkeypatch)
    server = bookie.server
    core_apply = server.core.apply_persisted

    def apply_then_stop(now_ns, *, record_count_max):
        applied_count = core_apply(now_ns, record_count_max=record_count_max)
        if sum(entry[0] == "apply" for entry in log) == 2:
            bookie.scope.cancel()         # (the rest of the write, and write 2, still to apply)
        return applied_count

    monkeypatch.setattr(server.core, "apply_persisted", apply_then_stop)
    release.set()
    with trio.fail_after(10):
        await bookie.stopped.wait()
    # Both writes were applied, in order, before the index and the files were closed.
    tokens = [entry[1] for entry in log if entry[0] == "apply" and not entry[4]]
    assert tokens == [1, 2] and server.core.applied_token == 2
    assert not server._durable_writes and server._journal.outstanding == 0
    await cluster.restart(bookie)                 # (this process serves the same files again)
    reader = _Wire(await trio.open_tcp_stream("127.0.0.1", bookie.server.listen_port))
    await reader.send([ReadRequest(request_id=e, ledger_id=LEDGER_ID, entry_id=e)
                       for e in range(2 * GROUP_ENTRY_COUNT)])
    with trio.fail_after(10):
        answers = await reader.receive_until(2 * GROUP_ENTRY_COUNT)
    assert [answer.body for answer in answers] == [add.body for add in _adds(0, 2 * GROUP_ENTRY_COUNT)]
