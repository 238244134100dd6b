"""The table workload: four clients doing put / get / compare-and-set (a txn comparing the
key's version, then putting) on a few register keys, and increment / get on counter keys,
against several stream storage servers sharing the table (the nemesis kills, pauses and cuts
them off from the metastore, so ranges move between them).

put, get and increment go through the library (bk.open_table); the txn goes straight to the
gRPC TableService with BookKeeper's TxnRequest, since the library's table has no txn call.
A call that errors or times out has an unknown outcome, except reads, which cannot change
anything and are recorded as failed. After healing, a "final" client reads every key (with
retries) so that counter totals can be judged.
"""

from __future__ import annotations

import random

import trio

import bkclient
from bkjepsen.history import History
from bkjepsen.workload_stream import prepare_stream

NAMESPACE, STREAM = "default", "jepsen-table"
REGISTERS = [f"r{i}" for i in range(4)]
COUNTERS = [f"n{i}" for i in range(2)]
CLIENT_COUNT = 4
OP_TIMEOUT_S = 10.0
# The library raises this before sending anything (no server registered): the call did not happen.
NOT_SENT_TEXT = "no stream storage server is running"


class TableWorkload:
    def __init__(self, history: History, rng: random.Random, cluster) -> None:
        self.history, self.rng = history, rng
        # The txn goes to any server (one that does not own the key's range forwards it).
        self.server_addresses = cluster.stream_storage_addresses
        self._txn_stubs: dict[str, object] = {}

    async def prepare(self, uri: str) -> None:
        await prepare_stream(uri, NAMESPACE, STREAM)

    async def run(self, uri: str, duration_s: float) -> None:
        deadline = trio.current_time() + duration_s
        async with bkclient.connect(uri) as bk:
            table = await bk.open_table(f"{NAMESPACE}/{STREAM}")
            try:
                async with trio.open_nursery() as nursery:
                    for index in range(CLIENT_COUNT):
                        nursery.start_soon(self._client, table, f"client-{index + 1}",
                                           random.Random(self.rng.random()), deadline)
            finally:
                table.close()

    async def _client(self, table, process: str, rng: random.Random, deadline: float) -> None:
        for sequence in range(1_000_000):
            if trio.current_time() >= deadline:
                return
            if rng.random() < 0.3:
                key = rng.choice(COUNTERS)
                if rng.random() < 0.7:
                    await self._incr(table, process, key, rng.randrange(1, 4))
                else:
                    await self._get(table, process, key)
            else:
                key = rng.choice(REGISTERS)
                choice = rng.random()
                if choice < 0.3:
                    await self._put(table, process, key, f"{process}-{sequence}")
                elif choice < 0.6:
                    await self._get(table, process, key)
                else:
                    await self._cas(table, process, key, rng.randrange(0, 6), f"{process}-{sequence}")
            await trio.sleep(rng.uniform(0, 0.01))

    async def _call(self, op, call, *, is_read: bool):
        """Run a blocking library or gRPC call in a thread; errors leave the outcome unknown
        (or failed, for reads). Returns (True, answer) when it answered."""
        try:
            with trio.fail_after(OP_TIMEOUT_S + 5):
                return True, await call()
        except Exception as exc:     # noqa: BLE001 - any error of a call: the outcome is not known
            was_sent = not (isinstance(exc, ConnectionError) and NOT_SENT_TEXT in str(exc))
            (self.history.unknown if was_sent and not is_read else self.history.fail)(op, exc)
            return False, None

    async def _put(self, table, process: str, key: str, value: str) -> None:
        op = self.history.invoke(process, "put", key, value)
        answered, prev = await self._call(op, lambda: table.put(key.encode(), value.encode()), is_read=False)
        if answered:
            self.history.ok(op, [prev.value.decode(), _register_version(prev)] if prev is not None else [None, 0])

    async def _get(self, table, process: str, key: str) -> None:
        op = self.history.invoke(process, "get", key)
        answered, kv = await self._call(op, lambda: table.get(key.encode()), is_read=True)
        if answered:
            self.history.ok(op, _observed(key, kv))

    async def _incr(self, table, process: str, key: str, amount: int) -> None:
        op = self.history.invoke(process, "incr", key, amount)
        answered, total = await self._call(op, lambda: table.increment(key.encode(), amount), is_read=False)
        if answered:
            self.history.ok(op, total)

    async def _cas(self, table, process: str, key: str, expected_version: int, value: str) -> None:
        op = self.history.invoke(process, "cas", key, [expected_version, value])
        address = self.rng.choice(self.server_addresses)
        answered, succeeded = await self._call(
            op, lambda: trio.to_thread.run_sync(self._txn, address, key.encode(), expected_version, value.encode()),
            is_read=False)
        if answered:
            self.history.ok(op, succeeded)

    def _txn(self, address: str, key: bytes, expected_version: int, value: bytes) -> bool:
        """At the server at `address`, compare the key's version, put on success (runs in a
        worker thread). Version 0 (no
        key) is BookKeeper's compare-and-create, a compare with no value; comparing another
        version of a missing key fails (BookKeeper answers KEY_NOT_FOUND)."""
        import grpc
        from bookkeeper.proto import kv_rpc_pb2, kv_rpc_pb2_grpc, storage_pb2

        from bkcore.stream.segments import stream_id_of
        stub = self._txn_stubs.get(address)
        if stub is None:
            stub = self._txn_stubs[address] = kv_rpc_pb2_grpc.TableServiceStub(grpc.insecure_channel(address))
        header = kv_rpc_pb2.RoutingHeader(stream_id=stream_id_of(NAMESPACE, STREAM), r_key=key)
        if expected_version == 0:
            compare = kv_rpc_pb2.Compare(target=kv_rpc_pb2.Compare.VALUE, result=kv_rpc_pb2.Compare.EQUAL, key=key)
        else:
            compare = kv_rpc_pb2.Compare(target=kv_rpc_pb2.Compare.VERSION, result=kv_rpc_pb2.Compare.EQUAL,
                                         key=key, version=expected_version - 1)
        request = kv_rpc_pb2.TxnRequest(
            header=header,
            compare=[compare],
            success=[kv_rpc_pb2.RequestOp(request_put=kv_rpc_pb2.PutRequest(key=key, value=value, header=header))])
        answer = stub.Txn(request, timeout=OP_TIMEOUT_S)
        if answer.header.code == storage_pb2.KEY_NOT_FOUND:
            return False
        if answer.header.code != storage_pb2.SUCCESS:
            raise ConnectionError(f"txn answered {storage_pb2.StatusCode.Name(answer.header.code)}")
        return answer.succeeded

    async def final_check(self, uri: str) -> None:
        async with bkclient.connect(uri) as bk:
            table = await bk.open_table(f"{NAMESPACE}/{STREAM}")
            try:
                for key in COUNTERS + REGISTERS:
                    for attempt in range(10):
                        op = self.history.invoke("final", "get", key)
                        answered, kv = await self._call(op, lambda: table.get(key.encode()), is_read=True)
                        if answered:
                            self.history.ok(op, _observed(key, kv))
                            break
                        await trio.sleep(1.0 + attempt)
            finally:
                table.close()
            self._txn_stubs.clear()


def _observed(key: str, kv):
    """What a get saw: a counter's number, or a register's [value, version] ([None, 0]: absent)."""
    if key in COUNTERS:
        return kv.number_value if kv is not None else 0
    return [kv.value.decode(), _register_version(kv)] if kv is not None else [None, 0]


def _register_version(kv) -> int:
    """The checker's register counts a key's versions from 1 (0: absent); BookKeeper from 0."""
    return kv.version + 1
