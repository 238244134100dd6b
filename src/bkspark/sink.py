"""Writes into a stream, exactly once: df.write.format("bookkeeper") and writeStream.

    df.write.format("bookkeeper").option("metastore", URI).option("stream", "ns/name").mode("append").save()
    df.writeStream.format("bookkeeper").option("metastore", URI).option("stream", "ns/name")
      .option("checkpointLocation", path).start()

Columns: `payload` (binary or string) and optionally `txid` (integer, non-decreasing within a
partition and across partitions in partition order). Each task packs its rows into stream
entries (bkcore's SegmentWriteState, the stream writer's own format) in a ledger of its own and
reports the closed ledger; a task that fails deletes its ledger. The driver's commit attaches
every task's ledger as new segments in one decision (bkcore.stream.attach), keyed by the
writer id (option writerId; for writeStream it defaults to the checkpoint location) and the
batch id, so a streaming batch Spark replays after a driver restart is not applied twice: its
new ledgers are deleted instead. Abort deletes the tasks' ledgers.

Without a txid column a task numbers its rows from the stream's newest sealed txid + 1 +
partition index * 2**32, so txids grow across partitions in order without the tasks talking.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructType

from bkcore.errors import NoSuchLedger
from bkcore.stream.segments import SegmentMetadata, StreamSettings, stream_last_txid
from bkcore.stream.writer_state import SegmentWriteState
from bkspark import cluster
from bkspark.arrow_entries import ArrowEntries
from bkspark.arrow_rows import row_numbers
from bkspark.options import OptionError, SourceOptions
from bkcore.stream.attach import AttachedLedger
from bkcore.stream.writer import ENTRY_SIZE_MAX, STREAM_LEDGER_PASSWORD

log = logging.getLogger("bkspark")
PARTITION_TXID_SPAN = 2**32
# Payload bytes a task has on their way to the bookies before it waits for acknowledgements.
UNACKNOWLEDGED_BYTES_MAX = 32 * 1024 * 1024


@dataclass
class LedgerCommitMessage(WriterCommitMessage):
    ledger: AttachedLedger | None        # None: the task had no rows


class _Sink:
    """What batch and streaming writes share: checking the schema, tasks, commit, abort."""

    def __init__(self, options: SourceOptions, schema: StructType, overwrite: bool, writer_id: str) -> None:
        if overwrite:
            raise OptionError("a stream is append-only: use mode(\"append\"), not overwrite")
        fields = {field.name: field.dataType for field in schema.fields}
        if not isinstance(fields.get("payload"), (BinaryType, StringType)):
            raise OptionError(f"writing to stream {options.stream_name} needs a column \"payload\" of binary or "
                              f"string type; the DataFrame has {schema.simpleString()}")
        if "txid" in fields and not isinstance(fields["txid"], (LongType, IntegerType)):
            raise OptionError(f"column \"txid\" must be an integer (long), not {fields['txid'].simpleString()}")
        self.options = options
        self.writer_id = writer_id
        metadata = cluster.client(options).run(
            lambda bk: bk.streams.catalog.get_stream(options.namespace, options.stream))
        self.settings = metadata.settings.to_list()

    def _write(self, batches: Iterator[pa.RecordBatch]) -> LedgerCommitMessage:
        return LedgerCommitMessage(write_task(self.options, StreamSettings.from_list(self.settings), batches))

    def _commit(self, messages: list, batch_id: int) -> None:
        ledgers = [m.ledger for m in messages if m is not None and m.ledger is not None]
        options = self.options
        if not ledgers:
            return

        async def attach(bk):
            return await bk.streams.attach_segments(options.namespace, options.stream, writer_id=self.writer_id,
                                                    batch_id=batch_id, ledgers=ledgers)
        outcome = cluster.client(options).run(attach)
        if not outcome.applied:
            kept = {ledger.ledger_id for ledger in outcome.committed.ledgers}
            log.warning("batch %d of writer %r was committed to %s before; this run's ledgers are deleted",
                        batch_id, self.writer_id, options.stream_name)
            _delete(options, [ledger.ledger_id for ledger in ledgers if ledger.ledger_id not in kept])

    def _abort(self, messages: list) -> None:
        _delete(self.options, [m.ledger.ledger_id for m in messages if m is not None and m.ledger is not None])


class BatchSink(_Sink, DataSourceArrowWriter):
    def __init__(self, options: SourceOptions, schema: StructType, overwrite: bool) -> None:
        super().__init__(options, schema, overwrite, options.writer_id or f"batch-{uuid.uuid4().hex}")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LedgerCommitMessage:
        return self._write(iterator)

    def commit(self, messages: list) -> None:
        self._commit(messages, 0)

    def abort(self, messages: list) -> None:
        self._abort(messages)


class StreamingSink(_Sink, DataSourceStreamArrowWriter):
    def __init__(self, options: SourceOptions, schema: StructType, overwrite: bool) -> None:
        writer_id = options.writer_id or options.checkpoint_location
        if not writer_id:
            raise OptionError('writeStream to a stream needs a stable writer id: set option "writerId" (or '
                              '"checkpointLocation", which is used when writerId is not given)')
        super().__init__(options, schema, overwrite, writer_id)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LedgerCommitMessage:
        return self._write(iterator)

    def commit(self, messages: list, batchId: int) -> None:
        self._commit(messages, batchId)

    def abort(self, messages: list, batchId: int) -> None:
        self._abort(messages)


def write_task(options: SourceOptions, settings: StreamSettings,
               batches: Iterator[pa.RecordBatch]) -> AttachedLedger | None:
    """One task: rows packed into entries of a new ledger, closed; deleted if anything fails.
    Adds are pipelined across Spark's Arrow batches (up to UNACKNOWLEDGED_BYTES_MAX on their
    way), so packing the next batch overlaps the bookies' work on this one."""
    bk = cluster.client(options)
    context = TaskContext.get()
    partition_index = context.partitionId() if context is not None else 0
    ledger = state = adds = entries = None
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if ledger is None:
                ledger, state = bk.run(_start_ledger, options, settings, partition_index,
                                       "txid" in batch.schema.names)
                adds = bk.pipeline(ledger, bytes_max=UNACKNOWLEDGED_BYTES_MAX)
                entries = ArrowEntries(state, entry_size_max=ENTRY_SIZE_MAX)
            full = entries.add(*_columns(batch, state))
            if full:
                adds.send(full)
        if ledger is None:
            return None
        if entries.pending_count:
            adds.send(entries.flush())
        adds.finish()
        closed = state.completed(bk.run(lambda _bk: ledger.close()).last_entry_id)
    except BaseException:
        if ledger is not None:
            _delete(options, [ledger.ledger_id])
        raise
    return AttachedLedger(ledger.ledger_id, closed.last_entry_id, closed.first_txid, closed.last_txid,
                          closed.record_count, closed.size)


