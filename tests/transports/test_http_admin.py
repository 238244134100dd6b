"""The bookie's HTTP admin endpoint over real TCP: BookKeeper's paths and JSON fields against
what an in-process cluster holds, and the HTTP/1.1 behaviour (keep-alive, limits, errors)."""

import http.client
import json
import os
import shutil

import pytest
import trio

import bkclient
from inprocess_cluster import free_port
from bktransports import http_admin, http_admin_api
from bktransports.autorecovery import Autorecovery
from bktransports.metrics import read_samples, sample_value

URI = "memory://http"


class HttpConnection:
    """One client connection that sends requests as bytes and reads Content-Length answers."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = b""

    @classmethod
    async def open(cls, port: int) -> "HttpConnection":
        return cls(await trio.open_tcp_stream("127.0.0.1", port))

    async def send(self, method: str, path: str, body: bytes = b"", *, headers: str = "") -> None:
        length = f"Content-Length: {len(body)}\r\n" if body else ""
        await self.stream.send_all(f"{method} {path} HTTP/1.1\r\nHost: bookie\r\n{length}{headers}\r\n".encode() + body)

    async def response(self) -> tuple[int, dict[str, str], str]:
        while b"\r\n\r\n" not in self.buffer:
            await self._receive()
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        status_line, *lines = head.decode().split("\r\n")
        headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
        length = int(headers["content-length"])
        while len(self.buffer) < length:
            await self._receive()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return int(status_line.split(" ")[1]), headers, body.decode()

    async def is_closed_by_server(self) -> bool:
        with trio.fail_after(5):
            return await self.stream.receive_some(1) == b""

    async def _receive(self) -> None:
        with trio.fail_after(10):
            chunk = await self.stream.receive_some(65536)
        assert chunk, f"connection closed with {self.buffer!r} unanswered"
        self.buffer += chunk


async def call(port: int, method: str, path: str, body: object = None, *, secret: bytes = b"") -> tuple[int, object]:
    """One request on a connection of its own: (status, JSON answer, or the text of any other);
    with the secret as a bearer token, when given one."""
    connection = await HttpConnection.open(port)
    try:
        data = b"" if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
        authorization = f"Authorization: Bearer {secret.decode()}\r\n" if secret else ""
        await connection.send(method, path, data, headers=authorization)
        status, headers, text = await connection.response()
    finally:
        await connection.stream.aclose()
    if headers["content-type"] == "application/json":
        return status, json.loads(text)
    return status, text


async def wait_until(check, *, timeout_s: float = 20.0) -> None:
    with trio.fail_after(timeout_s):
        while not await check():
            await trio.sleep(0.05)


@pytest.fixture
async def cluster(start_cluster):
    """Three bookies with HTTP ports; GC and audits only when asked."""
    cluster = await start_cluster(URI, 0)
    for _ in range(3):
        await cluster.add_bookie(http_port=free_port(), gc_wait_time_s=3600.0, lost_bookie_recovery_delay_s=3600.0)
    return cluster


async def closed_ledger(bk, entries: int = 20):
    ledger = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=3, password=b"pw")
    await ledger.add_many([b"x" * 100] * entries)
    return await ledger.close()


# -- HTTP ---------------------------------------------------------------------------------------

async def test_keep_alive_serves_requests_one_after_another_and_pipelined(cluster):
    port = cluster.bookies[0].server.http_port
    connection = await HttpConnection.open(port)
    await connection.send("GET", "/heartbeat")
    assert (await connection.response())[::2] == (200, "OK\n")
    await connection.send("GET", "/api/v1/bookie/state/readonly")
    status, headers, body = await connection.response()
    assert (status, headers["content-type"], json.loads(body)) == (200, "application/json", {"readOnly": False})
    # Two requests in one write: both answered, in order, on the same connection.
    await connection.stream.send_all(b"GET /heartbeat HTTP/1.1\r\nHost: b\r\n\r\n"
                                     b"GET /api/v1/bookie/info HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
    assert (await connection.response())[::2] == (200, "OK\n")
    status, _, body = await connection.response()
    assert status == 200 and set(json.loads(body)) == {"freeSpace", "totalSpace"}
    assert await connection.is_closed_by_server()         # as the last request asked

    def with_the_standard_client() -> list:
        client = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        answers = []
        for _ in range(2):
            client.request("GET", "/heartbeat")
            response = client.getresponse()
            answers.append((response.status, response.read(), client.sock is not None))
        client.close()
        return answers

    assert await trio.to_thread.run_sync(with_the_standard_client) == [(200, b"OK\n", True)] * 2


async def test_unknown_paths_and_methods_are_named_in_one_line(cluster):
    port = cluster.bookies[0].server.http_port
    status, text = await call(port, "GET", "/api/v1/nothing")
    assert status == 404 and text.count("\n") == 1 and text.startswith("no endpoint /api/v1/nothing; ")
    assert "/api/v1/bookie/list_bookies" in text and "/heartbeat" in text
    connection = await HttpConnection.open(port)
    await connection.send("POST", "/api/v1/bookie/gc")
    status, headers, text = await connection.response()
    assert (status, headers["allow"]) == (405, "GET, PUT")
    assert text == "POST is not allowed on /api/v1/bookie/gc; use GET, PUT\n"
    await connection.send("GET", "/heartbeat/")            # (a trailing / as BookKeeper's docs write it)
    assert (await connection.response())[::2] == (200, "OK\n")    # and the connection lives on


async def test_bad_requests_are_refused_in_one_line_and_the_bookie_serves_on(cluster, monkeypatch):
    port = cluster.bookies[0].server.http_port
    for request, status, line in [
            (b"GARBAGE\r\n\r\n", 400, "malformed request: "),
            (b"GET /heartbeat HTTP/1.1\r\nHost: b\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n", 431,
             "request head over 8192 bytes"),
            (b"PUT /api/v1/bookie/gc HTTP/1.1\r\nHost: b\r\nContent-Length: 10000000\r\n\r\n", 413,
             "request body of 10000000 bytes; at most 65536 are taken")]:
        connection = await HttpConnection.open(port)
        await connection.stream.send_all(request)
        answer_status, headers, text = await connection.response()
        assert (answer_status, headers["connection"]) == (status, "close") and text.startswith(line)
        assert text.count("\n") == 1 and "Traceback" not in text
        assert await connection.is_closed_by_server()
    monkeypatch.setattr(http_admin, "REQUEST_TIMEOUT_S", 0.3)
    connection = await HttpConnection.open(port)
    await connection.stream.send_all(b"GET /heart")                    # and nothing more
    assert (await connection.response())[::2] == (408, "the request did not arrive whole within 0.3 s\n")
    monkeypatch.setattr(http_admin, "IDLE_TIMEOUT_S", 0.3)
    connection = await HttpConnection.open(port)
    await connection.send("GET", "/heartbeat")
    assert (await connection.response())[::2] == (200, "OK\n")
    assert await connection.is_closed_by_server()          # idle after it: closed without a word
    assert await call(port, "GET", "/heartbeat") == (200, "OK\n")


async def test_bad_arguments_are_400_saying_what_was_wrong(cluster):
    port = cluster.bookies[0].server.http_port
    readonly = "/api/v1/bookie/state/readonly"
    for method, path, body, line in [
            ("PUT", readonly, None, "readOnly is required: true or false\n"),
            ("PUT", readonly, b"{not json", "the body is not JSON: "),
            ("PUT", readonly, [True], "the body must be a JSON object, not list\n"),
            ("PUT", readonly, {"readOnly": "maybe"}, 'readOnly must be true or false, not "maybe"\n'),
            ("GET", "/api/v1/bookie/list_bookies", None, "type is required: one of rw, ro\n"),
            ("GET", "/api/v1/bookie/list_bookies?type=all", None, 'type must be one of rw, ro, not "all"\n'),
            ("GET", "/api/v1/ledger/metadata?ledger_id=abc", None,
             'ledger_id must be a number from 0 to 9999999999, not "abc"\n'),
            ("GET", "/api/v1/ledger/metadata?ledger_id=99999999999", None,
             "ledger_id must be a number from 0 to 9999999999, not 99999999999\n"),
            ("GET", "/api/v1/ledger/metadata?ledger_id=1&ledger_id=2", None,
             "ledger_id is given 2 times; give it once\n"),
            ("DELETE", "/api/v1/ledger/delete", None, "ledger_id is required: a number from 0 to 9999999999\n")]:
        status, text = await call(port, method, path, body)
        assert status == 400 and text.startswith(line) and text.count("\n") == 1, (path, body, text)
    assert cluster.bookies[0].server.is_readonly is False


# -- this bookie --------------------------------------------------------------------------------

async def test_config_info_state_and_readonly(cluster):
    bookie = cluster.bookies[0]
    server = bookie.server
    port = server.http_port
    status, config = await call(port, "GET", "/api/v1/config/server_config")
    assert status == 200 and all(type(value) is str for value in config.values())
    assert config["httpServerPort"] == str(bookie.config.http_port) and config["dataDir"] == bookie.config.data_dir
    assert (config["journalMaxSizeMB"], config["gcWaitTime"], config["flushInterval"]) == ("4", "3600000", "1000")
    assert config["lostBookieRecoveryDelay"] == "3600" and config["bookieAuthSecret"] == ""
    status, info = await call(port, "GET", "/api/v1/bookie/info")
    disk = shutil.disk_usage(bookie.config.data_dir)
    assert status == 200 and info["totalSpace"] == disk.total and abs(info["freeSpace"] - disk.free) < 2**30
    assert await call(port, "GET", "/api/v1/bookie/state") == (200, {
        "running": True, "readOnly": False, "shuttingDown": False, "availableForHighPriorityWrites": True})
    assert await call(port, "GET", "/api/v1/bookie/is_ready") == (200, "OK\n")
    # PUT with a JSON body turns it readonly: registered under readonly/, refusing adds.
    assert await call(port, "PUT", "/api/v1/bookie/state/readonly", {"readOnly": True}) == (200, {"readOnly": True})
    assert server.is_readonly and server.is_registered_readonly
    assert (await call(port, "GET", "/api/v1/bookie/state"))[1]["readOnly"] is True
    assert await call(port, "GET", "/api/v1/bookie/list_bookies?type=ro") == (200, {bookie.bookie_id: None})
    rw = (await call(port, "GET", "/api/v1/bookie/list_bookies?type=rw"))[1]
    assert rw == {other.bookie_id: None for other in cluster.bookies[1:]}
    status, named = await call(port, "GET", "/api/v1/bookie/list_bookies?type=rw&print_hostnames=true")
    assert set(named) == set(rw) and all(type(name) is str and name for name in named.values())
    assert await call(port, "GET", "/api/v1/bookie/is_ready") == (200, "OK\n")        # readonly is ready too
    # ... and back, the flag as a query parameter this time.
    assert await call(port, "PUT", "/api/v1/bookie/state/readonly?readOnly=false") == (200, {"readOnly": False})
    assert not server.is_readonly and len((await call(port, "GET", "/api/v1/bookie/list_bookies?type=rw"))[1]) == 3
    await server.shutdown()
    assert await call(port, "GET", "/api/v1/bookie/is_ready") == (
        503, f"bookie {bookie.bookie_id} is not ready: it is shutting down\n")
    assert (await call(port, "GET", "/api/v1/bookie/state"))[1]["shuttingDown"] is True


async def test_metrics_and_last_log_mark_follow_the_writes(cluster):
    server = cluster.bookies[0].server
    port = server.http_port
    async with bkclient.connect(URI) as bk:
        await closed_ledger(bk, 20)
    await server.checkpoint()
    status, text = await call(port, "GET", "/metrics")
    samples = read_samples(text)
    assert status == 200 and sample_value(samples, "bookkeeper_server_ADD_ENTRY_REQUEST_count", success="true") == 20
    assert sample_value(samples, "bookie_flush_count", success="true") >= 1
    status, marks = await call(port, "GET", "/api/v1/bookie/last_log_mark")
    ledger_dir = f"{server.config.data_dir}/{server.config.journal.ledger_dirs[0]}"
    assert status == 200 and list(marks) == [ledger_dir]
    journal_part, offset_part = marks[ledger_dir].removeprefix("LogMark: ").split(" , ")
    journal_id = int(journal_part.removeprefix("logFileId - "))
    offset = int(offset_part.removeprefix("logFileOffset - "))
    assert journal_id in server.stack.journal.journal_ids() and offset > 0
    async with bkclient.connect(URI) as bk:
        await closed_ledger(bk, 5)
    await server.checkpoint()
    later = (await call(port, "GET", "/api/v1/bookie/last_log_mark"))[1][ledger_dir]
    assert later != marks[ledger_dir]                              # the mark moved on with the journal


async def test_gc_is_triggered_and_its_rounds_are_counted(cluster):
    server = cluster.bookies[0].server
    port = server.http_port
    async with bkclient.connect(URI) as bk:
        ledger = await closed_ledger(bk)
    await server.checkpoint()
    assert ledger.ledger_id in server.stack.storage.ledger_ids()
    assert await call(port, "GET", "/api/v1/bookie/gc") == (200, {"is_in_force_gc": "false"})
    details = (await call(port, "GET", "/api/v1/bookie/gc_details"))[1]
    assert details == [{"forceCompacting": False, "majorCompacting": False, "minorCompacting": False,
                        "lastMajorCompactionTime": 0, "lastMinorCompactionTime": 0, "majorCompactionCounter": 0,
                        "minorCompactionCounter": 0}]
    assert await call(port, "DELETE", f"/api/v1/ledger/delete?ledger_id={ledger.ledger_id}") == (
        200, f"ledger {ledger.ledger_id} deleted\n")
    assert (await call(port, "DELETE", f"/api/v1/ledger/delete?ledger_id={ledger.ledger_id}"))[0] == 404
    assert (await call(port, "GET", f"/api/v1/ledger/metadata?ledger_id={ledger.ledger_id}"))[0] == 404
    assert await call(port, "PUT", "/api/v1/bookie/gc", {"forceMajor": True}) == (200, {"is_in_force_gc": "true"})

    async def gc_done() -> bool:
        return (await call(port, "GET", "/api/v1/bookie/gc"))[1] == {"is_in_force_gc": "false"}

    await wait_until(gc_done)
    assert ledger.ledger_id not in server.stack.storage.ledger_ids()     # the round collected it
    details = (await call(port, "GET", "/api/v1/bookie/gc_details"))[1][0]
    assert (details["majorCompactionCounter"], details["minorCompactionCounter"]) == (1, 0)
    assert details["lastMajorCompactionTime"] > 0 and details["lastMinorCompactionTime"] == 0
    assert (await call(port, "PUT", "/api/v1/bookie/gc"))[0] == 200      # no body: a minor round
    await wait_until(gc_done)
    details = (await call(port, "GET", "/api/v1/bookie/gc_details"))[1][0]
    assert (details["majorCompactionCounter"], details["minorCompactionCounter"]) == (1, 1)
    assert server.counts["gc_rounds"] == 2 and server.counts["ledgers_collected"] == 1


# -- the cluster --------------------------------------------------------------------------------

async def test_ledgers_and_bookies_of_the_cluster(cluster):
    port = cluster.bookies[1].server.http_port
    async with bkclient.connect(URI) as bk:
        closed = await closed_ledger(bk)
        open_ledger = await bk.create_ledger(ensemble=2, write_quorum=2, ack_quorum=2, password=b"pw")
        ids = sorted([closed.ledger_id, open_ledger.ledger_id])
        assert await call(port, "GET", "/api/v1/ledger/list") == (200, {str(i): None for i in ids})
        status, listed = await call(port, "GET", "/api/v1/ledger/list/?print_metadata=true")
        assert status == 200 and list(listed) == [str(i) for i in ids]
        closed_metadata = listed[str(closed.ledger_id)]
        assert closed_metadata["state"] == "CLOSED" and closed_metadata["last_entry_id"] == 19
        status, metadata = await call(port, "GET", f"/api/v1/ledger/metadata?ledger_id={open_ledger.ledger_id}")
        assert status == 200 and list(metadata) == [str(open_ledger.ledger_id)]
        assert metadata[str(open_ledger.ledger_id)]["state"] == "OPEN"
        assert metadata[str(open_ledger.ledger_id)]["ensemble_size"] == 2
    assert await call(port, "GET", "/api/v1/ledger/metadata?ledger_id=999999") == (
        404, "ledger 999999 does not exist\n")
    status, info = await call(port, "GET", "/api/v1/bookie/list_bookie_info")
    bookie_ids = sorted(bookie.bookie_id for bookie in cluster.bookies)
    assert status == 200 and sorted(info) == sorted([*bookie_ids, "clusterInfo"])
    for bookie in cluster.bookies:
        disk = shutil.disk_usage(bookie.config.data_dir)
        free, total = disk.free, disk.total
        assert info[bookie.bookie_id]["total"] == total and abs(info[bookie.bookie_id]["free"] - free) < 2**30
    assert info["clusterInfo"] == {"total_free": sum(info[b]["free"] for b in bookie_ids),
                                   "total": sum(info[b]["total"] for b in bookie_ids)}
    status, cluster_info = await call(port, "GET", "/api/v1/bookie/cluster_info")
    assert cluster_info == {"auditorElected": False, "auditorId": "", "clusterUnderReplicated": False,
                            "ledgerReplicationEnabled": True, "totalBookiesCount": 3, "writableBookiesCount": 3,
                            "readonlyBookiesCount": 0, "unavailableBookiesCount": 0}


async def test_autorecovery_endpoints(cluster):
    auditor_bookie, other, victim = cluster.bookies
    port = auditor_bookie.server.http_port
    assert await call(port, "GET", "/api/v1/autorecovery/who_is_auditor") == (
        404, "no auditor is elected: no bookie or process of this cluster runs autorecovery\n")
    # A request for an audit is left in the metastore for whichever daemon audits.
    assert await call(port, "PUT", "/api/v1/autorecovery/trigger_audit") == (
        200, {"auditTriggered": True, "auditor": None})
    assert await call(port, "GET", "/api/v1/autorecovery/lost_bookie_recovery_delay") == (
        200, {"lostBookieRecoveryDelay": 3600})
    # The cluster's switch and delay (bk shell autorecovery / lostbookierecoverydelay).
    assert await call(port, "PUT", "/api/v1/autorecovery/status", {"enabled": False}) == (200, {"enabled": False})
    assert await call(port, "GET", "/api/v1/autorecovery/status") == (200, {"enabled": False})
    assert (await call(port, "GET", "/api/v1/bookie/cluster_info"))[1]["ledgerReplicationEnabled"] is False
    assert await call(port, "PUT", "/api/v1/autorecovery/status?enabled=true") == (200, {"enabled": True})
    assert await call(port, "PUT", "/api/v1/autorecovery/lost_bookie_recovery_delay", {"delay_seconds": 7200}) == (
        200, {"lostBookieRecoveryDelay": 7200})
    assert await call(port, "GET", "/api/v1/autorecovery/lost_bookie_recovery_delay") == (
        200, {"lostBookieRecoveryDelay": 7200})
    status, text = await call(port, "PUT", "/api/v1/autorecovery/lost_bookie_recovery_delay", {"delay_seconds": -1})
    assert status == 400 and "delay_seconds" in text
    async with bkclient.connect(URI) as bk, trio.open_nursery() as nursery:
        ledger = await closed_ledger(bk)
        # As `bk bookie` with autoRecoveryDaemonEnabled does: the daemon, named by its bookie's id.
        # The first one started is elected; the second waits as a candidate.
        for bookie in (auditor_bookie, other):
            recovery = Autorecovery(bk, lost_bookie_recovery_delay_s=3600, name=bookie.bookie_id)
            bookie.server.autorecovery = recovery
            nursery.start_soon(recovery.run)

            async def elected() -> bool:
                return auditor_bookie.server.autorecovery.is_auditor

            await wait_until(elected)
        assert await call(port, "GET", "/api/v1/autorecovery/who_is_auditor") == (
            200, {"Auditor": auditor_bookie.bookie_id})
        await cluster.stop(victim)
        status, cluster_info = await call(port, "GET", "/api/v1/bookie/cluster_info")
        assert (cluster_info["auditorElected"], cluster_info["auditorId"]) == (True, auditor_bookie.bookie_id)
        assert (cluster_info["totalBookiesCount"], cluster_info["writableBookiesCount"],
                cluster_info["unavailableBookiesCount"], cluster_info["clusterUnderReplicated"]) == (3, 2, 1, False)
        listing = "/api/v1/autorecovery/list_under_replicated_ledger"
        assert await call(port, "GET", listing) == (200, [])           # the delay (two hours) has not passed
        # Asked on any bookie, the auditor audits at once, marking what is missing now.
        assert await call(other.server.http_port, "PUT", "/api/v1/autorecovery/trigger_audit") == (
            200, {"auditTriggered": True, "auditor": auditor_bookie.bookie_id})

        async def marked() -> bool:
            return (await call(port, "GET", listing))[1] == [ledger.ledger_id]

        await wait_until(marked)
        # (No bookie outside the ensemble is left to copy to, so the mark stays.)
        assert await call(port, "GET", listing) == (200, [ledger.ledger_id])
        assert await call(port, "GET", f"{listing}?missingreplica={victim.bookie_id}") == (200, [ledger.ledger_id])
        assert await call(port, "GET", f"{listing}?excludingmissingreplica={victim.bookie_id}") == (200, [])
        assert await call(port, "GET", f"{listing}?missingreplica={other.bookie_id}") == (200, [])
        assert await call(port, "GET", f"{listing}?printmissingreplica=true") == (
            200, {str(ledger.ledger_id): [victim.bookie_id]})
        assert (await call(port, "GET", "/api/v1/bookie/cluster_info"))[1]["clusterUnderReplicated"] is True
        nursery.cancel_scope.cancel()


async def test_the_secret_is_never_shown_and_other_bookies_are_asked_with_it(start_cluster):
    cluster = await start_cluster(URI, 0)
    bookie = await cluster.add_bookie(http_port=free_port(), auth_secret=b"hush-hush")
    port = bookie.server.http_port
    assert (await call(port, "GET", "/api/v1/config/server_config"))[0] == 401      # (the port asks for it too)
    connection = await HttpConnection.open(port)
    await connection.send("GET", "/api/v1/config/server_config", headers="Authorization: Bearer hush-hush\r\n")
    status, _, text = await connection.response()
    assert status == 200 and json.loads(text)["bookieAuthSecret"] == "******" and "hush" not in text
    status, info = await call(port, "GET", "/api/v1/bookie/list_bookie_info", secret=b"hush-hush")
    assert status == 200 and list(info) == [bookie.bookie_id, "clusterInfo"]
    assert bookie.server.counts["auth_failures"] == 0


# -- reading ledgers ----------------------------------------------------------------------------

async def test_ledger_read_gives_confirmed_entries_as_bookkeeper_encodes_them(cluster, monkeypatch):
    port = cluster.bookies[1].server.http_port
    payloads = [b"entry %d" % index for index in range(24)] + [b"caf\xc3\xa9\x00!"]
    read = "/api/v1/ledger/read"
    async with bkclient.connect(URI) as bk:
        ledger = await bk.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=b"pw")
        await ledger.add_many(payloads)
        # Open: what the bookies know to be confirmed, and the writer is not fenced.
        status, entries = await call(port, "GET", f"{read}?ledger_id={ledger.ledger_id}")
        assert status == 200 and 0 < len(entries) <= len(payloads)
        assert entries == {str(index): payloads[index].decode("ascii", "replace") for index in range(len(entries))}
        await ledger.add(b"after the read")
        await ledger.close()
    expected = {str(index): payload.decode("ascii", "replace") for index, payload in
                enumerate(payloads + [b"after the read"])}
    assert expected["24"] == "caf\ufffd\ufffd\x00!"                        # (US-ASCII, as BookKeeper decodes)
    assert await call(port, "GET", f"{read}/?ledger_id={ledger.ledger_id}") == (200, expected)
    for query, ids in [("&start_entry_id=5&end_entry_id=7", [5, 6, 7]), ("&start_entry_id=23", [23, 24, 25]),
                       ("&end_entry_id=1", [0, 1]), ("&start_entry_id=24&end_entry_id=99", [24, 25]),
                       ("&start_entry_id=26", [])]:
        assert await call(port, "GET", f"{read}?ledger_id={ledger.ledger_id}{query}") == (
            200, {str(i): expected[str(i)] for i in ids}), query
    assert await call(port, "GET", f"{read}?ledger_id={ledger.ledger_id}&page=1&start_entry_id=20") == (
        200, {"Entries for page: ": "1", **{str(i): expected[str(i)] for i in range(20, 26)}})
    assert await call(port, "GET", f"{read}?ledger_id={ledger.ledger_id}&page=2") == (
        200, {"Entries for page: ": "2"})
    assert await call(port, "GET", f"{read}?ledger_id=999999") == (404, "ledger 999999 does not exist\n")
    for query, line in [("", "ledger_id is required: a number from 0 to 9999999999\n"),
                        (f"ledger_id={ledger.ledger_id}&start_entry_id=9&end_entry_id=3",
                         "start_entry_id 9 is after end_entry_id 3\n"),
                        (f"ledger_id={ledger.ledger_id}&start_entry_id=-1", "start_entry_id must be a number from 0"),
                        (f"ledger_id={ledger.ledger_id}&page=0", "page must be a number from 1")]:
        status, text = await call(port, "GET", f"{read}?{query}")
        assert status == 400 and text.startswith(line) and text.count("\n") == 1, (query, text)
    # What one read answers is bounded, in entries and in bytes.
    monkeypatch.setattr(http_admin_api, "READ_ENTRY_COUNT_MAX", 10)
    status, text = await call(port, "GET", f"{read}?ledger_id={ledger.ledger_id}")
    assert status == 400 and text == (f"ledger {ledger.ledger_id}: entries 0..25 are 26, over the 10 one read "
                                      f"answers; ask fewer (end_entry_id, or page)\n")
    assert len((await call(port, "GET", f"{read}?ledger_id={ledger.ledger_id}&end_entry_id=9"))[1]) == 10
    monkeypatch.setattr(http_admin_api, "READ_SIZE_MAX", 30)
    status, text = await call(port, "GET", f"{read}?ledger_id={ledger.ledger_id}&end_entry_id=9")
    assert status == 400 and "entries 0..4 hold over 30 bytes" in text          # (7 bytes each)


async def test_ledger_read_of_an_hmac_ledger_needs_its_password(cluster):
    port = cluster.bookies[0].server.http_port
    async with bkclient.connect(URI) as bk:
        ledger = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"secret", digest="hmac")
        await ledger.add_many([b"one", b"two"])
        await ledger.close()
    path = f"/api/v1/ledger/read?ledger_id={ledger.ledger_id}"
    assert await call(port, "GET", path) == (403, (
        f"ledger {ledger.ledger_id}: its HMAC_SHA256 digests are checked with its password, so it cannot be "
        f"read without it; give the ledger's password as password\n"))
    assert await call(port, "GET", path, {"password": "wrong"}) == (403, f"ledger {ledger.ledger_id}: wrong password\n")
    assert await call(port, "GET", path, {"password": "secret"}) == (200, {"0": "one", "1": "two"})


# -- listing, files, sanity, compaction --------------------------------------------------------

async def test_ledger_list_pages_its_metadata(cluster, monkeypatch):
    port = cluster.bookies[0].server.http_port
    async with bkclient.connect(URI) as bk:
        ids = [(await closed_ledger(bk, 1)).ledger_id for _ in range(3)]
    monkeypatch.setattr(http_admin_api, "LIST_PAGE_LEDGER_COUNT", 2)
    listing = "/api/v1/ledger/list?print_metadata=true"
    assert list((await call(port, "GET", f"{listing}&page=1"))[1]) == [str(i) for i in ids[:2]]
    status, page = await call(port, "GET", f"{listing}&page=2&decode_meta=true")
    assert status == 200 and list(page) == [str(ids[2])] and page[str(ids[2])]["state"] == "CLOSED"
    assert await call(port, "GET", f"{listing}&page=3") == (200, {})
    assert list((await call(port, "GET", listing))[1]) == [str(i) for i in ids]
    assert (await call(port, "GET", f"{listing}&page=0"))[0] == 400


async def test_list_disk_file_names_the_bookies_files(cluster):
    server = cluster.bookies[0].server
    port = server.http_port
    async with bkclient.connect(URI) as bk:
        await closed_ledger(bk)
    await server.checkpoint()
    status, files = await call(port, "GET", "/api/v1/bookie/list_disk_file")
    assert status == 200 and set(files) == {"journal files", "entrylog files", "index files"}
    assert all(text.endswith("\t") for text in files.values())          # (each name followed by a tab)
    journals = files["journal files"].split("\t")[:-1]
    assert journals == [f"{journal_id:x}.txn" for journal_id in server.stack.journal.journal_ids()]
    ledger_dir = os.path.join(server.config.data_dir, server.config.journal.ledger_dirs[0])
    assert files["entrylog files"].split("\t")[:-1] == sorted(n for n in os.listdir(ledger_dir) if n.endswith(".log"))
    assert files["entrylog files"] and "data.mdb" in files["index files"].split("\t")
    assert await call(port, "GET", "/api/v1/bookie/list_disk_file?file_type=journal") == (
        200, {"journal files": files["journal files"]})
    status, text = await call(port, "GET", "/api/v1/bookie/list_disk_file?file_type=rocksdb")
    assert status == 400 and text == 'file_type must be one of journal, entrylog, index, not "rocksdb"\n'


async def test_sanity_writes_and_reads_on_this_bookie_alone(cluster, monkeypatch):
    bookie, *others = cluster.bookies
    port = bookie.server.http_port

    async def adds(member) -> float:
        samples = read_samples((await call(member.server.http_port, "GET", "/metrics"))[1])
        return sample_value(samples, "bookkeeper_server_ADD_ENTRY_REQUEST_count", success="true") or 0

    assert await call(port, "GET", "/api/v1/bookie/sanity") == (200, {"passed": True, "readOnly": False})
    assert await adds(bookie) == http_admin_api.SANITY_ENTRY_COUNT
    assert [await adds(other) for other in others] == [0, 0]
    assert await call(port, "GET", "/api/v1/ledger/list") == (200, {})          # its ledger deleted
    # A check that does not finish in time has failed.
    monkeypatch.setattr(http_admin_api, "SANITY_TIMEOUT_S", 0.000001)
    assert await call(port, "GET", "/api/v1/bookie/sanity") == (200, {"passed": False, "readOnly": False})
    # A readonly bookie is not checked.
    await call(port, "PUT", "/api/v1/bookie/state/readonly", {"readOnly": True})
    assert await call(port, "GET", "/api/v1/bookie/sanity") == (200, {"passed": False, "readOnly": True})


async def test_compaction_is_suspended_and_resumed_while_gc_goes_on(cluster):
    server = cluster.bookies[0].server
    port = server.http_port
    suspension = "/api/v1/bookie/gc/suspend_compaction"
    assert await call(port, "GET", suspension) == (200, {"isMajorGcSuspended": "false",
                                                         "isMinorGcSuspended": "false"})
    assert await call(port, "PUT", suspension, {"suspendMajor": True, "suspendMinor": "true"}) == (
        200, {"isMajorGcSuspended": "true", "isMinorGcSuspended": "true"})
    async with bkclient.connect(URI) as bk:
        ledger = await closed_ledger(bk)
        await server.checkpoint()
        await bk.delete_ledger(ledger.ledger_id)

    async def round_done(counters: tuple[int, int]) -> None:
        async def done() -> bool:
            details = (await call(port, "GET", "/api/v1/bookie/gc_details"))[1][0]
            return (await call(port, "GET", "/api/v1/bookie/gc"))[1] == {"is_in_force_gc": "false"} and (
                details["majorCompactionCounter"], details["minorCompactionCounter"]) == counters
        await wait_until(done)

    for body in (None, {"forceMajor": False}):                   # no compaction while both are suspended
        assert (await call(port, "PUT", "/api/v1/bookie/gc", body))[0] == 200
        await round_done((0, 0))
    assert server.counts["gc_rounds"] == 2 and ledger.ledger_id not in server.stack.storage.ledger_ids()
    # Asked for by name, a kind runs even while suspended (BookKeeper's forceGC(major, minor)).
    assert (await call(port, "PUT", "/api/v1/bookie/gc", {"forceMinor": True}))[0] == 200
    await round_done((0, 1))
    assert await call(port, "PUT", "/api/v1/bookie/gc/resume_compaction", {"resumeMinor": True}) == (
        200, {"isMajorGcSuspended": "true", "isMinorGcSuspended": "false"})
    assert (await call(port, "PUT", "/api/v1/bookie/gc"))[0] == 200
    await round_done((0, 2))
    assert (await call(port, "PUT", "/api/v1/bookie/gc/resume_compaction?resumeMajor=true"))[1] == {
        "isMajorGcSuspended": "false", "isMinorGcSuspended": "false"}
    for path, body, line in [(suspension, None, "suspendMajor or suspendMinor is required: true or false\n"),
                             (suspension, {"suspendMajor": "maybe"},
                              'suspendMajor must be true or false, not "maybe"\n'),
                             ("/api/v1/bookie/gc/resume_compaction", {}, "resumeMajor or resumeMinor is required")]:
        status, text = await call(port, "PUT", path, body)
        assert status == 400 and text.startswith(line), text
    assert (await call(port, "GET", "/api/v1/bookie/gc/resume_compaction"))[0] == 405
