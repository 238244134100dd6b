"""Structured streaming reads: spark.readStream.format("bookkeeper") with the full stream reader.

    spark.readStream.format("bookkeeper").option("metastore", URI).option("stream", "ns/name")
         .option("maxEntriesPerTrigger", 1000).option("cursor", "my-job").load()

Offsets are bkspark.offsets.StreamOffset (position + ledger id), always on entry boundaries
after the initial one, so a batch is the entries [start, end) and a restart from Spark's
checkpoint re-plans exactly the same entries: no duplicates, no gaps. Before each plan the start
offset is checked against the stream (bkspark.planning.find_data_loss): truncated data fails
the query naming the lost ledgers (failOnDataLoss=true, the default) or is skipped with a
warning. Admission control: maxEntriesPerTrigger, maxBytesPerTrigger (estimated from segment
averages), minEntriesPerTrigger with maxTriggerDelay; Trigger.AvailableNow stops at the end the
stream had when the query started. commit() moves the named cursor (option "cursor"), so
retention with retention_keeps_unconsumed frees only segments the query has consumed.
"""

from __future__ import annotations

import logging
import time

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable, ReadLimit, ReadMaxBytes, ReadMaxRows, ReadMinRows, SupportsTriggerAvailableNow,
)

from bkcore.stream.records import DLSN
from bkspark import cluster
from bkspark.offsets import StreamOffset, decode, encode
from bkspark.options import SourceOptions
from bkspark.planning import StreamView, backlog, end_of, find_data_loss, limit_end, offset_after, plan_spans, \
    resolve_start
from bkspark.spans import DataLossError, SpanPartition, read_span
from bkcore.stream.reader import StreamReader

log = logging.getLogger("bkspark")


class StreamSource(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._available_now_end: StreamOffset | None = None   # Trigger.AvailableNow's target
        self._last_batch_at = time.monotonic()                 # for minEntriesPerTrigger's delay

    # -- offsets --------------------------------------------------------------------------------

    def _view(self) -> StreamView:
        return cluster.client(self.options).run(cluster.stream_view, self.options.namespace,
                                                          self.options.stream)

    def initialOffset(self) -> dict:
        view = self._view()
        spec = self.options.starting
        if spec.kind == "txid":
            position = cluster.client(self.options).run(_txid_position, self.options, spec.value)
            return encode(StreamOffset(position, view.ledger_at(position)))
        offset, _ = resolve_start(view, spec)
        return encode(offset)

    def getDefaultReadLimit(self) -> ReadLimit:
        options = self.options
        if options.max_entries_per_trigger:
            return ReadMaxRows(options.max_entries_per_trigger)
        if options.max_bytes_per_trigger:
            return ReadMaxBytes(options.max_bytes_per_trigger)
        if options.min_entries_per_trigger:
            return ReadMinRows(options.min_entries_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now_end = end_of(self._view())

    def reportLatestOffset(self) -> dict:
        return encode(end_of(self._view()))

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        view = self._view()
        begin = self._readable_start(view, decode(start))
        end = end_of(view).position
        if self._available_now_end is not None:
            end = min(end, self._available_now_end.position)
        if end <= begin.position:
            return start
        if not isinstance(limit, ReadAllAvailable):
            if self._should_wait(view, begin.position, end):
                return start
            end = limit_end(view, begin.position, end, entry_count_max=self.options.max_entries_per_trigger,
                            size_max=self.options.max_bytes_per_trigger)
        self._last_batch_at = time.monotonic()
        return encode(offset_after(view, end))

    def _should_wait(self, view: StreamView, start: DLSN, end: DLSN) -> bool:
        """minEntriesPerTrigger: too little new data, and maxTriggerDelay has not passed yet."""
        minimum = self.options.min_entries_per_trigger
        if minimum is None or backlog(view, start, end).entry_count >= minimum:
            return False
        return time.monotonic() - self._last_batch_at < self.options.max_trigger_delay_s

    def _readable_start(self, view: StreamView, start: StreamOffset) -> StreamOffset:
        """`start`, or where reading resumes after truncated data (failOnDataLoss=false)."""
        loss = find_data_loss(view, start)
        if loss is None:
            return start
        message = loss.describe(view, start)
        if self.options.fail_on_data_loss:
            raise DataLossError(f"{message}. Set failOnDataLoss=false to skip lost data with a warning, or restart "
                                f"the query from a new checkpoint")
        log.warning("%s; skipped to %s (failOnDataLoss=false)", message, loss.resume.position)
        return loss.resume

    # -- batches --------------------------------------------------------------------------------

    def partitions(self, start: dict, end: dict) -> list[SpanPartition]:
        view = self._view()
        begin = self._readable_start(view, decode(start))
        finish = decode(end).position
        if finish <= begin.position:
            return []
        spans = plan_spans(view, begin.position, finish, max_entries=self.options.max_entries_per_partition,
                           max_bytes=self.options.max_bytes_per_partition)
        return [SpanPartition(span) for span in spans]

    def read(self, partition: SpanPartition):
        return read_span(self.options, partition.span)

    def commit(self, end: dict) -> None:
        """Everything before `end` is processed: move the cursor just before it."""
        if self.options.cursor is None:
            return
        position = decode(end).position
        consumed = DLSN(position.segment, position.entry_id, position.slot - 1)
        options = self.options

        async def commit_cursor(bk) -> None:
            await bk.streams.commit_cursor(options.namespace, options.stream, options.cursor, consumed)
        cluster.client(options).run(commit_cursor)

    def stop(self) -> None:
        pass


async def _txid_position(bk, options: SourceOptions, txid: int) -> DLSN:
    """The position of the first record with txid >= `txid` (the stream reader's search)."""
    reader = StreamReader(bk, bk.streams.catalog, options.namespace, options.stream)
    return await reader.resolve_start(None, txid=txid)
