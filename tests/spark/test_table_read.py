"""Table snapshots through spark.read.format("bookkeeper").option("table", ...), against a real
local cluster: keys written with the library's table service (bkcore.table.service) are read back
by Spark, one partition per range, each range as of one journal position."""

import json
import time

import pytest

from bkcore.stream.segments import SegmentState
from bkcore.table.commands import Put, Txn, fold_key, unfold_key
from bkspark.cluster import stream_view
from bkspark.table_snapshot import TableSnapshotError, plan_cuts, read_cut
from spark_helpers import new_stream
from table_helpers import LiveTables
from bkcore.table.range import TABLES_NAMESPACE, journal_stream_name

# An idle range journal sends its LAC to the bookies once idle for LAC_PUSH_DELAY_NS (10 ms):
# until then a reader cannot know the owner's last command is durable (bkspark.table_snapshot).
# The wait leaves room for a loaded machine.
EXPLICIT_LAC_WAIT_S = 2.5


def read(spark, cluster, table, **options):
    reader = spark.read.format("bookkeeper").option("metastore", cluster.metastore_uri).option("table", table)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def rows_by_key(df) -> dict:
    return {bytes(row.key): row for row in df.collect()}


def test_a_snapshot_holds_what_was_written_one_partition_per_range(spark, cluster, bk):
    table = new_stream(bk, "t", table_ranges=4)
    with LiveTables(bk) as tables:
        for i in range(200):
            tables.put(table, b"key-%03d" % i, b"value-%d" % i)
        tables.put(table, b"key-007", b"again")
        tables.delete(table, b"key-013")
        assert tables.increment(table, b"counter", 5).total == 5
        assert tables.increment(table, b"counter", -12).total == -7
        for lkey in (b"a", b"b"):
            tables.put(table, lkey, lkey.upper(), pkey=b"user-1")
    df = read(spark, cluster, table)
    assert df.rdd.getNumPartitions() == 4
    rows = rows_by_key(df)
    expected = {b"key-%03d" % i: b"value-%d" % i for i in range(200) if i != 13}
    expected[b"key-007"] = b"again"
    assert {key: bytes(row.value) for key, row in rows.items() if key.startswith(b"key-")} == expected
    assert b"key-013" not in rows
    counter = rows[b"counter"]
    assert (counter.number, bytes(counter.pkey), counter.version) == (-7, b"counter", 2)
    assert rows[b"key-007"].version == 2 and rows[b"key-007"].mod_revision > rows[b"key-007"].create_revision
    assert {(bytes(r.pkey), bytes(r.key), bytes(r.value)) for r in rows.values() if r.pkey == b"user-1"} == \
        {(b"user-1", b"a", b"A"), (b"user-1", b"b", b"B")}
    assert all(row.table == table and row.number is None for key, row in rows.items() if key != b"counter")
    # Each range's rows carry that range's revision: the number of its writing commands.
    revisions = {}
    for row in rows.values():
        revisions.setdefault(row.range_id, set()).add(row.revision)
    assert all(len(seen) == 1 for seen in revisions.values())
    assert sum(seen.pop() for seen in revisions.values()) == 200 + 1 + 1 + 2 + 2
    assert df.columns == ["table", "range_id", "revision", "pkey", "key", "value", "number", "create_revision",
                          "mod_revision", "version", "expire_at_ms"]


def test_a_live_owner_with_checkpoints_is_read_as_of_the_cut(spark, cluster, bk):
    """The owner keeps its ranges open (journals in progress) and checkpoints every 10 commands
    (truncating its journal): the snapshot is the state at the journals' confirmed ends."""
    table = new_stream(bk, "t", table_ranges=2)
    with LiveTables(bk, checkpoint_every=10) as tables:
        for i in range(120):
            tables.put(table, b"k%03d" % i, b"v%d" % i)
        for i in range(0, 120, 3):
            tables.delete(table, b"k%03d" % i)
        tables.put(table, b"json", json.dumps({"n": 1}).encode())
        time.sleep(EXPLICIT_LAC_WAIT_S)
        df = read(spark, cluster, table, recordFormat="json")
        expected = {b"k%03d" % i: "v%d" % i for i in range(120) if i % 3}
        expected[b"json"] = '{"n": 1}'
        assert {bytes(r.key): r.value_text for r in df.collect()} == expected
        assert any(seqno > 1 for seqno in bk.run(_range_journals, table)), "no checkpoint truncated a journal"
        # Writes after one read are in the next (once their LAC is out), not in the one before.
        before = sorted(bytes(r.key) for r in read(spark, cluster, table).collect())
        tables.put(table, b"after-the-cut", b"x")
        for i in range(1, 120, 3):
            tables.delete(table, b"k%03d" % i)
        time.sleep(EXPLICIT_LAC_WAIT_S)
        now = sorted(bytes(r.key) for r in read(spark, cluster, table).collect())
    assert b"after-the-cut" in now and b"after-the-cut" not in before
    assert len(before) - len(now) == 40 - 1


async def _range_journals(client, table):
    """The first live segment of each range journal of `table` (above 1 once truncated)."""
    firsts = []
    for range_id in range(2):
        segments = await client.streams.catalog.segments(TABLES_NAMESPACE, journal_stream_name(table, range_id))
        firsts.append(min(s.seqno for s in segments if s.state is not SegmentState.TRUNCATED))
    return firsts


