"""A table range on a real cluster (TCP bookies, memory:// metastore): commands journaled then
applied, watches in order, checkpoints with truncation behind them, restart from a checkpoint
plus journal, fallback past a torn checkpoint, and a new owner fencing the old one."""

import msgpack
import pytest
import trio

import bkclient
from bkcore.errors import BKException
from bkcore.client.handles import WriteHandle
from bkcore.stream.entry_format import unpack_entry
from bkcore.stream.records import StreamEntry
from bkcore.stream.errors import WriterFenced
from bkcore.table.commands import (
    Compare, CompareResult, CompareTarget, DeleteRange, Increment, Put, RangeRead, TableError, Txn, decode_stamped,
)
from streamstorage.lmdb_kv import LmdbRangeIndexes
from bkcore.table.range import TABLES_NAMESPACE, TableRange, WatchCompacted, WatchTooSlow

URI = "memory://tables"


@pytest.fixture
async def bk(start_cluster):
    await start_cluster(URI, 3)
    async with bkclient.connect(URI) as client:
        yield client


@pytest.fixture(params=["memory", "lmdb"])
def open_range(request, bk, nursery, tmp_path):
    """Opens range 0 of table ns/t as a new owner would: with a memory index, or with an lmdb
    index of its own (each owner a server with its own index directory)."""
    owners = []

    async def open_range(**options):
        if request.param == "lmdb":
            indexes = LmdbRangeIndexes(str(tmp_path / f"owner{len(owners)}"))
            owners.append(indexes)
            options["index"] = indexes.index_for("ns/t", 0)
        table_range = TableRange(bk.streams, "ns/t", 0, **options)
        await table_range.open(nursery)
        return table_range
    return open_range


async def value_of(table_range, key):
    kvs = (await table_range.read(RangeRead(key))).kvs
    return kvs[0].value if kvs else None


async def test_commands_are_journaled_applied_and_survive_a_new_owner(bk, open_range):
    first = await open_range()
    assert first.restored_from == "journal"
    await first.execute(Put(b"k", b"v1"))
    assert (await first.execute(Increment(b"hits", 5))).total == 5
    txn = await first.execute(Txn((Compare(b"k", CompareTarget.VALUE, CompareResult.EQUAL, b"v1"),),
                                  (Put(b"k", b"v2"),), (Put(b"k", b"lost"),)))
    assert txn.succeeded
    with pytest.raises(TableError):
        await first.execute(Increment(b"k", 1))
    # Many concurrent commands: applied in journal order, all acknowledged ones kept.
    async with trio.open_nursery() as nursery:
        for _ in range(50):
            nursery.start_soon(first.execute, Increment(b"hits", 1))
    assert await value_of(first, b"hits") == (55).to_bytes(8, "big")
    revision = first.state.revision
    second = await open_range()
    assert second.state.revision == revision
    assert await value_of(second, b"k") == b"v2" and await value_of(second, b"hits") == (55).to_bytes(8, "big")
    with pytest.raises(WriterFenced):
        await first.execute(Put(b"k", b"from the old owner"))
    with pytest.raises(WriterFenced):
        await first.read(RangeRead(b"k"))
    await second.execute(DeleteRange(b"k"))
    assert await value_of(second, b"k") is None
    await second.aclose()


async def test_checkpoints_bound_the_journal_and_restore_with_replay(bk, open_range):
    table_range = await open_range(checkpoint_every=10**9)
    for i in range(30):
        await table_range.execute(Put(b"key%02d" % i, b"v%d" % i))
    await table_range.checkpoint()
    for i in range(30, 40):
        await table_range.execute(Put(b"key%02d" % i, b"v%d" % i))
    await table_range.checkpoint()
    await table_range.checkpoint()
    await table_range.execute(Put(b"after", b"the last checkpoint"))
    await table_range.execute(DeleteRange(b"key00"))
    expected = list(table_range.state.index.items())
    journal = await bk.streams.stream_info(TABLES_NAMESPACE, "ns~t~0")
    checkpoints = await bk.streams.stream_info(TABLES_NAMESPACE, "ns~t~0~checkpoints")
    # Only the two newest checkpoints, and the journal after the older of them, are kept.
    assert [s["state"] for s in checkpoints["segments"]].count("completed") == 2
    assert journal["segments"][0]["state"] == "truncated"
    await table_range.aclose()

    reopened = await open_range()
    assert reopened.restored_from == "checkpoint"
    assert list(reopened.state.index.items()) == expected
    assert await value_of(reopened, b"after") == b"the last checkpoint" and await value_of(reopened, b"key00") is None
    await reopened.aclose()


