"""Log streams against bookies on real TCP and files (memory:// metastore): namespaces, writers
and fencing, rolling, compression, readers from positions/txids/the tail, end of stream,
truncation, retention and cursors."""

import msgpack
import pytest
import trio

import bkclient
from bkcore.stream.errors import (
    EndOfStream, MetastoreSessionExpired, NamespaceExists, NamespaceNotEmpty, NamespaceNotFound, PositionTruncated,
    StreamExists, StreamNotFound, TxidOutOfOrder, WriterFenced,
)
from bkcore.stream.records import DLSN
from bkcore.stream.segments import StreamSettings
from bkcore.stream.send_rounds import SendRounds
from bkcore.stream.writer import STREAM_LEDGER_PASSWORD

URI = "memory://streams"
SMALL = StreamSettings(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)


@pytest.fixture
async def bk(start_cluster):
    await start_cluster(URI, 3)
    async with bkclient.connect(URI) as client:
        await client.streams.create_namespace("ns", SMALL)
        yield client


async def read_all(streams, stream, start=None, *, count, timeout_s=20, **options):
    records = []
    async with streams.open_reader("ns", stream, start, **options) as reader:
        with trio.fail_after(timeout_s):
            while len(records) < count:
                records.append(await reader.read_next())
    return records


async def test_namespaces_and_streams_are_managed_with_clear_errors(bk):
    streams = bk.streams
    with pytest.raises(NamespaceExists):
        await streams.create_namespace("ns")
    await streams.create_stream("ns", "a")
    await streams.create_stream("ns", "b", StreamSettings(ensemble_size=1, write_quorum_size=1, ack_quorum_size=1))
    with pytest.raises(StreamExists):
        await streams.create_stream("ns", "a")
    with pytest.raises(NamespaceNotFound):
        await streams.create_stream("nope", "a")
    with pytest.raises(StreamNotFound):
        await streams.stream_info("ns", "zzz")
    with pytest.raises(ValueError):
        await streams.create_stream("ns", "bad/name")
    assert await streams.list_namespaces() == ["ns"]
    assert await streams.list_streams("ns") == ["a", "b"]
    info = await streams.stream_info("ns", "a")
    assert info["settings"]["write_quorum_size"] == 2 and info["segments"] == []
    assert (await streams.stream_info("ns", "b"))["settings"]["ensemble_size"] == 1
    with pytest.raises(NamespaceNotEmpty):
        await streams.delete_namespace("ns")
    async with streams.open_writer("ns", "a") as writer:
        await writer.write(b"x")
    ledger_id = (await streams.stream_info("ns", "a"))["segments"][0]["ledger_id"]
    await streams.delete_stream("ns", "a")
    await streams.delete_stream("ns", "b")
    assert ledger_id not in await bk.list_ledgers()
    await streams.delete_namespace("ns")
    assert await streams.list_namespaces() == []


async def test_written_records_read_back_in_order_with_positions_and_txids(bk):
    streams = bk.streams
    await streams.create_stream("ns", "s")
    async with streams.open_writer("ns", "s") as writer:
        first = await writer.write(b"r0")
        positions = await writer.write_many([b"r%d" % i for i in range(1, 500)])
        with pytest.raises(TxidOutOfOrder):
            await writer.write(b"late", txid=3)
        jumped = await writer.write(b"jump", txid=1000)
        assert writer.last_txid == 1000
    assert first == DLSN(1, 0, 0) and positions[0] > first and jumped > positions[-1]
    # Concurrent pipelined writes were packed into far fewer entries than records.
    assert positions[-1].entry_id < 100
    records = await read_all(streams, "s", count=501)
    assert [r.payload for r in records] == [b"r%d" % i for i in range(500)] + [b"jump"]
    assert [r.txid for r in records] == list(range(500)) + [1000]
    assert [r.dlsn for r in records] == [first, *positions, jumped]
    # A later writer's txids continue above the stream's newest.
    async with streams.open_writer("ns", "s") as writer:
        assert await writer.write(b"next") == DLSN(2, 0, 0)
        assert writer.last_txid == 1001
    info = await streams.stream_info("ns", "s")
    assert [(s["state"], s["records"], s["first_txid"], s["last_txid"]) for s in info["segments"]] == \
        [("completed", 501, 0, 1000), ("completed", 1, 1001, 1001)]


