"""Batch reads of table snapshots:

    spark.read.format("bookkeeper").option("metastore", URI).option("table", "namespace/name").load()

One partition per hash range of the table that has a journal (a range is the unit a table's
state is kept and replayed in, so splitting one further would replay it twice). The driver
plans a cut per range (bkspark.table_snapshot: the journal's confirmed end and the time TTLs
are judged at); each task rebuilds its range's state as of that cut and yields the live keys in
key order as Arrow record batches of at most ROWS_PER_BATCH rows (bkspark.table_rows).
"""

from __future__ import annotations

import time
from typing import Iterator

from pyspark.sql.datasource import DataSourceReader, InputPartition

from bkspark import cluster
from bkspark.options import SourceOptions
from bkspark.table_rows import table_batch
from bkspark.table_snapshot import RangeCut, plan_cuts, read_cut

ROWS_PER_BATCH = 10_000


class RangePartition(InputPartition):
    def __init__(self, cut: RangeCut) -> None:
        super().__init__(cut)
        self.cut = cut


class TableReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        assert options.table is not None
        self.options = options

    def partitions(self) -> list[RangePartition]:
        options = self.options
        bk = cluster.client(options)
        cuts = bk.run(plan_cuts, options.namespace, options.table, now_ms=int(time.time() * 1000))
        return [RangePartition(cut) for cut in cuts]

    def read(self, partition: RangePartition) -> Iterator:
        if not isinstance(partition, RangePartition):
            return       # no range has a journal: PySpark reads one InputPartition(None) instead of none
        options, cut = self.options, partition.cut
        snapshot = read_cut(cluster.client(options), cut, chunk_entries=options.read_batch_entries)
        for first in range(0, len(snapshot.kvs), ROWS_PER_BATCH):
            yield table_batch(cut.table, cut.range_id, snapshot.revision,
                              snapshot.kvs[first:first + ROWS_PER_BATCH], options.value_format)