async def test_a_torn_checkpoint_falls_back_to_the_one_before(bk, open_range):
    table_range = await open_range(checkpoint_every=10**9)
    await table_range.execute(Put(b"a", b"1"))
    await table_range.checkpoint()
    await table_range.execute(Put(b"b", b"2"))
    await table_range.aclose()
    # A checkpoint whose owner died before its end record.
    async with bk.streams.open_writer(TABLES_NAMESPACE, "ns~t~0~checkpoints") as writer:
        await writer.write(msgpack.packb(["checkpoint", [9, 9, 9], 99, 1]))
        await writer.write(msgpack.packb(["chunk", [[b"dm", b"junk"]]]))
    reopened = await open_range()
    assert reopened.restored_from == "checkpoint"
    assert await value_of(reopened, b"a") == b"1" and await value_of(reopened, b"b") == b"2"
    assert await value_of(reopened, b"m") is None
    await reopened.aclose()


async def test_watchers_see_every_change_in_order_from_a_revision(bk, open_range):
    table_range = await open_range()
    await table_range.execute(Put(b"w", b"0"))
    start = table_range.state.revision
    seen = []

    async def watch(task_status=trio.TASK_STATUS_IGNORED):
        events = table_range.watch(b"w", start_revision=start)
        task_status.started()
        async for event in events:
            seen.append((event.kind, event.kv.value, event.revision))
            if len(seen) == 4:
                return

    async with trio.open_nursery() as nursery:
        await nursery.start(watch)
        await table_range.execute(Put(b"w", b"1"))
        await table_range.execute(Put(b"other", b"x"))
        await table_range.execute(DeleteRange(b"w"))
        await table_range.execute(Put(b"w", b"2"))
    assert [kind for kind, _, _ in seen] == ["put", "put", "delete", "put"]
    assert [value for _, value, _ in seen] == [b"0", b"1", b"", b"2"]
    assert [r for _, _, r in seen] == sorted(r for _, _, r in seen) and seen[0][2] == start
    # A new owner rebuilds the history from the journal it replays, so a watcher that comes back
    # to it (after an owner change) resumes from the same revision and sees the same changes.
    await table_range.aclose()
    reopened = await open_range()
    assert reopened.restored_from == "journal"
    again = []
    with trio.fail_after(10):
        async for event in reopened.watch(b"w", start_revision=start):
            again.append((event.kind, event.kv.value, event.revision))
            if len(again) == 4:
                break
    assert again == seen
    # What a checkpoint covers is not replayed, so revisions before it are compacted.
    await reopened.checkpoint()
    await reopened.aclose()
    restored = await open_range()
    assert restored.restored_from == "checkpoint"
    with pytest.raises(WatchCompacted):
        async for _ in restored.watch(b"w", start_revision=start):
            pass
    await restored.aclose()


