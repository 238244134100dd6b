"""Attaching ledgers written apart (one per Spark task) to a stream in one decision, exactly
once per (writer, batch): bookies on real TCP and files, memory:// metastore."""

import pytest
import trio

import bkclient
from bkcore.stream.errors import TxidOutOfOrder, WriterFenced
from bkcore.stream.records import Record
from bkcore.stream.segments import SegmentMetadata, StreamSettings
from bkcore.stream.writer_state import SegmentWriteState
from bkcore.stream.attach import AttachedLedger, CommitRecord
from bkcore.stream.writer import STREAM_LEDGER_PASSWORD

URI = "memory://attach"
SMALL = StreamSettings(ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)


@pytest.fixture
async def bk(start_cluster):
    await start_cluster(URI, 3)
    async with bkclient.connect(URI) as client:
        await client.streams.create_namespace("ns", SMALL)
        await client.streams.create_stream("ns", "s")
        yield client


async def write_ledger(bk, txids: list[int]) -> AttachedLedger:
    """A closed ledger of stream entries (10 records an entry), as a Spark task writes one."""
    ledger = await bk.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=STREAM_LEDGER_PASSWORD)
    state = SegmentWriteState(SegmentMetadata(0, ledger.ledger_id), SMALL, last_txid=-1)
    records = [Record(state.assign_txid(txid), b"p%d" % txid) for txid in txids]
    await ledger.add_many([state.pack(records[i:i + 10]) for i in range(0, len(records), 10)])
    closed = state.completed((await ledger.close()).last_entry_id)
    return AttachedLedger(ledger.ledger_id, closed.last_entry_id, closed.first_txid, closed.last_txid,
                          closed.record_count, closed.size)


async def txids_of(bk) -> list[int]:
    async with bk.streams.open_reader("ns", "s", "earliest") as reader:
        found = []
        while (record := await reader.read_next(timeout_s=2)) is not None:
            found.append(record.txid)
        return found


async def test_ledgers_are_attached_in_order_once_and_a_replay_is_refused(bk):
    first, second = await write_ledger(bk, list(range(0, 25))), await write_ledger(bk, list(range(25, 40)))
    outcome = await bk.streams.attach_segments("ns", "s", writer_id="job", batch_id=0, ledgers=[first, second])
    assert outcome.applied and outcome.seqnos == (1, 2)
    assert await txids_of(bk) == list(range(40))
    again = await write_ledger(bk, list(range(25, 40)))
    replay = await bk.streams.attach_segments("ns", "s", writer_id="job", batch_id=0, ledgers=[again])
    assert not replay.applied and replay.seqnos == (1, 2)      # the first commit stands
    assert await txids_of(bk) == list(range(40))
    later = await bk.streams.attach_segments("ns", "s", writer_id="job", batch_id=1,
                                             ledgers=[await write_ledger(bk, [40, 41])])
    assert later.applied and later.seqnos == (3,)
    assert await txids_of(bk) == list(range(42))


async def test_a_recorded_batch_whose_segments_were_not_created_is_completed_by_the_retry(bk):
    ledger = await write_ledger(bk, [0, 1, 2])
    # The driver died right after its CAS: the record names the ledger, no segment yet.
    assert await bk.streams.catalog.put_commit_record("ns", "s", "job", CommitRecord(7, (ledger,)).to_bytes(), -1)
    assert await txids_of(bk) == []
    outcome = await bk.streams.attach_segments("ns", "s", writer_id="job", batch_id=7,
                                               ledgers=[await write_ledger(bk, [0, 1, 2])])
    assert not outcome.applied and outcome.seqnos == (1,)
    assert await txids_of(bk) == [0, 1, 2]


async def test_attaching_seals_the_open_segment_fencing_its_writer_and_keeps_txids_in_order(bk):
    async with trio.open_nursery() as nursery:
        writer = await bk.streams.start_writer(nursery, "ns", "s")
        await writer.write_many([(5, b"a"), (6, b"b")])
        with pytest.raises(TxidOutOfOrder, match="txids never decrease"):
            await bk.streams.attach_segments("ns", "s", writer_id="job", batch_id=0,
                                             ledgers=[await write_ledger(bk, [3, 4])])
        with pytest.raises(WriterFenced):
            await writer.write(b"c")
        nursery.cancel_scope.cancel()
    outcome = await bk.streams.attach_segments("ns", "s", writer_id="job", batch_id=0,
                                               ledgers=[await write_ledger(bk, [7, 8])])
    assert outcome.applied
    assert await txids_of(bk) == [5, 6, 7, 8]
    await bk.streams.delete_stream("ns", "s")                   # commit records go with the stream
    assert await bk.streams.list_streams("ns") == []