async def _start_ledger(bk, options: SourceOptions, settings: StreamSettings, partition_index: int,
                        has_txids: bool):
    """The task's ledger and the write state that numbers and packs its records."""
    last_txid = -1
    if not has_txids:
        segments = await bk.streams.catalog.segments(options.namespace, options.stream)
        last_txid = stream_last_txid(segments) + partition_index * PARTITION_TXID_SPAN
    ledger = await bk.create_ledger(
        ensemble=settings.ensemble_size, write_quorum=settings.write_quorum_size,
        ack_quorum=settings.ack_quorum_size, password=STREAM_LEDGER_PASSWORD,
        custom_metadata={"stream": options.stream_name.encode(), "spark-task": str(partition_index).encode()})
    return ledger, SegmentWriteState(SegmentMetadata(0, ledger.ledger_id), settings, last_txid=last_txid,
                                     compression=options.compression)


def _columns(batch: pa.RecordBatch, state: SegmentWriteState) -> tuple[pa.Array, pa.Array]:
    """The batch's txids (int64, given or assigned by SegmentWriteState.assign_txids) and
    payloads (binary)."""
    payloads = batch.column("payload")
    if payloads.type != pa.binary():
        payloads = pc.cast(payloads, pa.binary())
    if payloads.null_count:
        raise ValueError("column \"payload\" has nulls; every record needs a payload")
    if "txid" not in batch.schema.names:
        first = state.assign_txids(None, batch.num_rows)[0]
        return row_numbers(batch.num_rows, first, pa.int64()), payloads
    column = batch.column("txid")
    if column.null_count:
        raise ValueError("column \"txid\" has nulls; leave the column out to have txids assigned")
    column = pc.cast(column, pa.int64())
    state.assign_txids(column.to_pylist(), batch.num_rows)
    return column, payloads


def _delete(options: SourceOptions, ledger_ids: list[int]) -> None:
    async def delete(bk) -> None:
        for ledger_id in ledger_ids:
            try:
                await bk.delete_ledger(ledger_id)
            except NoSuchLedger:
                pass
    if ledger_ids:
        cluster.client(options).run(delete)