async def test_a_watcher_with_deliver_is_handed_each_change_before_its_command_is_answered(bk, open_range):
    """watch(deliver=...): the history from the start revision, then each change as it is
    applied, in order, each before the command that made it is answered; a deliver that
    returns False drops the watcher (WatchTooSlow) and the range goes on serving."""
    table_range = await open_range()
    await table_range.execute(Put(b"w", b"0"))
    start = table_range.state.revision
    delivered: list[tuple[bytes, int]] = []
    answered: list[bytes] = []
    refuse_after = [3]

    def deliver(event) -> bool:
        delivered.append((event.kv.value, event.revision))
        return len(delivered) < refuse_after[0]

    async def watch(task_status=trio.TASK_STATUS_IGNORED):
        with pytest.raises(WatchTooSlow):
            async for _ in table_range.watch(b"w", start_revision=start, deliver=deliver,
                                             started=lambda revision: task_status.started()):
                raise AssertionError("a watch with deliver yields nothing")

    async with trio.open_nursery() as nursery:
        await nursery.start(watch)
        assert delivered == [(b"0", start)]                     # the history, at once
        for value in (b"1", b"2", b"3"):
            table_range.submit(Put(b"w", value), lambda result, error, value=value: answered.append(
                (value, [v for v, _ in delivered])))
            await table_range.execute(Put(b"other", value))
    # "1" was delivered before "1"'s answer; "2" was refused (the third delivery), which
    # dropped the watcher: "3" went nowhere.
    assert answered[0] == (b"1", [b"0", b"1"])
    assert [value for value, _ in delivered] == [b"0", b"1", b"2"]
    assert [r for _, r in delivered] == sorted(r for _, r in delivered)
    assert not table_range._watchers and await value_of(table_range, b"w") == b"3"


async def test_ttl_keys_expire_through_the_journal(bk, open_range):
    table_range = await open_range()
    await table_range.execute(Put(b"lease", b"x", ttl_ms=300))
    deletes = []

    async def watch():
        async for event in table_range.watch(b"lease"):
            deletes.append(event.kind)
            return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        nursery.start_soon(table_range.expire_keys_when_due)
        with trio.fail_after(10):
            while not deletes:
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    assert deletes == ["delete"] and await value_of(table_range, b"lease") is None
    await table_range.aclose()


async def test_random_operations_match_a_model_dict_with_versions(bk, open_range):
    """Seeded random puts, deletes, increments and compare-and-set txns through a range on real
    bookies, each checked against a plain dict of (value, version); then a new owner rebuilt
    from checkpoint + journal holds the same state."""
    import random

    from bkcore.table.commands import Compare, CompareResult, CompareTarget, IllegalOp, KeyNotFound, OpRefused
    rng = random.Random(2026)
    table_range = await open_range(checkpoint_every=40)
    model: dict[bytes, tuple[bytes, int, bool]] = {}      # key -> (value, version, is_number)
    keys = [b"k%d" % i for i in range(6)]
    for step in range(300):
        key = rng.choice(keys)
        kind = rng.choice(["put", "put", "delete", "incr", "cas"])
        if kind == "put":
            value = b"v%d" % step
            if key in model and model[key][2]:
                with pytest.raises(IllegalOp):          # a number is not replaced by bytes
                    await table_range.execute(Put(key, value))
                continue
            await table_range.execute(Put(key, value))
            model[key] = (value, model[key][1] + 1 if key in model else 1, False)
        elif kind == "delete":
            result = await table_range.execute(DeleteRange(key))
            assert result.deleted == (1 if model.pop(key, None) else 0)
        elif kind == "incr":
            if key in model and not model[key][2]:
                with pytest.raises(TableError):
                    await table_range.execute(Increment(key, 3))
                continue
            total = (await table_range.execute(Increment(key, 3))).total
            before = int.from_bytes(model[key][0], "big", signed=True) if key in model else 0
            assert total == before + 3
            model[key] = (total.to_bytes(8, "big", signed=True), model[key][1] + 1 if key in model else 1, True)
        else:
            expected_version = rng.choice([1, 2, 3])
            cas = Txn((Compare(key, CompareTarget.VERSION, CompareResult.EQUAL, expected_version),),
                      (Put(key, b"cas%d" % step),))
            if key not in model:
                with pytest.raises(KeyNotFound):
                    await table_range.execute(cas)
                continue
            result = await table_range.execute(cas)
            holds = model[key][1] == expected_version
            assert result.succeeded == holds
            if holds and model[key][2]:
                assert isinstance(result.results[0], OpRefused)
            elif holds:
                model[key] = (b"cas%d" % step, expected_version + 1, False)
        for k in keys:
            kvs = (await table_range.read(RangeRead(k))).kvs
            assert ((kvs[0].value, kvs[0].version, kvs[0].is_number) if kvs else None) == model.get(k), (step, k)
            in_thread = table_range.read_in_thread(RangeRead(k))      # None with a memory index
            assert in_thread is None or in_thread == await table_range.read(RangeRead(k))
    expected = list(table_range.state.index.items())
    await table_range.aclose()
    reopened = await open_range()
    assert reopened.restored_from == "checkpoint" and list(reopened.state.index.items()) == expected
    await reopened.aclose()


