"""The row server that stores nothing (bkbench.tcp_rows) and the no-op sources that read its rows
or its packed entries over TCP (bkbench.spark_ceiling, options tcpRows and tcpEntries): the peers
`bk bench spark` times beside the real reads."""

import pyarrow as pa
import pytest

from bkbench.tcp_rows import ENTRY_LEDGER_ID, ENTRY_OVERHEAD_SIZE, RowServer, receive_entries, receive_rows
from bkcore.digest import ENTRY_HEADER
from bkcore.errors import DigestMismatch
from bkspark.arrow_rows import arrow_schema

pytest.importorskip("pyspark.sql.datasource")
from bkbench.spark_ceiling import _Reader, checked_payloads, fixed_size_rows  # noqa: E402 - needs pyspark


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


def test_entries_arrive_packed_in_batches_that_each_start_at_entry_zero(row_server):
    batches = list(receive_entries(row_server.address, count=2_500, size=100, batch_rows=1024))
    assert [count for _, count in batches] == [1024, 1024, 452]
    entry_size = 100 + ENTRY_OVERHEAD_SIZE
    assert [len(buffer) for buffer, _ in batches] == [count * entry_size for count in (1024, 1024, 452)]
    for buffer, count in batches:
        first, last = ENTRY_HEADER.unpack_from(buffer), ENTRY_HEADER.unpack_from(buffer, (count - 1) * entry_size)
        assert first[:2] == (ENTRY_LEDGER_ID, 0) and last[:2] == (ENTRY_LEDGER_ID, count - 1)
        assert checked_payloads(buffer, count, 100) == [bytes(range(100))] * count


@pytest.mark.parametrize("where", ["payload", "digest", "entry id"])
def test_a_damaged_entry_fails_its_check(row_server, where):
    (buffer, count), = receive_entries(row_server.address, count=10, size=64, batch_rows=10)
    entry_size = 64 + ENTRY_OVERHEAD_SIZE
    offset = 7 * entry_size + {"payload": ENTRY_OVERHEAD_SIZE + 5, "digest": ENTRY_HEADER.size, "entry id": 15}[where]
    buffer[offset] ^= 0x01
    with pytest.raises(DigestMismatch):
        checked_payloads(buffer, count, 64)


def test_the_entries_source_yields_the_checked_payloads_as_the_ledger_source_shapes_them(row_server):
    reader = _Reader(3_000, 1, 1024, 2048, tcp_entries=row_server.address)
    batches = list(reader.read(reader.partitions()[0]))
    assert [batch.num_rows for batch in batches] == [2048, 952]
    assert all(batch.schema == arrow_schema("binary") for batch in batches)
    entry_ids = pa.concat_arrays([batch.column("entry_id") for batch in batches]).to_pylist()
    assert entry_ids == list(range(3000))
    assert set(pa.concat_arrays([batch.column("payload") for batch in batches]).to_pylist()) == \
        {(bytes(range(256)) * 4)[:1024]}
