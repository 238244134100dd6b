"""The "bookkeeper" data source: the DataSource class Spark instantiates, and batch reads.

    spark.read.format("bookkeeper").option("metastore", URI).option("stream", "ns/name").load()
    spark.read.format("bookkeeper").option("metastore", URI).option("ledgers", "1,2,3").load()

The driver plans (bkspark.planning over a StreamView read from the metastore and the LACs of
in-progress segments); each partition is one ReadSpan, read by a Python worker (bkspark.spans,
shared with streaming reads). Comparisons on `txid` and `position` are pushed down: they narrow
the plan and are applied exactly to the records read, so Spark need not evaluate them again.
"""

from __future__ import annotations

from typing import Iterator

from pyspark.sql.datasource import (
    DataSource, DataSourceReader, EqualTo, Filter, GreaterThan, GreaterThanOrEqual, InputPartition, LessThan,
    LessThanOrEqual,
)

from bkcore.stream.records import DLSN
from bkspark import cluster
from bkspark.arrow_rows import format_position, spark_schema_ddl
from bkspark.options import OptionError, SourceOptions, parse_options, require_stream
from bkspark.planning import TXID_MAX, ledger_spans, plan_spans, resolve_end, resolve_start
from bkspark.spans import SpanPartition, read_span


class BookKeeperDataSource(DataSource):
    """Streams, raw ledgers and tables of a pybookkeeper cluster as Spark DataFrames."""

    @classmethod
    def name(cls) -> str:
        return "bookkeeper"

    def __init__(self, options) -> None:
        super().__init__(options)
        self.parsed = parse_options(dict(options))

    def schema(self) -> str:
        if self.parsed.table is not None:
            from bkspark.table_rows import table_schema_ddl
            return table_schema_ddl(self.parsed.value_format)
        return spark_schema_ddl(self.parsed.value_format)

    def reader(self, schema) -> DataSourceReader:
        if self.parsed.table is not None:
            from bkspark.table_source import TableReader
            return TableReader(self.parsed)
        return FilteringBatchReader(self.parsed) if self.parsed.filter_pushdown else BatchReader(self.parsed)

    def streamReader(self, schema):
        from bkspark.stream_source import StreamSource
        require_stream(self.parsed, "spark.readStream")
        return StreamSource(self.parsed)

    def writer(self, schema, overwrite: bool):
        from bkspark.sink import BatchSink
        require_stream(self.parsed, "df.write")
        return BatchSink(self.parsed, schema, overwrite)

    def streamWriter(self, schema, overwrite: bool):
        from bkspark.sink import StreamingSink
        require_stream(self.parsed, "df.writeStream")
        return StreamingSink(self.parsed, schema, overwrite)


class BatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        if options.stream is None and not options.ledgers:
            raise OptionError('say what to read: .option("stream", "namespace/name"), .option("ledgers", "1,2,3") '
                              'or .option("table", "namespace/name")')
        self.options = options
        self.position_min: DLSN | None = None      # from pushed filters: inclusive
        self.position_end: DLSN | None = None      # exclusive
        self.txid_min, self.txid_max = 0, TXID_MAX

    def partitions(self) -> list[SpanPartition]:
        options = self.options
        bk = cluster.client(options)
        if options.stream is None:
            extents = bk.run(cluster.ledger_extents, options.ledgers, options.password)
            return [SpanPartition(s) for s in ledger_spans(extents, max_entries=options.max_entries_per_partition,
                                                           max_bytes=options.max_bytes_per_partition)]
        view = bk.run(cluster.stream_view, options.namespace, options.stream)
        start, txid_min = resolve_start(view, options.starting)
        end, txid_max = resolve_end(view, options.ending)
        start_position = max(start.position, self.position_min or start.position)
        end_position = min(end, self.position_end or end)
        if start_position >= end_position:
            return []
        spans = plan_spans(view, start_position, end_position, max_entries=options.max_entries_per_partition,
                           max_bytes=options.max_bytes_per_partition,
                           txid_min=max(txid_min, self.txid_min), txid_max=min(txid_max, self.txid_max))
        return [SpanPartition(span) for span in spans]

    def read(self, partition: InputPartition) -> Iterator:
        if not isinstance(partition, SpanPartition):
            return iter(())        # nothing was planned: PySpark reads one InputPartition(None)
        return read_span(self.options, partition.span)


class FilteringBatchReader(BatchReader):
    """A BatchReader that takes comparisons on txid and position into its plan. PySpark refuses
    a reader with pushFilters() unless spark.sql.python.filterPushdown.enabled is true, so it
    is chosen by the option filterPushdown=true."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        # Each call carries all of a query's filters: forget any earlier query's.
        self.position_min = self.position_end = None
        self.txid_min, self.txid_max = 0, TXID_MAX
        for pushed in filters:
            if self.options.stream is None or not self._push(pushed):
                yield pushed

    def _push(self, pushed: Filter) -> bool:
        """Take a comparison on txid or position into the plan; False if it cannot be."""
        if not isinstance(pushed, (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)):
            return False
        if pushed.attribute == ("txid",) and type(pushed.value) is int:
            low, high = _bounds(pushed, pushed.value, pushed.value + 1)
            self.txid_min = max(self.txid_min, low if low is not None else 0)
            self.txid_max = min(self.txid_max, high - 1 if high is not None else TXID_MAX)
            return True
        if pushed.attribute == ("position",) and isinstance(pushed.value, str):
            try:
                position = DLSN.parse(pushed.value)
            except ValueError:
                return False
            if format_position(*position) != pushed.value or min(position) < 0:
                return False       # not the column's own form: its string order is not position order
            following = DLSN(position.segment, position.entry_id, position.slot + 1)
            low, high = _bounds(pushed, position, following)
            if low is not None:
                self.position_min = max(self.position_min or low, low)
            if high is not None:
                self.position_end = min(self.position_end or high, high)
            return True
        return False


def _bounds(pushed: Filter, value, following) -> tuple:
    """(inclusive low, exclusive high) of a comparison; None where it sets no bound."""
    if isinstance(pushed, EqualTo):
        return value, following
    if isinstance(pushed, GreaterThan):
        return following, None
    if isinstance(pushed, GreaterThanOrEqual):
        return value, None
    if isinstance(pushed, LessThan):
        return None, value
    return None, following
