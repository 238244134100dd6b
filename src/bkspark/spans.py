"""Reading one planned span: the Arrow record batches of a ReadSpan, read by a Spark Python
worker. Batch reads (bkspark.source) and streaming reads (bkspark.stream_source) both plan
partitions of SpanPartition and read them here.

What it owns: SpanPartition, read_span (batched entry reads, a few MiB at a time, the next few
already on their way while one is decoded, straight into Arrow record batches), and what a span
whose ledger was deleted since planning becomes: DataLossError (failOnDataLoss=true) or a
warning and nothing (failOnDataLoss=false).
"""

from __future__ import annotations

import logging
from typing import Iterator

from pyspark.sql.datasource import InputPartition

from bkspark import cluster
from bkspark.arrow_rows import LedgerRows, StreamRows
from bkspark.options import SourceOptions
from bkspark.planning import ReadSpan
from bkspark.read_sizing import is_batch_full, read_range

log = logging.getLogger("bkspark")


class DataLossError(RuntimeError):
    """Records a query should have read were truncated first (failOnDataLoss=true)."""


class SpanPartition(InputPartition):
    def __init__(self, span: ReadSpan) -> None:
        super().__init__(span)
        self.span = span


# Reads one partition keeps in flight (at most; and about read_sizing.READ_AHEAD_BYTES of them):
# each is a batch read of one bookie, so several keep the whole ensemble busy while the worker
# decodes. Reads of 1 KiB entries are 1 MiB each: 32 of them.
READS_IN_FLIGHT = 32


def read_span(options: SourceOptions, span: ReadSpan) -> Iterator:
    """The Arrow record batches of one span. Reads are on their way while a batch is decoded,
    each of about READ_BYTES_TARGET bytes (readBatchEntries entries at most), about
    READ_AHEAD_BYTES of them (READS_IN_FLIGHT at most), and batches go to Spark a few reads'
    worth at a time (bkspark.read_sizing). A
    ledger deleted since planning fails the task (failOnDataLoss=true) or is skipped with a
    warning."""
    bk = cluster.client(options)
    handle = bk.run(cluster.open_span, span, options.password)
    if handle is None:
        _on_lost_ledger(options, span)
        return
    reads = read_range(bk, handle, span.first_entry_id, span.last_entry_id, entries_max=options.read_batch_entries,
                       in_flight_max=READS_IN_FLIGHT)
    rows = LedgerRows(span.ledger_id, span.first_entry_id) if span.stream is None else StreamRows(span)
    entry_count = size = 0
    for first, payloads in reads:
        if payloads is None:
            _on_lost_ledger(options, span)
            return
        rows.add(first, payloads)
        entry_count += len(payloads)
        size += sum(map(len, payloads))
        if is_batch_full(entry_count, size) or first + len(payloads) > span.last_entry_id:
            yield rows.take_batch(options.value_format)
            entry_count = size = 0


def _on_lost_ledger(options: SourceOptions, span: ReadSpan) -> None:
    what = f"segment {span.seqno} of stream {span.stream}" if span.stream else "the ledger"
    message = (f"ledger {span.ledger_id} ({what}, entries {span.first_entry_id}-{span.last_entry_id}) was deleted "
               f"before it was read")
    if options.fail_on_data_loss:
        raise DataLossError(f"{message}; its records are lost. Set failOnDataLoss=false to skip lost data "
                            f"with a warning instead")
    log.warning("%s; skipped (failOnDataLoss=false)", message)
