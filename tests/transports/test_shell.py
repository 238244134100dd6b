"""`bk shell` commands against in-process bookies on real files (memory:// metastore)."""

import io
import json

import pytest

from bkcli.main import build_parser
from bkcli.shell_command import run_shell

URI = "memory://shell"


@pytest.fixture
async def cluster(start_cluster):
    return await start_cluster(URI, 3)


async def shell(*argv: str, uri: str | None = URI) -> tuple[int, str]:
    args = build_parser().parse_args(["shell", *argv, *(["--metastore", uri] if uri else [])])
    out = io.StringIO()
    status = await run_shell(args, out)
    return status, out.getvalue()


async def test_listbookies_prints_one_host_port_per_line(cluster):
    status, text = await shell("listbookies")
    assert status == 0
    assert text.splitlines() == sorted(b.bookie_id for b in cluster.bookies)
    assert all(line.startswith("127.0.0.1:") for line in text.splitlines())
    status, text = await shell("listbookies", "--readonly")
    assert (status, text) == (0, "")
    # BookKeeper's -rw / -ro / -a: one bookie turned readonly moves from the first to the second.
    readonly = sorted(cluster.bookies, key=lambda b: b.bookie_id)[0]
    await readonly.server.set_readonly(True)
    others = sorted(b.bookie_id for b in cluster.bookies if b is not readonly)
    assert (await shell("listbookies", "-rw"))[1].splitlines() == others
    assert (await shell("listbookies", "-ro"))[1] == f"{readonly.bookie_id}\n"
    assert (await shell("listbookies", "-a"))[1].splitlines() == [*others, f"{readonly.bookie_id}\treadonly"]
    assert json.loads((await shell("listbookies", "-a", "--json"))[1]) == {"readwrite": others,
                                                                         "readonly": [readonly.bookie_id]}


async def test_simpletest_bookiesanity_and_ledger_commands(cluster):
    status, text = await shell("simpletest", "--num-entries", "50", "--json")
    assert status == 0
    report = json.loads(text)
    assert report["entries"] == 50 and len(report["ensemble"]) == 3
    status, text = await shell("bookiesanity", "--json")
    assert status == 0 and [r["ok"] for r in json.loads(text)] == [True, True, True]
    assert (await shell("listledgers"))[1] == ""          # simpletest and bookiesanity clean up

    import bkclient
    async with bkclient.connect(URI) as bk:
        ledger = await bk.create_ledger(password=b"pw")
        await ledger.add_many([b"one", b"two"])
    status, text = await shell("listledgers")
    assert text.split() == [str(ledger.ledger_id)]
    status, text = await shell("listledgers", "-m", "--json")
    [summary] = json.loads(text)
    assert summary["ledger_id"] == ledger.ledger_id and summary["state"] == "OPEN"
    [bookie] = summary["ensembles"]["0"][:1]
    assert (await shell("listledgers", "-id", bookie))[1].split() == [str(ledger.ledger_id)]
    assert (await shell("listledgers", "-id", "127.0.0.1:1"))[1] == ""
    # As BookKeeper's readledger: up to the LAC, the writer left alone, unless -r recovers first.
    status, text = await shell("readledger", str(ledger.ledger_id), "--password", "pw", "-m")
    assert (status, text) == (0, "0\t3 bytes\tone\n1\t3 bytes\ttwo\n")    # (the writer pushed its LAC)
    status, text = await shell("ledgermetadata", str(ledger.ledger_id), "--json")
    assert json.loads(text)["state"] == "OPEN"
    status, text = await shell("readledger", "-l", str(ledger.ledger_id), "--password", "pw", "-r", "-fe", "1")
    assert (status, text) == (0, "1\t3 bytes\n")
    status, text = await shell("ledgermetadata", str(ledger.ledger_id), "--json")
    assert json.loads(text)["state"] == "CLOSED"         # -r recovered (closed) it
    status, _ = await shell("readledger", str(ledger.ledger_id), "--password", "wrong")
    assert status == 1
    assert (await shell("deleteledger", str(ledger.ledger_id), "-f"))[0] == 0
    assert (await shell("deleteledger", str(ledger.ledger_id), "-f"))[0] == 1   # NoSuchLedger


