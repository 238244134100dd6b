"""A bookie's /metrics over real HTTP, read with prometheus_client's parser: BookKeeper's
families (names, labels, summary shapes), HELP on every family, the process's own metrics,
and numbers that follow real adds and reads through the client."""

import math

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

import bkclient
from bkcore.errors import LedgerFenced
from inprocess_cluster import free_port
from bktransports.metrics import QUANTILES

URI = "memory://bookie-metrics"
PAYLOAD = b"x" * 100


async def scrape(port: int) -> dict:
    """GET /metrics on a connection of its own: {family name: family}."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(b"GET /metrics HTTP/1.1\r\nHost: bookie\r\nConnection: close\r\n\r\n")
        data = b""
        with trio.fail_after(10):
            while chunk := await stream.receive_some(65536):
                data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and b"text/plain; version=0.0.4" in head, head
    return {family.name: family for family in text_string_to_metric_families(body.decode())}


def value(families: dict, family: str, sample: str | None = None, **labels) -> float:
    """The one sample named `sample` (default: the family's own name) whose labels include these."""
    found = [s.value for s in families[family].samples
             if s.name == (sample or family) and labels.items() <= s.labels.items()]
    assert len(found) == 1, (family, sample, labels, families[family].samples)
    return found[0]


def assert_summary_shaped_as_bookkeepers(family, labels: dict | None = None) -> None:
    """BookKeeper's OpStatsLogger: per success label, the seven quantiles, _count and _sum."""
    labels = labels or {}
    assert family.type == "summary"
    for success in ("true", "false"):
        quantiles = {s.labels["quantile"] for s in family.samples
                     if s.name == family.name and s.labels["success"] == success}
        assert quantiles == {str(q) for q in QUANTILES}
        for suffix in ("_count", "_sum"):
            assert any(s.name == family.name + suffix and s.labels == {"success": success, **labels}
                       for s in family.samples), (family.name, suffix, success)


@pytest.fixture
async def cluster(start_cluster):
    cluster = await start_cluster(URI, 0)
    for _ in range(3):
        await cluster.add_bookie(http_port=free_port(), gc_wait_time_s=3600.0)
    return cluster


async def test_every_family_has_help_and_the_process_metrics_are_there(cluster):
    families = await scrape(cluster.bookies[0].server.http_port)
    assert all(family.documentation for family in families.values()), [
        name for name, family in families.items() if not family.documentation]
    assert value(families, "process_cpu_seconds", "process_cpu_seconds_total") > 0
    assert value(families, "process_resident_memory_bytes") > 0
    assert families["python_info"].samples and "python_gc_objects_collected" in families
    assert value(families, "bookie_SERVER_STATUS") == 1
    for name in ("bookkeeper_server_ADD_ENTRY_REQUEST", "bookkeeper_server_ADD_ENTRY",
                 "bookkeeper_server_READ_ENTRY_REQUEST", "bookkeeper_server_READ_ENTRY"):
        assert_summary_shaped_as_bookkeepers(families[name])
    for name in ("bookie_journal_JOURNAL_ADD_ENTRY", "bookie_journal_JOURNAL_SYNC",
                 "bookie_journal_JOURNAL_FLUSH_LATENCY"):
        assert_summary_shaped_as_bookkeepers(families[name], {"journalIndex": "0"})
    # Nothing observed yet: quantiles are NaN, as BookKeeper's provider writes them.
    assert math.isnan(value(families, "bookkeeper_server_ADD_ENTRY_REQUEST", success="true", quantile="0.99"))
    # BookKeeper's counters keep their exact series names (no _total).
    assert [s.name for s in families["bookie_WRITE_BYTES"].samples] == ["bookie_WRITE_BYTES"]


async def test_adds_and_reads_through_a_client_move_bookkeepers_numbers(cluster):
    ports = [bookie.server.http_port for bookie in cluster.bookies]
    before = [await scrape(port) for port in ports]
    async with bkclient.connect(URI) as bk:
        ledger = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=3, password=b"pw")
        await ledger.add_many([PAYLOAD] * 20)
        await ledger.close()
        after_adds = [await scrape(port) for port in ports]
        reader = await bk.open_ledger(ledger.ledger_id, password=b"pw", recovery=False)
        assert await reader.read(0, 19) == [PAYLOAD] * 20
    after_reads = [await scrape(port) for port in ports]

    def grew(family: str, sample: str | None = None, *, index: int, since=before, now=after_adds, **labels):
        return value(now[index], family, sample, **labels) - value(since[index], family, sample, **labels)

    stored_sizes = []
    for index in range(3):
        # Every bookie of the 3/3/3 ensemble took all 20 entries (one request each or in batches:
        # counted per entry, as BookKeeper counts them).
        assert grew("bookkeeper_server_ADD_ENTRY_REQUEST", "bookkeeper_server_ADD_ENTRY_REQUEST_count",
                    index=index, success="true") == 20
        assert grew("bookkeeper_server_ADD_ENTRY_REQUEST", "bookkeeper_server_ADD_ENTRY_REQUEST_sum",
                    index=index, success="true") > 0
        assert value(after_adds[index], "bookkeeper_server_ADD_ENTRY_REQUEST", success="true", quantile="0.5") > 0
        assert grew("bookie_journal_JOURNAL_ADD_ENTRY", "bookie_journal_JOURNAL_ADD_ENTRY_count", index=index,
                    success="true", journalIndex="0") == 20
        assert grew("bookie_journal_JOURNAL_SYNC", "bookie_journal_JOURNAL_SYNC_count", index=index,
                    success="true") >= 1
        written = grew("bookie_WRITE_BYTES", index=index)
        assert 20 * len(PAYLOAD) < written < 20 * (len(PAYLOAD) + 100)      # (plus each entry's header)
        assert grew("bookie_journal_JOURNAL_WRITE_BYTES", index=index, journalIndex="0") > written
        assert value(after_adds[index], "bookie_ledgers_count") == 1
        stored_sizes.append(written)
    assert len(set(stored_sizes)) == 1
    # The reads went to the bookies between them: every entry read at least once.
    read = sum(grew("bookie_READ_BYTES", index=i, since=after_adds, now=after_reads) for i in range(3))
    reads = sum(grew("bookkeeper_server_READ_ENTRY_REQUEST", "bookkeeper_server_READ_ENTRY_REQUEST_count",
                     index=i, since=after_adds, now=after_reads, success="true") for i in range(3))
    assert read >= stored_sizes[0] and reads >= 20


async def test_refused_adds_are_counted_as_failures(cluster):
    port = cluster.bookies[0].server.http_port
    async with bkclient.connect(URI) as bk:
        ledger = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=3, password=b"pw")
        await ledger.add(PAYLOAD)
        before = await scrape(port)
        async with bkclient.connect(URI) as other:
            await other.open_ledger(ledger.ledger_id, password=b"pw")       # recovery fences it
        with pytest.raises(LedgerFenced):
            await ledger.add(PAYLOAD)
    after = await scrape(port)
    sample = "bookkeeper_server_ADD_ENTRY_REQUEST_count"
    assert (value(after, "bookkeeper_server_ADD_ENTRY_REQUEST", sample, success="false")
            - value(before, "bookkeeper_server_ADD_ENTRY_REQUEST", sample, success="false")) == 1
    assert value(after, "bookie_requests_rejected", "bookie_requests_rejected_total", code="FENCED") == 1