async def test_concurrent_clients_see_a_linearizable_key_across_an_owner_change(bk, open_range):
    """Four clients do reads and version compare-and-sets on one key while ownership moves to a
    new owner mid-way (the old one is fenced through the journal and stopped); the history,
    with the outcomes lost at the switch left unknown, must be linearizable (Wing-Gong)."""
    import random
    import time

    from bkcore.table.commands import Compare, CompareResult, CompareTarget
    from bksim.raftlite_world import HistoryOp, check_register_linearizable
    rng = random.Random(7)
    current = [await open_range()]
    history: list[HistoryOp] = []
    done_ops = [0]

    await current[0].execute(Put(b"x", b"init"))      # (a missing key's version cannot be compared)

    async def client(index: int) -> None:
        seen_version = 1
        for n in range(25):
            owner = current[0]
            if rng.random() < 0.4:
                op = HistoryOp("get", (), time.perf_counter_ns())
                history.append(op)
                try:
                    kvs = (await owner.read(RangeRead(b"x"))).kvs
                except Exception:       # noqa: BLE001 - a stopped owner: no answer
                    continue
                op.completed_ns = time.perf_counter_ns()
                op.result = (kvs[0].value, kvs[0].version)
                seen_version = op.result[1]
            else:
                expected = seen_version if rng.random() < 0.7 else rng.randrange(4)
                value = b"c%d-%d" % (index, n)
                op = HistoryOp("cas", (expected, value), time.perf_counter_ns())
                history.append(op)
                try:
                    result = await owner.execute(Txn(
                        (Compare(b"x", CompareTarget.VERSION, CompareResult.EQUAL, expected),), (Put(b"x", value),),
                        (RangeRead(b"x"),)))
                except Exception:       # noqa: BLE001 - lost at the switch: the outcome is unknown
                    continue
                op.completed_ns = time.perf_counter_ns()
                version = expected + 1 if result.succeeded else result.results[0].kvs[0].version
                op.result = (result.succeeded, version)
                seen_version = version
            done_ops[0] += 1
            await trio.sleep(rng.random() * 0.005)

    async def switch_owner() -> None:
        while done_ops[0] < 40:
            await trio.sleep(0.01)
        old = current[0]
        new = await open_range()          # fences the old owner's journal
        old.stop(RuntimeError("ownership moved"))
        current[0] = new

    async with trio.open_nursery() as nursery:
        nursery.start_soon(switch_owner)
        for index in range(4):
            nursery.start_soon(client, index)
    assert sum(1 for op in history if op.kind == "cas" and op.result and op.result[0]) >= 5
    assert check_register_linearizable(history, initial=(b"init", 1))


async def test_reads_in_other_threads_see_whole_commands_only(bk, open_range):
    """Txns write two keys at once while threads read both with read_in_thread: a read sees
    both keys of the same txn, never one of them (or is left to the loop, None, while
    commands are in flight); once the range stops, reads go back to the loop (None)."""
    table_range = await open_range()
    await table_range.execute(Txn((), (Put(b"a", b"0"), Put(b"b", b"0"))))
    if table_range.read_in_thread(RangeRead(b"a")) is None:
        return                    # a memory index has no snapshots: every read goes through the loop
    done = [False]
    seen: list[tuple[bytes, ...]] = []

    def reader() -> None:
        while not done[0]:
            result = table_range.read_in_thread(RangeRead(b"a", b"c"))
            if result is not None:
                seen.append(tuple(kv.value for kv in result.kvs))

    async def writer() -> None:
        for n in range(1, 30):
            await table_range.execute(Txn((), (Put(b"a", b"%d" % n), Put(b"b", b"%d" % n))))
        done[0] = True

    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer)
        for _ in range(2):
            nursery.start_soon(trio.to_thread.run_sync, reader)
    quiet = table_range.read_in_thread(RangeRead(b"a", b"c"))     # nothing in flight: answered here
    seen.append(tuple(kv.value for kv in quiet.kvs))
    assert seen and all(len(values) == 2 and values[0] == values[1] for values in seen)
    table_range.stop(RuntimeError("moved"))
    assert table_range.read_in_thread(RangeRead(b"a")) is None