async def test_journal_tools_read_a_bookies_files(cluster):
    import bkclient
    async with bkclient.connect(URI) as bk:
        ledger = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=3, password=b"pw")
        await ledger.add_many([b"x" * 10] * 5)
    bookie = cluster.bookies[0]
    await bookie.server.checkpoint()
    status, text = await shell("readjournal", "--data-dir", bookie.config.data_dir, "--json", uri=None)
    rows = json.loads(text)
    entries = [r for r in rows if r["record"] == "ENTRY" and r["ledger_id"] == ledger.ledger_id]
    assert [r["entry_id"] for r in entries] == [0, 1, 2, 3, 4]
    status, text = await shell("readlog", "--data-dir", bookie.config.data_dir, "--json", uri=None)
    logged = [r for r in json.loads(text) if r.get("ledger_id") == ledger.ledger_id]
    assert status == 0 and sorted(r["entry_id"] for r in logged) == [0, 1, 2, 3, 4]
    status, text = await shell("lastmark", "--data-dir", bookie.config.data_dir, "--json", uri=None)
    mark = json.loads(text)["ledgers"]
    assert mark["position"] > 0
    log_id = logged[0]["log"]
    status, text = await shell("readlogmetadata", "--data-dir", bookie.config.data_dir, "-l", log_id, "--json",
                               uri=None)
    [row] = [r for r in json.loads(text) if r.get("ledger_id") == ledger.ledger_id]
    assert (status, row["entries"], row["bytes"]) == (0, 5, sum(r["size"] for r in logged))
    assert (await shell("readlogmetadata", "--data-dir", bookie.config.data_dir, "-l", "ffff", uri=None))[0] == 1
    status, text = await shell("listfilesondisc", "--data-dir", bookie.config.data_dir, "--json", uri=None)
    files = json.loads(text)
    assert {row["kind"] for row in files} == {"journal", "entrylog", "index"} and all(row["size"] >= 0 for row in files)
    assert any(row["file"].endswith(f"/{log_id}.log") for row in files)
    status, text = await shell("listfilesondisc", "--data-dir", bookie.config.data_dir, "-txn", "--json", uri=None)
    assert {row["kind"] for row in json.loads(text)} == {"journal"}


async def test_recover_and_decommission_commands(cluster, nursery, capsys):
    import bkclient
    async with bkclient.connect(URI) as bk:
        await cluster.add_bookie()
        ledger = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"pw")
        await ledger.add_many([b"x%d" % i for i in range(20)])
        metadata = await ledger.close()
        still_open = await bk.create_ledger(ensemble=4, write_quorum=3, ack_quorum=2, password=b"pw")
        await still_open.add_many([b"y"] * 4)             # on every bookie, and never closed
    victim = next(b for b in cluster.bookies if b.bookie_id in metadata.all_bookies())
    status, _ = await shell("decommission", victim.bookie_id, "-f")
    assert status == 1                                    # still running: refused
    await cluster.stop(victim)
    capsys.readouterr()
    status, text = await shell("recover", victim.bookie_id, "--dry-run", "--json")
    assert status == 0 and json.loads(text)["fragments"] == 1
    assert capsys.readouterr().err == ""                  # no progress bar drawn into a pipe
    # BookKeeper's recover flags: -q lists, -l picks ledgers, -sk leaves open ones alone.
    status, text = await shell("recover", victim.bookie_id, "-q", "--json")
    assert status == 0 and json.loads(text)["ledgers"] == [metadata.ledger_id]
    status, text = await shell("recover", victim.bookie_id, "-dr", "-l", str(still_open.ledger_id), "--json")
    assert (json.loads(text)["ledgers_checked"], json.loads(text)["fragments"]) == (1, 0)
    status, text = await shell("recover", victim.bookie_id, "-dr", "-sk", "--json")
    assert json.loads(text)["ledgers_skipped"] == [still_open.ledger_id] and json.loads(text)["fragments"] == 1
    assert (await shell("listunderreplicated"))[1] == ""
    status, text = await shell("decommission", victim.bookie_id, "-f")
    assert status == 0 and "decommissioned" in text
    status, text = await shell("ledgermetadata", str(metadata.ledger_id), "--json")
    assert victim.bookie_id not in str(json.loads(text)["ensembles"])


@pytest.mark.parametrize("command", ["recover", "decommission"])
async def test_recover_and_decommission_refuse_an_address_that_is_no_bookie_of_the_cluster(cluster, command, capsys):
    status, text = await shell(command, "127.0.0.1:1")
    err = capsys.readouterr().err
    assert (status, text) == (1, "") and err.count("\n") == 1
    assert err.startswith(f"bk shell {command}: 127.0.0.1:1 is not a bookie of this cluster (no cookie at ")


