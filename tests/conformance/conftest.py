"""The table conformance suite's world: one real cluster per test module (a raft-lite node,
three bookies and `bk stream-storage`, as real processes), and the clients BookKeeper users
have: the stock `apache-bookkeeper-client` (its kv and admin clients, and its generated stubs
for what those do not send, such as txns and ranges) and our `bk table`.

Each test gets a table of its own, created through the stock admin client with its default
settings (__DEFAULT_TABLE_CONF__: 4 ranges) in the namespace NAMESPACE.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from dataclasses import dataclass

import grpc
import pytest

pytest.importorskip("bookkeeper", reason="the grpc extra (apache-bookkeeper-client) is not installed")

from bookkeeper import admin, kv  # noqa: E402
from bookkeeper.proto import kv_rpc_pb2, kv_rpc_pb2_grpc  # noqa: E402

from bkcli.main import main as bk_main  # noqa: E402
from bkcore.table.watch_rpc import ERROR_MESSAGE_HEADER  # noqa: E402
from bklocal.standalone import StandaloneCluster  # noqa: E402

NAMESPACE = "conformance"
SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src")


@dataclass
class Server:
    cluster: StandaloneCluster
    channel: grpc.Channel
    namespace: str = NAMESPACE        # where the tests' tables are

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.cluster.stream_storage_port}"

    @property
    def settings(self) -> tuple:
        """The stock clients' storage_client_settings."""
        return (f"bk://{self.address}",)

    def admin(self) -> admin.Client:
        return admin.Client(storage_client_settings=self.settings)

    def kv_table(self, name: str, namespace: str = NAMESPACE):
        return kv.Client(storage_client_settings=self.settings, namespace=namespace).table(name)

    def call(self, method: str, request):
        """A TableService call through the stock package's stub: (response, the refusal's
        reason the server gave in the trailing metadata, "" if none)."""
        stub = kv_rpc_pb2_grpc.TableServiceStub(self.channel)
        response, call = getattr(stub, method).with_call(request, timeout=30)
        reasons = [value.decode() for key, value in call.trailing_metadata() or () if key == ERROR_MESSAGE_HEADER]
        return response, "".join(reasons)

    def bk(self, *argv: str) -> tuple[int, str, str]:
        """`bk -s ADDRESS <argv>` in this process: (exit code, stdout, stderr)."""
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = bk_main(["-s", self.address, *argv])
        return code, out.getvalue(), err.getvalue()

    def bk_process(self, *argv: str) -> subprocess.CompletedProcess:
        """`bk -s ADDRESS <argv>` as its own process, as a user runs it."""
        return subprocess.run([sys.executable, "-m", "bkcli.main", "-s", self.address, *argv],
                              capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC}, timeout=60)


@pytest.fixture(scope="module")
def server(stream_storage_cluster):
    with grpc.insecure_channel(f"127.0.0.1:{stream_storage_cluster.stream_storage_port}") as channel:
        served = Server(stream_storage_cluster, channel)
        served.admin().namespaces().create(NAMESPACE)
        yield served


@dataclass
class Table:
    """A fresh table: its name, the stock client's Table, and routing headers for stubs."""

    server: Server
    name: str
    kv: object
    stream_id: int

    @property
    def cli_name(self) -> str:
        return f"{NAMESPACE}/{self.name}"

    def header(self, r_key: bytes) -> kv_rpc_pb2.RoutingHeader:
        return kv_rpc_pb2.RoutingHeader(stream_id=self.stream_id, r_key=r_key)

    def call(self, method: str, request):
        return self.server.call(method, request)

    def get(self, key: bytes, *, pkey: bytes | None = None):
        """The stub's RangeRequest for one key: its KeyValue or None."""
        response, _ = self.call("Range", kv_rpc_pb2.RangeRequest(key=key, header=self.header(pkey or key)))
        return response.kvs[0] if response.kvs else None


@pytest.fixture
def table(server, request) -> Table:
    name = "t_" + re.sub(r"[^a-z0-9]+", "_", request.node.name.lower())[-60:]
    props = server.admin().namespace(NAMESPACE).create(name)       # the stock default table conf
    return Table(server, name, server.kv_table(name), props.stream_id)
