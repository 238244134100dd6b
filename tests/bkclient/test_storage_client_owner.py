"""bkclient.storage_client.TableClient and the owner a server names in a refusal (bk-owner): a
thick client's table (owner_only) raises NotOwner with it, for its router to follow; a plain
client, which asked to be forwarded, gets the transient StorageError it retries, as the stock
client does."""

import pytest
from bookkeeper.proto import kv_rpc_pb2, storage_pb2

from bkclient.storage_client import StorageClient, StorageError
from bkcore.table.ownership import NotOwner
from bkcore.table.watch_rpc import ERROR_MESSAGE_HEADER, OWNER_HEADER, OWNER_ONLY_HEADER


class _Refusing(StorageClient):
    """Answers every call as a server that does not own the range: INTERNAL_SERVER_ERROR, the
    reason, and the owner (it sends nothing anywhere; what is under test is the client's reading
    of the answer)."""

    def __init__(self) -> None:
        self.server = "test"
        self._channel = None
        self.sent_metadata = []

    def _call_with_trailing(self, method, request, metadata=()):
        self.sent_metadata.append(tuple(metadata))
        header = kv_rpc_pb2.ResponseHeader(code=storage_pb2.INTERNAL_SERVER_ERROR)
        return kv_rpc_pb2.PutResponse(header=header), {ERROR_MESSAGE_HEADER: "range 0 of table default/t is served "
                                                                             "by 127.0.0.1:9", OWNER_HEADER: "127.0.0.1:9"}


@pytest.fixture
def client(monkeypatch):
    monkeypatch.setattr("bkclient.storage_client.kv_rpc_pb2_grpc.TableServiceStub", lambda channel: type(
        "Stub", (), {"Put": None, "Range": None, "Increment": None, "Delete": None})())
    return _Refusing()


def test_a_thick_clients_table_is_told_the_owner(client):
    table = client.table("default", "t", owner_only=True)
    with pytest.raises(NotOwner) as refused:
        table.put(b"k", b"v")
    assert refused.value.owner == "127.0.0.1:9" and "put on table default/t" in str(refused.value)
    assert (OWNER_ONLY_HEADER, "1") in client.sent_metadata[-1]


def test_a_plain_table_gets_the_transient_error_and_sends_no_owner_only_header(client):
    table = client.table("default", "t")
    with pytest.raises(StorageError) as refused:
        table.put(b"k", b"v")
    assert refused.value.status_name == "INTERNAL_SERVER_ERROR" and "served by 127.0.0.1:9" in str(refused.value)
    assert all(key != OWNER_ONLY_HEADER for key, _ in client.sent_metadata[-1])
