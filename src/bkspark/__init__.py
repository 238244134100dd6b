"""bkspark: pybookkeeper as a PySpark data source ("bookkeeper"), on pyspark.sql.datasource.

Modules, each owning one thing:
    options        the source's and sink's options, parsed and checked
    offsets        offset JSON (position + ledger id) and startingOffsets/endingOffsets specs
    planning       Spark-free planning: segment extents, spans, data loss, admission control
    arrow_rows     entries decoded into pyarrow RecordBatches (the format is bkcore's)
    cluster        blocking calls into the store from Spark's threads and workers
    source         the DataSource class and batch reads
    spans          reading one planned span into record batches (batch and streaming reads)
    stream_source  structured streaming reads (offsets, admission control, cursors)
    sink           batch and streaming writes, exactly once
    table_snapshot a table range's state as of a journal position, rebuilt from its journal
    table_rows     table snapshot rows as pyarrow RecordBatches
    table_source   batch reads of table snapshots (one partition per range)

Register with `bkspark.register(spark)`; with pyspark 4.2+ the source is also found
automatically through the `pyspark_bookkeeper` module (Spark looks for pyspark_* modules with a
DefaultSource when it first needs a Python data source).
"""

from __future__ import annotations


def register(spark) -> None:
    """Make format("bookkeeper") available in `spark` (a SparkSession)."""
    from bkspark.source import BookKeeperDataSource
    spark.dataSource.register(BookKeeperDataSource)