async def test_with_one_entry_in_flight_what_arrives_meanwhile_goes_in_the_next_entry(bk):
    """A range journal's writer: one entry in flight; the records written meanwhile leave
    together as the next entry once it is acknowledged (sent from the acknowledgement, while
    the flusher may be waiting for the same slot: it must not send an empty entry then)."""
    streams = bk.streams
    await streams.create_stream("ns", "grouped")
    written: dict[bytes, DLSN] = {}
    async with streams.open_writer("ns", "grouped", entries_in_flight_max=1, lac_push_delay_ns=10_000_000) as writer:
        async def client(index: int) -> None:
            for n in range(15):
                payload = b"c%d-%d" % (index, n)
                written[payload] = await writer.write(payload)
                await trio.sleep(0.001 * (index % 3))
        async with trio.open_nursery() as nursery:
            for index in range(12):
                nursery.start_soon(client, index)
    assert len(written) == 180 and len(set(written.values())) == 180
    entries = {(p.segment, p.entry_id) for p in written.values()}
    assert len(entries) < 150                       # many went several to an entry
    assert max(p.slot for p in written.values()) > 0
    records = await read_all(streams, "grouped", count=180)
    assert {r.payload: r.dlsn for r in records} == written
    # Every entry holds at least one record: slots 0.. of each entry, no entry left empty.
    assert sorted({(r.dlsn.segment, r.dlsn.entry_id) for r in records}) == \
        [(1, entry_id) for entry_id in range(len(entries))]


async def test_writers_sharing_send_rounds_send_their_entries_together_and_a_fenced_one_holds_none_up(bk, nursery):
    """Three range-journal-like writers (one entry in flight each) in one SendRounds: every
    record is durable and reads back where its writer was told, the writers' entries went in
    shared rounds (fewer rounds than entries), and once one writer is fenced the others go on
    without waiting for it."""
    streams = bk.streams

    class CheckedRounds(SendRounds):
        """Counts entries started while another writer's round was in flight (none should)."""
        out_of_turn = 0

        def started(self, writer) -> None:
            if any(other is not writer for other in self._in_flight) and not self._is_opening:
                self.out_of_turn += 1
            super().started(writer)
    rounds = CheckedRounds(streams.runtime, nursery.start_soon)
    names = ["r0", "r1", "r2"]
    writers = {}
    for name in names:
        await streams.create_stream("ns", name)
        writers[name] = await streams.start_writer(nursery, "ns", name, entries_in_flight_max=1, rounds=rounds)
    written: dict[str, dict[bytes, DLSN]] = {name: {} for name in names}

    async def client(index: int) -> None:
        name = names[index % 3]
        for n in range(12):
            payload = b"c%d-%d" % (index, n)
            written[name][payload] = await writers[name].write(payload)
    async with trio.open_nursery() as clients:
        for index in range(9):
            clients.start_soon(client, index)
    entry_count = sum(len({(p.segment, p.entry_id) for p in positions.values()}) for positions in written.values())
    assert rounds.rounds_count < entry_count and rounds.out_of_turn == 0
    for name in names:
        records = await read_all(streams, name, count=36)
        assert {r.payload: r.dlsn for r in records} == written[name]

    async with streams.open_writer("ns", "r0"):         # fences r0's writer
        pass
    with pytest.raises(WriterFenced):
        await writers["r0"].write(b"fenced")
    with trio.fail_after(10):
        await writers["r1"].write(b"after")
        await writers["r2"].write(b"after")
    assert rounds.rounds_given_up_count == 0            # (nothing waited for the fenced writer)
    for name in ("r1", "r2"):
        await writers[name].aclose()