def test_an_unused_table_is_empty_and_a_missing_one_is_named(spark, cluster, bk):
    table = new_stream(bk, "t")
    df = read(spark, cluster, table)
    assert df.count() == 0
    with pytest.raises(Exception, match=r"table spark/no-such-table does not exist.*bk stream create"):
        read(spark, cluster, "spark/no-such-table").collect()
    with pytest.raises(Exception, match='option "table"=\'a/b/c\' is not "namespace/name"'):
        read(spark, cluster, "a/b/c").collect()


def test_text_values_that_are_not_utf8_are_named(spark, cluster, bk):
    table = new_stream(bk, "t", table_ranges=1)
    with LiveTables(bk) as tables:
        tables.put(table, b"good", b"text")
        tables.put(table, b"bad", b"\xff\xfe")
        tables.increment(table, b"n", -1)                 # a counter's bytes are not text: null
    rows = rows_by_key(read(spark, cluster, table))
    assert bytes(rows[b"bad"].value) == b"\xff\xfe"
    with pytest.raises(Exception, match=r"value of key b'bad' .* is not UTF-8 text.*recordFormat=binary"):
        read(spark, cluster, table, recordFormat="utf8").collect()
    with LiveTables(bk) as tables:
        tables.delete(table, b"bad")
    rows = rows_by_key(read(spark, cluster, table, recordFormat="utf8"))
    assert (rows[b"good"].value_text, rows[b"n"].value_text, rows[b"n"].number) == ("text", None, -1)


def snapshot(bk, cuts) -> dict:
    """{(pkey, lkey): value} of every range read at its cut, without Spark."""
    return {unfold_key(kv.key): kv.value for cut in cuts for kv in read_cut(bk, cut, chunk_entries=7).kvs}


def test_a_cut_stays_put_while_the_owner_writes_checkpoints_and_truncates(cluster, bk):
    """The planning half and the task half without Spark: a cut read after more writes, a
    checkpoint and a journal truncation is still the state at the cut, every time it is read;
    once the owner has truncated everything the cut needs, the read fails naming the range."""
    table = new_stream(bk, "t", table_ranges=2)
    namespace, name = table.split("/")
    with LiveTables(bk, checkpoint_every=10) as tables:
        for i in range(30):
            tables.put(table, b"k%02d" % i, b"v%d" % i)
        tables.call("txn", table, b"pair", Txn((), (Put(fold_key(b"pair", b"a"), b"1"),
                                                     Put(fold_key(b"pair", b"b"), b"1"))))
        time.sleep(EXPLICIT_LAC_WAIT_S)
        cuts = bk.run(plan_cuts, namespace, name, now_ms=int(time.time() * 1000))
        expected = {(b"k%02d" % i, b"k%02d" % i): b"v%d" % i for i in range(30)}
        expected.update({(b"pair", b"a"): b"1", (b"pair", b"b"): b"1"})
        assert snapshot(bk, cuts) == expected
        for i in range(12):                               # about one more checkpoint per range
            tables.put(table, b"k%02d" % i, b"changed")
        assert snapshot(bk, cuts) == expected
        assert snapshot(bk, bk.run(plan_cuts, namespace, name, now_ms=int(time.time() * 1000)))[
            (b"k00", b"k00")] in (b"v0", b"changed")     # the newest write may await its LAC
        for i in range(60):                               # several checkpoints: the cut's are gone
            tables.put(table, b"k%02d" % (i % 30), b"again")
        with pytest.raises(TableSnapshotError, match=r"range \d of table spark/t-\w+: the snapshot planned at .* "
                                                      r"cannot be rebuilt.*Run the query again"):
            snapshot(bk, cuts)


def test_commands_batched_into_one_journal_entry_are_replayed_once(cluster, bk):
    """Concurrent commands share journal entries, so checkpoints fall inside entries: replay
    starts at the record after the checkpoint's, not at its entry."""
    table = new_stream(bk, "t", table_ranges=1)
    namespace, name = table.split("/")
    with LiveTables(bk, checkpoint_every=7) as tables:
        for _ in range(3):
            tables.increment_concurrently(table, b"n", 100)
    (cut,) = bk.run(plan_cuts, namespace, name, now_ms=int(time.time() * 1000))
    journal = bk.run(stream_view, TABLES_NAMESPACE, cut.journal_name)
    assert sum(extent.entry_count for extent in journal.extents) < 300 / 2, "the journal did not batch commands"
    (kv,) = read_cut(bk, cut, chunk_entries=3).kvs
    assert (kv.number, kv.version) == (300, 300)


def test_ttls_are_judged_at_the_time_of_the_cut(cluster, bk):
    table = new_stream(bk, "t", table_ranges=1)
    namespace, name = table.split("/")
    with LiveTables(bk) as tables:
        tables.put(table, b"short", b"lived", ttl_ms=60_000)
        tables.put(table, b"long", b"lived")
    now_ms = int(time.time() * 1000)
    (cut,) = bk.run(plan_cuts, namespace, name, now_ms=now_ms)
    (ttl_kv, plain_kv) = sorted(read_cut(bk, cut, chunk_entries=100).kvs, key=lambda kv: kv.expire_at_ms == 0)
    assert now_ms < ttl_kv.expire_at_ms <= now_ms + 60_000 and plain_kv.expire_at_ms == 0
    (later,) = bk.run(plan_cuts, namespace, name, now_ms=now_ms + 61_000)
    assert [(kv.key, kv.value) for kv in read_cut(bk, later, chunk_entries=100).kvs] == \
        [(fold_key(b"long", b"long"), b"lived")]
