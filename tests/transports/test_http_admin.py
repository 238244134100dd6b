"""The bookie's HTTP admin endpoint over real TCP."""

import json

import pytest
import trio

import bkclient
from inprocess_cluster import free_port

URI = "memory://http"


async def http_get(port: int, path: str, *, method: str = "GET") -> tuple[int, str]:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    data = b""
    while chunk := await stream.receive_some(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body.decode()


@pytest.fixture
async def bookies(start_cluster):
    cluster = await start_cluster(URI, 0)
    for _ in range(3):
        await cluster.add_bookie(http_port=free_port())
    return cluster.bookies


async def test_endpoints(bookies, monkeypatch):
    server = bookies[0].server
    assert server.http_port
    async with bkclient.connect(URI) as bk:
        ledger = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=3, password=b"pw")
        await ledger.add_many([b"x"] * 20)
    await server.checkpoint()
    assert await http_get(server.http_port, "/heartbeat") == (200, "OK\n")
    status, text = await http_get(server.http_port, "/metrics")
    assert status == 200
    lines = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    assert int(lines["bookie_adds_ok_count"]) == 20
    assert int(lines['bookie_journal_write_seconds_bucket{le="+Inf"}']) >= 1
    assert int(lines["bookie_add_request_seconds_count"]) >= 1      # 20 adds, coalesced in batches
    assert int(lines["bookie_server_checkpoints"]) >= 1
    assert int(lines["bookie_read_ahead_entries_count"]) == 0          # nothing read from a log yet
    status, text = await http_get(server.http_port, "/api/v1/bookie/state")
    state = json.loads(text)
    assert status == 200 and state["bookie_id"] == bookies[0].bookie_id and state["readonly"] is False
    status, text = await http_get(server.http_port, f"/api/v1/ledger/metadata?ledger_id={ledger.ledger_id}")
    assert status == 200 and json.loads(text)["last_entry_id"] == -1   # open: not closed yet
    assert (await http_get(server.http_port, "/api/v1/ledger/metadata?ledger_id=999999"))[0] == 404
    assert (await http_get(server.http_port, "/api/v1/ledger/metadata?ledger_id=abc"))[0] == 400
    assert (await http_get(server.http_port, "/nothing"))[0] == 404
    assert (await http_get(server.http_port, "/heartbeat", method="POST"))[0] == 405