async def test_records_written_without_waiting_are_told_their_positions_by_callback(bk, nursery):
    """write_nowait: each callback gets its record's position once durable, in order, several
    records to an entry; a writer that fails tells the records still queued, and refuses
    more at once."""
    streams = bk.streams
    await streams.create_stream("ns", "nowait")
    told: list[tuple[bytes, DLSN | None, BaseException | None]] = []

    def on_done_of(payload: bytes):
        return lambda position, error: told.append((payload, position, error))
    async with streams.open_writer("ns", "nowait", entries_in_flight_max=1) as writer:
        for n in range(20):
            writer.write_nowait(b"r%d" % n, on_done_of(b"r%d" % n))
        await writer.write(b"last")           # after the 20: they are all durable by then
    assert [payload for payload, _, _ in told] == [b"r%d" % n for n in range(20)]
    assert all(error is None for _, _, error in told)
    positions = [position for _, position, _ in told]
    assert positions == sorted(positions) and len({(p.segment, p.entry_id) for p in positions}) < 20
    records = await read_all(streams, "nowait", count=21)
    assert [(r.payload, r.dlsn) for r in records[:20]] == [(p, pos) for p, pos, _ in told]

    told.clear()
    writer = await streams.start_writer(nursery, "ns", "nowait", entries_in_flight_max=1)
    writer.write_nowait(b"in flight", on_done_of(b"in flight"))     # an idle writer sends it at once
    writer.write_nowait(b"queued", on_done_of(b"queued"))           # it waits for that entry
    writer.abort(WriterFenced("taken over"))
    assert [(payload, position, type(error)) for payload, position, error in told] == \
        [(b"queued", None, WriterFenced)]
    with pytest.raises(WriterFenced):
        writer.write_nowait(b"too late", on_done_of(b"too late"))


async def test_readers_start_at_a_position_a_txid_or_the_tail(bk):
    streams = bk.streams
    await streams.create_stream("ns", "s")
    async with streams.open_writer("ns", "s") as writer:
        positions = [await writer.write(b"p%d" % i, txid=10 * i) for i in range(30)]
    async with streams.open_writer("ns", "s") as writer:
        positions += [await writer.write(b"p%d" % i, txid=10 * i) for i in range(30, 40)]
    from_position = await read_all(streams, "s", positions[7], count=3)
    assert [r.payload for r in from_position] == [b"p7", b"p8", b"p9"]
    from_text = await read_all(streams, "s", str(positions[35]), count=1)
    assert from_text[0].payload == b"p35"
    for txid, expected in [(0, b"p0"), (95, b"p10"), (100, b"p10"), (305, b"p31"), (390, b"p39")]:
        assert (await read_all(streams, "s", txid=txid, count=1))[0].payload == expected
    async with streams.open_writer("ns", "s") as writer:
        async with streams.open_reader("ns", "s", "latest") as tail:
            await writer.write(b"new")
            with trio.fail_after(20):
                record = await tail.read_next()
            assert record.payload == b"new"
        async with streams.open_reader("ns", "s", txid=10**6) as beyond:
            await writer.write(b"future", txid=10**6)
            with trio.fail_after(20):
                assert (await beyond.read_next()).payload == b"future"


async def test_a_tailing_reader_follows_rolls_and_stops_at_the_end_of_stream(bk):
    streams = bk.streams
    await streams.create_stream("ns", "s", StreamSettings(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2,
                                                          segment_rolling_size=2000))
    seen = []

    async def follow():
        async with streams.open_reader("ns", "s") as reader:
            async for record in reader:
                seen.append(record)
            assert reader.is_ended

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follow)
        async with streams.open_writer("ns", "s") as writer:
            for i in range(40):
                await writer.write(b"%03d" % i + b"." * 200)
            end = await writer.mark_end_of_stream()
            with pytest.raises(EndOfStream):
                await writer.write(b"after the end")
        with trio.fail_after(30):
            while len(seen) < 40:
                await trio.sleep(0.01)
    assert [r.payload[:3] for r in seen] == [b"%03d" % i for i in range(40)]
    segments = (await streams.stream_info("ns", "s"))["segments"]
    assert len(segments) >= 4 and segments[-1]["end_of_stream"] and end.segment == segments[-1]["seqno"]
    with pytest.raises(EndOfStream):
        async with streams.open_writer("ns", "s"):
            pass