async def test_bookieinfo_asks_every_bookie(cluster):
    status, text = await shell("bookieinfo", "--json")
    rows = json.loads(text)
    assert status == 0 and [r["bookie"] for r in rows] == sorted(b.bookie_id for b in cluster.bookies)
    assert all(0 < r["free_disk_space"] <= r["total_disk_space"] and r["readonly"] is False for r in rows)


@pytest.mark.parametrize("command", ["readjournal", "readlog", "readlogmetadata", "lastmark", "listfilesondisc"])
async def test_file_tools_refuse_a_directory_that_is_not_a_bookies_and_create_nothing(command, tmp_path, capsys):
    missing = tmp_path / "no-such-dir"
    status, text = await shell(command, "--data-dir", str(missing), uri=None)
    assert status == 1 and text == "" and not missing.exists()
    assert capsys.readouterr().err == (f"bk shell {command}: {missing} is not a directory; give --data-dir the "
                                       f"bookie's dataDir\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    status, text = await shell(command, "--data-dir", str(empty), uri=None)
    err = capsys.readouterr().err
    assert status == 1 and text == "" and list(empty.iterdir()) == []
    assert err.startswith(f"bk shell {command}: {empty} holds no bookie data (no ") and err.count("\n") == 1


async def test_simpletest_refuses_impossible_ledger_shapes_in_one_line(cluster, capsys):
    with pytest.raises(SystemExit):           # argparse: a count below 1
        await shell("simpletest", "--ensemble", "0")
    assert "argument --ensemble: 0 is not at least 1" in capsys.readouterr().err
    status, text = await shell("simpletest", "--ensemble", "2", "--write-quorum", "3")
    err = capsys.readouterr().err
    assert status == 2 and text == "" and err.count("\n") == 1
    assert err.startswith("bk shell simpletest: need ensemble >= write quorum >= ack quorum >= 1")


def test_a_metastore_nobody_listens_at_is_named_at_once_in_one_line(capsys):
    import time

    from bkcli.main import main
    from bklocal.processes import free_ports
    first, second = free_ports(2)
    for uri in (f"raft://127.0.0.1:{first},127.0.0.1:{second}", f"zk://127.0.0.1:{first};127.0.0.1:{second}/ledgers"):
        started = time.monotonic()
        assert main(["shell", "listbookies", "--metastore", uri]) == 1
        err = capsys.readouterr().err
        assert time.monotonic() - started < 5 and err.count("\n") == 1
        assert err.startswith(f"bk shell listbookies: nothing is listening at {uri}: 127.0.0.1:{first} (")


async def test_cookie_commands_list_get_update_create_and_delete(cluster, tmp_path, capsys):
    bookie = sorted(b.bookie_id for b in cluster.bookies)[0]
    assert (await shell("cookie_list"))[1].split() == sorted(b.bookie_id for b in cluster.bookies)
    status, text = await shell("cookie_get", bookie)
    assert status == 0 and f"bookie_id" in text and bookie in text
    saved = tmp_path / "cookie"
    saved.write_text(text)
    assert (await shell("cookie_delete", bookie))[0] == 1            # it is running: refused
    assert "is registered (running)" in capsys.readouterr().err
    assert (await shell("cookie_create", bookie, "-cf", str(saved)))[0] == 1     # exists already
    assert (await shell("cookie_update", bookie, "-cf", str(saved))) == (0, f"replaced {bookie}'s cookie\n")
    assert (await shell("cookie_delete", bookie, "-f")) == (0, f"deleted {bookie}'s cookie\n")
    assert bookie not in (await shell("cookie_list"))[1].split()
    other = sorted(b.bookie_id for b in cluster.bookies)[1]
    capsys.readouterr()
    assert (await shell("cookie_create", other, "-cf", str(saved)))[0] == 1      # someone else's cookie
    assert capsys.readouterr().err == f"bk shell cookie_create: {saved} is the cookie of {bookie}, not of {other}\n"
    torn = tmp_path / "torn"
    torn.write_text(text.replace(bookie, "127.0.0.1:1"))                          # checksum no longer fits
    assert (await shell("cookie_create", bookie, "-cf", str(torn)))[0] == 1
    assert "unreadable cookie" in capsys.readouterr().err
    assert (await shell("cookie_create", bookie, "-cf", str(saved))) == (0, f"registered {bookie}'s cookie\n")
    assert (await shell("cookie_get", bookie))[1] == text


async def test_metaformat_and_nukeexistingcluster_refuse_until_forced_and_bookies_are_down(cluster, capsys):
    import bkclient
    from bkcore.metaops import Children, Get, MetaCode
    from bkmetastore.layout_node import layout_node_path
    assert (await shell("initnewcluster"))[0] == 0
    async with bkclient.connect(URI) as bk:
        ledger = await bk.create_ledger(password=b"pw")
        await ledger.add(b"x")
        root = bk.layout.root
    capsys.readouterr()
    assert (await shell("metaformat", "-f"))[0] == 1
    assert "stop every bookie first" in capsys.readouterr().err
    assert (await shell("listledgers"))[1].split() == [str(ledger.ledger_id)]     # nothing was deleted
    for bookie in list(cluster.bookies):
        await cluster.stop(bookie)
    assert (await shell("metaformat"))[0] == 1                   # no terminal to ask on, no -f
    assert "There is no terminal to ask on: give -f to do it" in capsys.readouterr().err
    assert (await shell("metaformat", "-n"))[0] == 1             # BookKeeper's -n: ask nothing, do nothing
    assert "-n asks nothing, so nothing was done: give -f as well" in capsys.readouterr().err
    assert (await shell("listledgers"))[1].split() == [str(ledger.ledger_id)]
    status, text = await shell("metaformat", "-f", "-n")
    assert status == 0 and text.startswith("metaformat: deleted ")
    assert (await shell("listledgers"))[1] == "" and (await shell("cookie_list"))[1] == ""
    async with bkclient.connect(URI) as bk:
        assert (await bk.store.execute(Get(layout_node_path(root)))).code is MetaCode.OK     # the layout stays
        assert (await shell("nukeexistingcluster", "-f"))[0] == 0
        assert (await bk.store.execute(Children(root))).code is MetaCode.NO_NODE


async def test_ledgermetadata_dumps_to_a_file_and_restores_from_it(cluster, tmp_path, capsys):
    import bkclient
    async with bkclient.connect(URI) as bk:
        first = await bk.create_ledger(password=b"pw")
        await first.add_many([b"a", b"b"])
        await first.close()
        second = await bk.create_ledger(password=b"pw")
    dump = tmp_path / "metadata"
    status, _ = await shell("ledgermetadata", str(first.ledger_id), "-d", str(dump))
    assert status == 0 and dump.stat().st_size > 0
    before = (await shell("ledgermetadata", str(first.ledger_id), "--json"))[1]
    assert (await shell("deleteledger", str(first.ledger_id), "-f"))[0] == 0
    assert (await shell("ledgermetadata", str(first.ledger_id)))[0] == 1            # gone
    status, text = await shell("ledgermetadata", "-l", str(first.ledger_id), "-r", str(dump), "--json")   # BK's -l
    assert status == 0 and json.loads(text)["state"] == "CLOSED"
    restored = json.loads((await shell("ledgermetadata", str(first.ledger_id), "--json"))[1])
    assert {k: v for k, v in restored.items() if k != "version"} == {
        k: v for k, v in json.loads(before).items() if k != "version"}
    capsys.readouterr()
    assert (await shell("ledgermetadata", str(second.ledger_id), "-r", str(dump)))[0] == 1
    assert f"holds the metadata of ledger {first.ledger_id}, not {second.ledger_id}" in capsys.readouterr().err
    junk = tmp_path / "junk"
    junk.write_bytes(b"not metadata")
    assert (await shell("ledgermetadata", str(second.ledger_id), "-r", str(junk)))[0] == 1
    assert "is not a ledger metadata dump" in capsys.readouterr().err
    assert (await shell("ledgermetadata"))[0] == 1
    assert "which ledger? give its id (or -l ID)" in capsys.readouterr().err


async def test_clusterinfo_and_listunderreplicated_with_its_filters(cluster):
    import bkclient
    from bkcore.metaops import Create
    victim = sorted(cluster.bookies, key=lambda b: b.bookie_id)[0]
    await cluster.stop(victim)
    status, text = await shell("clusterinfo", "--json")
    info = json.loads(text)
    assert status == 0 and (info["totalBookiesCount"], info["writableBookiesCount"],
                            info["unavailableBookiesCount"]) == (3, 2, 1)
    assert (info["auditorElected"], info["clusterUnderReplicated"], info["ledgerReplicationEnabled"]) == (
        False, False, True)
    async with bkclient.connect(URI) as bk:          # marks as an auditor leaves them, one being worked on
        await bk.store.execute(Create(bk.layout.underreplicated_ledger_path(7), b"127.0.0.1:1\n127.0.0.1:2"))
        await bk.store.execute(Create(bk.layout.underreplicated_ledger_path(9), b"127.0.0.1:2"))
        await bk.store.execute(Create(bk.layout.replication_lock_path(9), b"worker-a"))
    assert (await shell("listunderreplicated"))[1] == "7\t127.0.0.1:1,127.0.0.1:2\n9\t127.0.0.1:2\n"
    assert (await shell("listunderreplicated", "-mr", "127.0.0.1:1"))[1] == "7\t127.0.0.1:1,127.0.0.1:2\n"
    assert (await shell("listunderreplicated", "-emr", "127.0.0.1:1"))[1] == "9\t127.0.0.1:2\n"
    status, text = await shell("listunderreplicated", "-prw", "--json")
    assert json.loads(text) == {"7": {"lost": ["127.0.0.1:1", "127.0.0.1:2"], "worker": None},
                                "9": {"lost": ["127.0.0.1:2"], "worker": "worker-a"}}
    assert json.loads((await shell("clusterinfo", "--json"))[1])["clusterUnderReplicated"] is True


async def test_updatebookieinledger_renames_a_moved_bookie_in_every_ledger(cluster, capsys):
    import bkclient
    await cluster.add_bookie()
    first, second, third, spare = sorted(b.bookie_id for b in cluster.bookies)
    async with bkclient.connect(URI) as bk:
        placed = []
        for bookies in ((first, second, third), (first, second, third), (second, third, spare)):
            ledger = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"pw", bookies=bookies)
            await ledger.add(b"x")
            placed.append((await ledger.close()).ledger_id)
    assert (await shell("updatebookieinledger", "-bs", first, "-bd", spare))[0] == 1    # it still runs
    assert "stop it first" in capsys.readouterr().err
    await cluster.stop(next(b for b in cluster.bookies if b.bookie_id == first))
    assert (await shell("updatebookieinledger", "-bs", first, "-bd", "127.0.0.1:1"))[0] == 1
    assert "is not a registered bookie" in capsys.readouterr().err
    status, text = await shell("updatebookieinledger", "-bs", first, "-bd", spare, "--json")
    assert status == 0 and json.loads(text)["ledgers"] == placed[:2]
    for ledger_id, expected in zip(placed, ([spare, second, third], [spare, second, third], [second, third, spare])):
        after = json.loads((await shell("ledgermetadata", str(ledger_id), "--json"))[1])
        assert after["ensembles"] == {"0": expected}
    # A ledger on both addresses would end with two copies on one bookie: refused.
    await cluster.stop(next(b for b in cluster.bookies if b.bookie_id == third))
    assert (await shell("updatebookieinledger", "-bs", third, "-bd", spare))[0] == 1
    assert f"names both {third} and {spare}" in capsys.readouterr().err


async def test_bookieformat_empties_a_stopped_bookie_and_can_forget_its_cookie(cluster, capsys):
    import os
    bookie = sorted(cluster.bookies, key=lambda b: b.bookie_id)[0]
    data_dir = bookie.config.data_dir
    assert (await shell("bookieformat", "--data-dir", data_dir, "-f"))[0] == 1          # still running
    assert "stop it first" in capsys.readouterr().err
    await cluster.stop(bookie)
    assert (await shell("bookieformat", "--data-dir", data_dir))[0] == 1                # no -f
    assert "give -f to do it" in capsys.readouterr().err
    status, text = await shell("bookieformat", "--data-dir", data_dir, "-f", "-d", "--json")
    assert status == 0 and json.loads(text)["bookie"] == bookie.bookie_id
    assert not any(os.path.exists(os.path.join(data_dir, name)) for name in ("journal", "ledgers", "index"))
    assert bookie.bookie_id not in (await shell("cookie_list"))[1].split()
    assert (await shell("bookieformat", "--data-dir", data_dir, "-f"))[0] == 1          # nothing left to format
    assert "holds no readable bookie cookie" in capsys.readouterr().err
