"""A Spark data source that reads nothing: rows of the bookkeeper source's own schema, made in
the Python worker from one payload held in memory. `bk bench spark` reads it beside the real
source to show what PySpark's Python data source path itself costs on this machine (Arrow
batches from the worker into the JVM, rows counted there), with no storage, network or
digest in the way. Imports pyspark: load it only where Spark is installed."""

from __future__ import annotations

import os

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from bkspark.arrow_rows import ledger_batch, spark_schema_ddl
from bkspark.read_sizing import ARROW_BATCH_ENTRIES as ROWS_PER_BATCH     # batches as large as the real source's


class _Slice(InputPartition):
    def __init__(self, index: int, rows: int) -> None:
        super().__init__((index, rows))
        self.index, self.rows = index, rows


class _Reader(DataSourceReader):
    def __init__(self, rows: int, partitions: int, size: int) -> None:
        self.rows, self.partition_count, self.size = rows, partitions, size

    def partitions(self) -> list[_Slice]:
        share = -(-self.rows // self.partition_count)
        return [_Slice(i, min(share, self.rows - i * share)) for i in range(self.partition_count)
                if i * share < self.rows]

    def read(self, partition: _Slice):
        payload = os.urandom(self.size)
        for first in range(0, partition.rows, ROWS_PER_BATCH):
            count = min(ROWS_PER_BATCH, partition.rows - first)
            yield ledger_batch(partition.index, first, [payload] * count, "binary")


class CeilingDataSource(DataSource):
    """Options: rows, partitions, size (payload bytes)."""

    @classmethod
    def name(cls) -> str:
        return "bookkeeper-ceiling"

    def schema(self) -> str:
        return spark_schema_ddl("binary")

    def reader(self, schema) -> DataSourceReader:
        return _Reader(int(self.options["rows"]), int(self.options.get("partitions", "10")),
                       int(self.options.get("size", "1024")))