async def test_a_new_writer_fences_the_old_one_and_keeps_every_acknowledged_record(bk):
    streams = bk.streams
    await streams.create_stream("ns", "s")
    async with streams.open_writer("ns", "s") as old:
        acknowledged = await old.write_many([b"a%d" % i for i in range(50)])
        async with streams.open_writer("ns", "s") as new:
            with pytest.raises(WriterFenced):
                await old.write(b"from the fenced writer")
            with pytest.raises(WriterFenced):
                await old.write(b"again")
            await new.write(b"from the new writer")
    records = await read_all(streams, "s", count=51)
    assert [r.dlsn for r in records[:50]] == acknowledged
    assert records[50].payload == b"from the new writer" and records[50].dlsn.segment == 2


async def test_an_lz4_writer_compresses_its_entries_and_a_writer_recovering_after_it_reads_its_counters(bk):
    streams = bk.streams
    await streams.create_stream("ns", "z")
    with pytest.raises(ValueError, match="compression 'gzip' is not one of none, lz4"):
        await streams.open_writer("ns", "z", compression="gzip").__aenter__()
    payloads = [b"%d:" % i + b"compressible " * 40 for i in range(300)]
    async with streams.open_writer("ns", "z", compression="lz4") as old:
        written = await old.write_many(payloads[:200])
        # A second writer fences this one and recovers the open segment from its last entry,
        # which is compressed: its totals must come through.
        async with streams.open_writer("ns", "z") as new:
            written += await new.write_many(payloads[200:])
        with pytest.raises(WriterFenced):
            await old.write(b"from the fenced writer")
    info = await streams.stream_info("ns", "z")
    first = info["segments"][0]
    assert (first["records"], first["bytes"]) == (200, sum(map(len, payloads[:200])))
    records = await read_all(streams, "z", count=300)
    assert [(r.dlsn, r.payload) for r in records] == list(zip(written, payloads))
    segment = (await streams.catalog.segments("ns", "z"))[0]
    ledger = await bk.open_ledger(segment.ledger_id, password=STREAM_LEDGER_PASSWORD)
    entries = await ledger.read(0, segment.last_entry_id)
    assert all(msgpack.unpackb(entry)[1] >> 1 & 3 == 1 for entry in entries)       # LZ4's code
    assert sum(map(len, entries)) * 5 < first["bytes"]


async def test_truncation_and_retention_delete_old_segments(bk):
    streams = bk.streams
    await streams.create_stream("ns", "s")
    first_positions = []
    for round_ in range(4):
        async with streams.open_writer("ns", "s") as writer:
            first_positions.append(await writer.write(b"round %d" % round_))
    ledgers_before = set(await bk.list_ledgers())
    assert await streams.truncate("ns", "s", first_positions[2]) == [1, 2]
    info = await streams.stream_info("ns", "s")
    assert [s["state"] for s in info["segments"]] == ["truncated", "truncated", "completed", "completed"]
    gone = {s["ledger_id"] for s in info["segments"][:2]}
    assert gone <= ledgers_before and not gone & set(await bk.list_ledgers())
    with pytest.raises(PositionTruncated):
        await read_all(streams, "s", first_positions[0], count=1)
    assert (await read_all(streams, "s", count=1))[0].payload == b"round 2"
    with pytest.raises(ValueError):
        await streams.truncate("ns", "s", DLSN(9, 0, 0))
    # Retention by size keeps the newest segments whose sizes fit; a cursor can hold it back.
    await streams.commit_cursor("ns", "s", "slow", first_positions[2])
    metadata = await streams.catalog.get_stream("ns", "s")
    import dataclasses
    settings = dataclasses.replace(metadata.settings, retention_size=7, retention_keeps_unconsumed=True)
    await streams.catalog.replace_stream("ns", "s", dataclasses.replace(metadata, settings=settings))
    assert await streams.apply_retention("ns", "s") == []
    await streams.commit_cursor("ns", "s", "slow", first_positions[3])
    assert await streams.apply_retention("ns", "s") == [3]
    assert await streams.cursor_position("ns", "s", "slow") == first_positions[3]