async def settle() -> None:
    """Time for the tasks just started to run up to where they wait (for a held add; nothing
    else moves meanwhile)."""
    await trio.sleep(0.05)


class HeldJournalAdds:
    """The adds of table ns/t's range journal, held back until the test lets them go: with
    `answers_only` each add reaches the bookies at once and only its answer waits (the owner
    cannot know it is durable); otherwise nothing is sent until release_one()."""

    def __init__(self, monkeypatch, *, answers_only: bool = False) -> None:
        # (handle, payload, on_done, answer): answer is None while the add is unsent
        self.held: list[tuple] = []
        self.entries: list[StreamEntry] = []   # every journal entry started, in order
        original = self._original = WriteHandle.start_add

        def start_add(handle, payload, on_done, **options):
            if dict(handle.metadata.custom_metadata).get("stream") != b"__tables/ns~t~0":
                return original(handle, payload, on_done, **options)
            self.entries.append(unpack_entry(payload))
            if answers_only:
                original(handle, payload, lambda *answer: self.held.append((handle, payload, on_done, answer)),
                         **options)
            else:
                self.held.append((handle, payload, on_done, None))
        monkeypatch.setattr(WriteHandle, "start_add", start_add)

    def release_one(self) -> None:
        handle, payload, on_done, answer = self.held.pop(0)
        if answer is None:
            self._original(handle, payload, on_done)
        else:
            on_done(*answer)

    def lose_all(self) -> None:
        """The owner's process died: no held add is sent, and no answer reaches it."""
        while self.held:
            self.held.pop(0)[2](None, BKException("the owner's process died"))


async def test_commands_that_arrive_during_an_add_go_in_one_entry_answered_once_durable(
        bk, open_range, monkeypatch):
    """Group commit: while the journal's one entry in flight is being added, the commands that
    arrive wait; then all of them go into the next entry (one ledger add), in the order they
    arrived, are applied in that order and answered only when that entry is durable."""
    table_range = await open_range()
    held = HeldJournalAdds(monkeypatch)
    answered: list[tuple[int, int]] = []

    async def put(index: int) -> None:
        answered.append((index, (await table_range.execute(Put(b"k%d" % index, b"v%d" % index))).revision))

    revision = table_range.state.revision
    async with trio.open_nursery() as nursery:
        for index in range(6):
            nursery.start_soon(put, index)
            await settle()
        assert len(held.entries) == 1 and len(held.entries[0].records) == 1      # the first alone
        assert answered == [] and table_range.state.revision == revision
        held.release_one()
        while len(held.entries) < 2:
            await trio.sleep(0.01)
        await settle()
        assert [i for i, _ in answered] == [0]            # the first is durable; the group is not
        group = held.entries[1]
        assert [decode_stamped(r.payload).command.key for r in group.records] == [b"k%d" % i for i in range(1, 6)]
        assert table_range.state.revision == revision + 1
        held.release_one()
    assert len(held.entries) == 2
    assert sorted(answered) == [(i, revision + 1 + i) for i in range(6)]       # applied in arrival order


