"""A Spark data source that reads and writes nothing. Reading gives rows of the bookkeeper
source's own schema, made in the Python worker from one payload held in memory; writing takes
each task's Arrow batches and drops them. `bk bench spark` uses it beside the real source and
sink to show what PySpark's Python data source path itself costs on this machine (Arrow batches
between the JVM and the workers), with no storage, network or digest in the way.

With option tcpRows (host:port of a bkbench.tcp_rows server) each partition receives its rows'
bytes from that server over TCP instead, and its payload column is an Arrow array over the
bytes received (no copy): the least a source that reads over the network must do, with no
storage, framing or digest in the way. Imports pyspark: load it only where Spark is installed."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceReader, InputPartition, \
    WriterCommitMessage

from bkbench.tcp_rows import receive_rows
from bkspark.arrow_rows import ledger_batch, row_numbers, spark_schema_ddl
from bkspark.read_sizing import ARROW_BATCH_ENTRIES as ROWS_PER_BATCH


def fixed_size_rows(buffer, count: int, size: int) -> pa.Array:
    """A binary array of `count` values of `size` bytes each, over `buffer` as it is (no copy)."""
    offsets = pc.multiply(row_numbers(count + 1, 0, pa.int32()), pa.scalar(size, pa.int32()))
    return pa.Array.from_buffers(pa.binary(), count, [None, offsets.buffers()[1], pa.py_buffer(buffer)])


class _Slice(InputPartition):
    def __init__(self, index: int, rows: int) -> None:
        super().__init__((index, rows))
        self.index, self.rows = index, rows


class _Reader(DataSourceReader):
    def __init__(self, rows: int, partitions: int, size: int, rows_per_batch: int, tcp_rows: str = "") -> None:
        self.rows, self.partition_count, self.size, self.rows_per_batch = rows, partitions, size, rows_per_batch
        self.tcp_rows = tcp_rows

    def partitions(self) -> list[_Slice]:
        share = -(-self.rows // self.partition_count)
        return [_Slice(i, min(share, self.rows - i * share)) for i in range(self.partition_count)
                if i * share < self.rows]

    def read(self, partition: _Slice):
        if self.tcp_rows:
            first = 0
            for buffer, count in receive_rows(self.tcp_rows, count=partition.rows, size=self.size,
                                              batch_rows=self.rows_per_batch):
                yield ledger_batch(partition.index, first, fixed_size_rows(buffer, count, self.size), "binary")
                first += count
            return
        payload = os.urandom(self.size)
        for first in range(0, partition.rows, self.rows_per_batch):
            count = min(self.rows_per_batch, partition.rows - first)
            yield ledger_batch(partition.index, first, [payload] * count, "binary")


class _Discard(DataSourceArrowWriter):
    def write(self, iterator) -> WriterCommitMessage:
        for _batch in iterator:
            pass
        return WriterCommitMessage()

    def commit(self, messages: list) -> None:
        pass

    def abort(self, messages: list) -> None:
        pass


class CeilingDataSource(DataSource):
    """Reads: options rows, partitions, size (payload bytes), rowsPerBatch (by default as many as
    the real source puts in a batch of small entries), tcpRows (the rows' bytes come from a
    bkbench.tcp_rows server at this host:port). Writes: any rows, dropped."""

    @classmethod
    def name(cls) -> str:
        return "bookkeeper-ceiling"

    def schema(self) -> str:
        return spark_schema_ddl("binary")

    def reader(self, schema) -> DataSourceReader:
        return _Reader(int(self.options["rows"]), int(self.options.get("partitions", "10")),
                       int(self.options.get("size", "1024")), int(self.options.get("rowsPerBatch", ROWS_PER_BATCH)),
                       self.options.get("tcpRows", ""))

    def writer(self, schema, overwrite: bool) -> DataSourceArrowWriter:
        return _Discard()
