"""The row server that stores nothing (bkbench.tcp_rows) and the no-op source that reads its rows
over TCP (bkbench.spark_ceiling, option tcpRows): the peer `bk bench spark` times beside the
real reads."""

import pyarrow as pa
import pytest

from bkbench.tcp_rows import RowServer, receive_rows
from bkspark.arrow_rows import arrow_schema

pytest.importorskip("pyspark.sql.datasource")
from bkbench.spark_ceiling import _Reader, fixed_size_rows  # noqa: E402 - needs pyspark


@pytest.fixture(scope="module")
def row_server():
    with RowServer.started() as server:
        yield server


def test_rows_arrive_whole_in_buffers_of_the_batch_size(row_server):
    batches = list(receive_rows(row_server.address, count=2_500, size=1000, batch_rows=1024))
    assert [count for _, count in batches] == [1024, 1024, 452]
    assert [len(buffer) for buffer, _ in batches] == [1024 * 1000, 1024 * 1000, 452 * 1000]
    received = b"".join(bytes(buffer) for buffer, _ in batches)
    # The server sends one pattern (bytes 0..255 over and over) from the start of each chunk.
    assert received[:1000] == bytes(range(256)) * 3 + bytes(range(232))
    assert len(received) == 2_500_000


def test_the_server_serves_rows_of_any_size(row_server):
    for size in (1, 4096, 70_000):
        assert sum(count for _, count in receive_rows(row_server.address, count=33, size=size, batch_rows=8)) == 33


def test_fixed_size_rows_are_values_over_the_buffer_itself():
    buffer = bytearray(b"aaabbbccc")
    values = fixed_size_rows(buffer, 3, 3)
    assert values.to_pylist() == [b"aaa", b"bbb", b"ccc"]
    buffer[3:6] = b"xyz"                    # a view, not a copy
    assert values[1].as_py() == b"xyz"


def test_the_tcp_source_yields_the_received_rows_as_the_ledger_source_shapes_them(row_server):
    reader = _Reader(5_000, 2, 1024, 2048, row_server.address)
    partitions = reader.partitions()
    assert [partition.rows for partition in partitions] == [2500, 2500]
    batches = list(reader.read(partitions[1]))
    assert [batch.num_rows for batch in batches] == [2048, 452]
    assert all(batch.schema == arrow_schema("binary") for batch in batches)
    entry_ids = pa.concat_arrays([batch.column("entry_id") for batch in batches]).to_pylist()
    assert entry_ids == list(range(2500))
    assert {batch.column("ledger_id")[0].as_py() for batch in batches} == {1}
    assert batches[0].column("payload")[0].as_py() == (bytes(range(256)) * 4)[:1024]