@pytest.mark.parametrize("answers_only", [False, True], ids=["group-unsent", "group-sent-unanswered"])
async def test_an_owner_crashing_mid_group_loses_only_unanswered_commands(
        bk, open_range, monkeypatch, answers_only):
    """The owner stops (as in a crash: nothing sealed) while a group is being added: every
    answered command survives in the next owner; the unanswered group survives whole if its
    entry reached the bookies, else not at all, never in part."""
    first = await open_range()
    await first.execute(Put(b"answered", b"1"))
    held = HeldJournalAdds(monkeypatch, answers_only=answers_only)
    failures: list[BaseException] = []

    async def put(key: bytes) -> None:
        try:
            await first.execute(Put(key, b"1"))
        except (RuntimeError, BKException) as exc:
            failures.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(put, b"g0")
        await settle()
        while not held.held:
            await trio.sleep(0.01)
        held.release_one()                      # g0 durable and answered
        while first.state.revision < 2:
            await trio.sleep(0.01)
        nursery.start_soon(put, b"g1")          # the entry in flight (held)
        await settle()
        for key in (b"g2", b"g3"):              # queued behind it
            nursery.start_soon(put, key)
            await settle()
        while not held.held:
            await trio.sleep(0.01)
        first.stop(RuntimeError("the owner crashed"))
        held.lose_all()
    assert len(failures) == 3
    monkeypatch.undo()
    second = await open_range()
    assert await value_of(second, b"answered") == b"1" and await value_of(second, b"g0") == b"1"
    survivors = [key for key in (b"g1", b"g2", b"g3") if await value_of(second, key) is not None]
    assert survivors == ([b"g1"] if answers_only else [])      # g1's entry alone reached the bookies
    await second.aclose()


async def test_commands_submitted_with_callbacks_are_answered_once_durable_each_entry_applied_at_once(
        bk, open_range, monkeypatch):
    """submit: no task per command. A command queued while an add is in flight goes in the
    next entry; each callback gets its result (or its refusal as the error) once that entry is
    durable; the entry's commands are applied as one write of the index."""
    table_range = await open_range()
    await table_range.execute(Put(b"bytes", b"b"))
    held = HeldJournalAdds(monkeypatch)
    batches: list[int] = []
    index = table_range.state.index
    original_batch = index.batch

    def counted_batch():
        batches.append(len(held.entries))
        return original_batch()
    monkeypatch.setattr(index, "batch", counted_batch)
    told: list[tuple[bytes, object, BaseException | None]] = []

    def on_done_of(key: bytes):
        return lambda result, error: told.append((key, result, error))
    table_range.submit(Put(b"first", b"1"), on_done_of(b"first"))
    await settle()
    for key in (b"a", b"b", b"c"):
        table_range.submit(Put(key, key), on_done_of(key))
    table_range.submit(Increment(b"bytes", 1), on_done_of(b"bytes"))      # refused: not a number
    await settle()
    assert len(held.entries) == 1 and told == []
    held.release_one()
    while len(held.entries) < 2:
        await trio.sleep(0.01)
    await settle()
    assert [key for key, _, _ in told] == [b"first"]
    held.release_one()
    while len(told) < 5:
        await trio.sleep(0.01)
    assert [key for key, _, _ in told] == [b"first", b"a", b"b", b"c", b"bytes"]
    revisions = [result.revision for _, result, _ in told[:4]]
    assert revisions == list(range(revisions[0], revisions[0] + 4))
    assert isinstance(told[4][2], TableError) and told[4][1] is None
    # One write of the index per entry: "first"'s (once the next entry had left), then the four's.
    assert batches == [2, 2]
    assert await value_of(table_range, b"c") == b"c"


async def test_a_submit_to_a_closing_range_is_refused_at_once_and_checkpoints_come_by_themselves(
        bk, open_range):
    """Every checkpoint_every commands a checkpoint is written in the background (the command
    that reaches the count does not wait for it); a range that is closing refuses a submit at
    once, with nothing queued."""
    table_range = await open_range(checkpoint_every=5)
    for n in range(5):
        await table_range.execute(Put(b"k%d" % n, b"v"))
    checkpoints = await bk.streams.stream_info(TABLES_NAMESPACE, "ns~t~0~checkpoints")
    with trio.fail_after(10):
        while not any(s["state"] == "completed" for s in checkpoints["segments"]):
            await trio.sleep(0.01)
            checkpoints = await bk.streams.stream_info(TABLES_NAMESPACE, "ns~t~0~checkpoints")
    await table_range.aclose()
    with pytest.raises(Exception, match="closed"):
        table_range.submit(Put(b"late", b"v"), lambda result, error: None)
    reopened = await open_range()
    assert reopened.restored_from == "checkpoint"
    assert await value_of(reopened, b"k4") == b"v"
    await reopened.aclose()
