"""bkbench.client_processes: the bench's clients spread over processes still do the phase they
are given, all of them, against a real gRPC server (a ceiling server of bkbench.table_ceiling)."""

import pytest

from bkbench.client_processes import ClientProcesses, operation
from bkbench.table_ceiling import CeilingServer
from bkclient.storage_client import StorageClient


def test_clients_spread_over_processes_share_the_work_and_write_distinct_keys():
    with CeilingServer("aio") as server:
        clients = ClientProcesses(2)
        try:
            assert len(set(clients.pids)) == 2
            latencies, errors, elapsed = clients.run(server.address, 3, 0.5, "put", b"v")
        finally:
            clients.close()
        assert errors == 0 and latencies and elapsed >= 0.5
        with StorageClient(server.address) as storage:
            table = storage.table("default", "bench")
            # client indexes 0..2 over the two processes: each wrote its own keys from n = 0
            assert all(table.get(b"key-%d-0" % index).value == b"v" for index in range(3))
            assert table.get(b"key-3-0") is None


def test_an_unknown_operation_is_refused():
    with pytest.raises(ValueError, match="unknown table operation"):
        operation("scan", b"")