async def test_a_reader_overtaken_by_truncation_gets_a_typed_error(bk):
    streams = bk.streams
    await streams.create_stream("ns", "s")
    for _ in range(3):
        async with streams.open_writer("ns", "s") as writer:
            for _ in range(20):
                await writer.write(b"x" * 100)      # one entry each
    # The read-ahead holds at most one entry, so it cannot have reached segment 3 yet.
    async with streams.open_reader("ns", "s", read_ahead_entries=1) as reader:
        first = await reader.read_next()
        assert first.dlsn.segment == 1
        await streams.truncate("ns", "s", DLSN(3, 0, 0))
        with pytest.raises(PositionTruncated):
            with trio.fail_after(20):
                while True:
                    await reader.read_next()


async def test_cursors_resume_after_the_committed_record(bk):
    streams = bk.streams
    await streams.create_stream("ns", "s")
    async with streams.open_writer("ns", "s") as writer:
        await writer.write_many([b"m%d" % i for i in range(10)])
    records = await read_all(streams, "s", count=4, cursor="group-1")
    assert [r.payload for r in records] == [b"m0", b"m1", b"m2", b"m3"]
    await streams.commit_cursor("ns", "s", "group-1", records[-1].dlsn)
    resumed = await read_all(streams, "s", count=2, cursor="group-1")
    assert [r.payload for r in resumed] == [b"m4", b"m5"]
    assert await streams.list_cursors("ns", "s") == ["group-1"]
    await streams.delete_cursor("ns", "s", "group-1")
    assert await streams.list_cursors("ns", "s") == []


async def test_a_ledger_read_error_reaches_the_reader_as_its_typed_error(bk, monkeypatch):
    """Whatever the read-ahead meets below it (here every replica answering EIO) comes out of
    read_next() as that error, not as a closed channel or an exception group."""
    from bkcore.errors import BookieIOError
    from bkclient.library import ReadHandle

    streams = bk.streams
    await streams.create_stream("ns", "s")
    async with streams.open_writer("ns", "s") as writer:
        await writer.write(b"x")

    async def failing_tail(self, start_entry_id=0):
        raise BookieIOError("every replica answered IO_ERROR")
        yield                                       # an async generator, like the real one

    monkeypatch.setattr(ReadHandle, "tail", failing_tail)
    async with streams.open_reader("ns", "s") as reader:
        with pytest.raises(BookieIOError, match="IO_ERROR"):
            with trio.fail_after(20):
                await reader.read_next()
        assert reader.is_ended


async def test_a_client_whose_metastore_session_expired_goes_on_with_a_new_one(bk):
    await bk.streams.create_stream("ns", "renewed")
    expired = bk.store.current
    expired.expire_session()
    assert (await bk.streams.stream_info("ns", "renewed")) is not None
    async with bk.streams.open_writer("ns", "renewed") as writer:
        await writer.write(b"after the expiry")
    assert bk.store.current is not expired and bk.store.renewal_count == 1


async def test_a_client_that_does_not_renew_its_session_is_told_it_expired(bk):
    await bk.streams.create_stream("ns", "lost")
    async with bkclient.connect(URI, renew_session=False) as client:
        client.store.expire_session()
        with pytest.raises(MetastoreSessionExpired, match="session of this client expired.*connect again"):
            await client.streams.stream_info("ns", "lost")
        with pytest.raises(MetastoreSessionExpired):
            async with client.streams.open_writer("ns", "lost"):
                pass
