"""A Spark data source that reads and writes nothing. Reading gives rows of the bookkeeper
source's own schema, made in the Python worker from one payload held in memory; writing takes
each task's Arrow batches and drops them. `bk bench spark` uses it beside the real source and
sink to show what PySpark's Python data source path itself costs on this machine (Arrow batches
between the JVM and the workers), with no storage, network or digest in the way.

With option tcpRows (host:port of a bkbench.tcp_rows server) each partition receives its rows'
bytes from that server over TCP instead, and its payload column is an Arrow array over the
bytes received (no copy): the least a source that reads over the network must do, with no
storage, framing or digest in the way.

With option tcpEntries (host:port of the same server) the bytes are packed BookKeeper entries
instead (bkbench.tcp_rows.receive_entries): each partition splits them, checks every entry's
ids and CRC32C digest and takes the payloads out with the ledger client's own code
(Digester.unpack_payloads, as a batch read's answer is checked), then builds the batch as the
ledger source does: the least a source that reads BookKeeper entries must do, with no bookie,
index or framing in the way. Imports pyspark: load it only where Spark is installed."""

from __future__ import annotations

import os
import struct

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceReader, InputPartition, \
    WriterCommitMessage

from bkbench.tcp_rows import ENTRY_DIGESTER, ENTRY_OVERHEAD_SIZE, receive_entries, receive_rows
from bkspark.arrow_rows import ledger_batch, row_numbers, spark_schema_ddl
from bkspark.read_sizing import ARROW_BATCH_ENTRIES as ROWS_PER_BATCH


def fixed_size_rows(buffer, count: int, size: int) -> pa.Array:
    """A binary array of `count` values of `size` bytes each, over `buffer` as it is (no copy)."""
    offsets = pc.multiply(row_numbers(count + 1, 0, pa.int32()), pa.scalar(size, pa.int32()))
    return pa.Array.from_buffers(pa.binary(), count, [None, offsets.buffers()[1], pa.py_buffer(buffer)])


def checked_payloads(buffer, count: int, size: int) -> list[bytes]:
    """The payloads of entries 0..count-1 of bkbench.tcp_rows' ledger, packed back to back in
    `buffer` with payloads of `size` bytes: split into one bytes object each (as a batch read's
    answer arrives), then checked and unpacked as the ledger client checks a batch read's
    answer. A bad entry raises its DigestMismatch."""
    bodies = list(struct.unpack(f"{ENTRY_OVERHEAD_SIZE + size}s" * count, buffer))
    payloads, error = ENTRY_DIGESTER.unpack_payloads(bodies, 0)
    if error is not None:
        raise error
    return payloads


class _Slice(InputPartition):
    def __init__(self, index: int, rows: int) -> None:
        super().__init__((index, rows))
        self.index, self.rows = index, rows


class _Reader(DataSourceReader):
    def __init__(self, rows: int, partitions: int, size: int, rows_per_batch: int, tcp_rows: str = "",
                 tcp_entries: str = "") -> None:
        self.rows, self.partition_count, self.size, self.rows_per_batch = rows, partitions, size, rows_per_batch
        self.tcp_rows, self.tcp_entries = tcp_rows, tcp_entries

    def partitions(self) -> list[_Slice]:
        share = -(-self.rows // self.partition_count)
        return [_Slice(i, min(share, self.rows - i * share)) for i in range(self.partition_count)
                if i * share < self.rows]

    def read(self, partition: _Slice):
        if self.tcp_rows or self.tcp_entries:
            yield from self._received(partition)
            return
        payload = os.urandom(self.size)
        for first in range(0, partition.rows, self.rows_per_batch):
            count = min(self.rows_per_batch, partition.rows - first)
            yield ledger_batch(partition.index, first, [payload] * count, "binary")

    def _received(self, partition: _Slice):
        """The partition's rows from the row server: as they are (tcpRows), or as entries, each
        checked (tcpEntries)."""
        size = self.size
        if self.tcp_rows:
            buffers = receive_rows(self.tcp_rows, count=partition.rows, size=size, batch_rows=self.rows_per_batch)
            payloads_of = fixed_size_rows
        else:
            buffers = receive_entries(self.tcp_entries, count=partition.rows, size=size, batch_rows=self.rows_per_batch)
            payloads_of = checked_payloads
        first = 0
        for buffer, count in buffers:
            yield ledger_batch(partition.index, first, payloads_of(buffer, count, size), "binary")
            first += count


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
    bkbench.tcp_rows server at this host:port), tcpEntries (the rows come from that server as
    packed BookKeeper entries, each checked). Writes: any rows, dropped."""

    @classmethod
    def name(cls) -> str:
        return "bookkeeper-ceiling"

    def schema(self) -> str:
        return spark_schema_ddl("binary")

    def reader(self, schema) -> DataSourceReader:
        return _Reader(int(self.options["rows"]), int(self.options.get("partitions", "10")),
                       int(self.options.get("size", "1024")), int(self.options.get("rowsPerBatch", ROWS_PER_BATCH)),
                       self.options.get("tcpRows", ""), self.options.get("tcpEntries", ""))

    def writer(self, schema, overwrite: bool) -> DataSourceArrowWriter:
        return _Discard()
