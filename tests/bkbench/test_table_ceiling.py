"""The ceiling servers of `bk bench table --ceiling` answer the client the bench uses."""

import pytest

from bkbench.cpu_usage import process_cpu_s
from bkbench.table_ceiling import CEILING_KINDS, CeilingServer
from bkclient.storage_client import StorageClient


@pytest.mark.parametrize("kind", CEILING_KINDS)
def test_a_ceiling_server_keeps_what_is_put(kind):
    with CeilingServer(kind) as server, StorageClient(server.address) as client:
        table = client.table("default", "bench")
        assert table.put(b"k", b"v1") is None
        assert table.put(b"k", b"v2").value == b"v1"
        assert table.get(b"k").value == b"v2"
        assert table.get(b"missing") is None
        assert process_cpu_s(server.pid) > 0


def test_one_call_at_a_time_times_the_puts_and_gets_it_makes():
    from bkbench.storage import _aio_one_at_a_time
    with CeilingServer("trio_grpc") as server:
        result = _aio_one_at_a_time(server.address)
        with StorageClient(server.address) as client:
            kept = client.table("default", "bench").get(b"watched")
    assert result["samples"] == 300
    assert 0 < result["put_p50_ms"] <= result["put_p99_ms"]
    assert 0 < result["get_p50_ms"] <= result["get_p99_ms"]
    assert kept.value == b"lone-299"        # the puts reached the server, the last one last
