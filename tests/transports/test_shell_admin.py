"""`bk shell` whatisinstanceid, updateledgers, localconsistencycheck, the confirmation prompts
(answered on a real pseudo-terminal) and progress output, against in-process bookies on real
files and TCP (memory:// metastore)."""

import dataclasses
import io
import json
import os
import pty
import sys
import time
import uuid

import pytest

import bkclient
from bkcore.bookie.entrylog import RECORD_HEADER, entry_log_name
from bkcore.bookie.index import entry_key, pack_location, unpack_location
from bkcore.metaops import Delete, Get, MetaCode
from bktransports.lmdb_index import LmdbIndexStore

from test_shell import shell as run_in_shell

URI = "memory://shell-admin"


@pytest.fixture
async def cluster(start_cluster):
    return await start_cluster(URI, 3)


async def shell(*argv: str, uri: str | None = URI) -> tuple[int, str]:
    return await run_in_shell(*argv, uri=uri)


async def write_ledgers(count: int, *, bookies=(), entries: int = 3) -> list[int]:
    ledger_ids = []
    async with bkclient.connect(URI) as bk:
        for _ in range(count):
            ledger = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"pw", bookies=bookies)
            await ledger.add_many([b"entry %d" % i for i in range(entries)])
            ledger_ids.append((await ledger.close()).ledger_id)
    return ledger_ids


async def ensembles(ledger_id: int) -> dict:
    return json.loads((await shell("ledgermetadata", str(ledger_id), "--json"))[1])["ensembles"]


# ---- whatisinstanceid ------------------------------------------------------------------------

async def test_the_instance_id_is_made_with_the_cluster_renewed_by_metaformat_and_guards_nuke(cluster, capsys):
    status, text = await shell("whatisinstanceid")
    first = text.strip()
    assert status == 0 and str(uuid.UUID(first)) == first        # made when the first bookie came
    assert json.loads((await shell("whatisinstanceid", "--json"))[1])["instanceId"] == first
    status, text = await shell("initnewcluster")
    assert status == 0 and f"instance id {first}" in text          # kept
    for bookie in list(cluster.bookies):
        await cluster.stop(bookie)
    status, text = await shell("metaformat", "-f", "--json")
    renewed = json.loads(text)["instanceId"]
    assert status == 0 and renewed != first and (await shell("whatisinstanceid"))[1] == f"{renewed}\n"
    # BookKeeper's nukeexistingcluster -i: only the cluster whose id it is given.
    capsys.readouterr()
    assert (await shell("nukeexistingcluster", "-i", first))[0] == 1
    assert capsys.readouterr().err == (f"bk shell nukeexistingcluster: the cluster at /ledgers has instance id "
                                       f"{renewed}, not {first}: nothing was deleted\n")
    with pytest.raises(SystemExit):                              # -f or -i, not both
        await shell("nukeexistingcluster", "-f", "-i", renewed)
    assert (await shell("nukeexistingcluster", "-i", renewed))[0] == 0
    async with bkclient.connect(URI) as bk:                      # (a client remakes a cluster on first use)
        assert (await bk.store.execute(Get(bk.layout.root + "/cookies"))).code is MetaCode.NO_NODE


async def test_a_cluster_without_an_instance_id_is_told_how_to_get_one(cluster, capsys):
    async with bkclient.connect(URI) as bk:
        await bk.store.execute(Delete(bk.layout.instance_id_path))
    capsys.readouterr()
    assert (await shell("whatisinstanceid")) == (1, "")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bk shell initnewcluster records one" in err
    status, text = await shell("initnewcluster", "--json")
    made = json.loads(text)
    assert status == 0 and "/ledgers/INSTANCEID" in made["made"]
    assert (await shell("whatisinstanceid"))[1] == f"{made['instanceId']}\n"


# ---- updateledgers and updatebookieinledger ----------------------------------------------------

async def test_updateledgers_renames_a_bookie_that_now_goes_by_its_hostname(cluster, capsys):
    moved = sorted(cluster.bookies, key=lambda b: b.bookie_id)[0]
    ip_id = moved.bookie_id
    port = moved.config.port
    placed = await write_ledgers(4)
    assert all(ip_id in ensembles_ for ensembles_ in [(await ensembles(i))["0"] for i in placed])
    # The bookie comes back as localhost:PORT (its advertised address now a hostname; a fresh
    # data directory, since its cookie names its old id).
    await cluster.stop(moved)
    moved.config = dataclasses.replace(moved.config, advertised_address=f"localhost:{port}",
                                       data_dir=moved.config.data_dir + "-renamed")
    await cluster.restart(moved)
    assert moved.bookie_id == f"localhost:{port}"
    started = time.monotonic()
    status, text = await shell("updateledgers", "-b", "hostname", "-s", "4", "-l", "3", "--json")
    elapsed = time.monotonic() - started
    report = json.loads(text)
    assert status == 0 and report["renames"] == {ip_id: f"localhost:{port}"}
    assert report["ledgers"] == placed[:3] and report["ledgers_read"] == 3          # -l 3
    assert elapsed >= 0.45                       # 3 updates at 4 a second: the 3rd goes 0.5 s after the 1st
    assert capsys.readouterr().err == ""         # no bar into a capture, nothing without -v
    for ledger_id in placed[:3]:
        assert f"localhost:{port}" in (await ensembles(ledger_id))["0"] and ip_id not in (await ensembles(ledger_id))["0"]
    assert ip_id in (await ensembles(placed[3]))["0"]
    # -v: a plain line every -p seconds (here after every ledger), never a carriage return.
    status, text = await shell("updateledgers", "-b", "hostname", "-v", "-p", "0", "-s", "100")
    err = capsys.readouterr().err
    assert status == 0 and text == f"{ip_id} -> localhost:{port}\nupdated 1 of 4 ledgers read\n"
    assert "\r" not in err and err.splitlines()[-1] == "4 of 4 ledgers read, 1 updated"
    async with bkclient.connect(URI) as bk:                 # the ledgers still read
        reader = await bk.open_ledger(placed[3], password=b"pw", recovery=False)
        assert await reader.read(0, 2) == [b"entry 0", b"entry 1", b"entry 2"]
    # Back to IPs: localhost:PORT runs, so no IP form of it may replace it; the others have no
    # hostname form in any ledger. Nothing changes.
    status, text = await shell("updateledgers", "-b", "ip", "--json")
    assert status == 0 and json.loads(text)["ledgers"] == []
    assert f"localhost:{port}" in (await ensembles(placed[0]))["0"]


async def test_updatebookieinledger_shares_the_paced_loop_and_refuses_two_copies_on_one_bookie(cluster, capsys):
    await cluster.add_bookie()
    first, second, third, spare = sorted(b.bookie_id for b in cluster.bookies)
    placed = await write_ledgers(2, bookies=(first, second, third))
    await cluster.stop(next(b for b in cluster.bookies if b.bookie_id == first))
    status, text = await shell("updatebookieinledger", "-sb", first, "-db", spare, "-r", "1", "--json")
    assert status == 0 and json.loads(text)["ledgers"] == placed
    assert [(await ensembles(i))["0"] for i in placed] == [[spare, second, third]] * 2
    await cluster.stop(next(b for b in cluster.bookies if b.bookie_id == third))
    capsys.readouterr()
    assert (await shell("updatebookieinledger", "-bs", third, "-bd", spare))[0] == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"names both {third} and {spare}" in err and "(updated so far: [])" in err
    with pytest.raises(SystemExit):
        await shell("updatebookieinledger", "-bs", third, "-bd", spare, "-s", "0")
    assert "--updatepersec: 0 is not at least 1" in capsys.readouterr().err


# ---- localconsistencycheck ----------------------------------------------------------------------

async def test_localconsistencycheck_finds_what_was_planted_in_a_stopped_bookies_files(cluster, capsys):
    [ledger_id] = await write_ledgers(1, entries=6)
    bookie = cluster.bookies[0]
    await bookie.server.checkpoint()
    await cluster.stop(bookie)
    data_dir = bookie.config.data_dir
    status, text = await shell("localconsistencycheck", "--data-dir", data_dir, uri=None)
    assert status == 0 and text.startswith("checked 6 entries of 1 ledgers (6 CRC32C digests verified")
    assert text.endswith(": no inconsistency\n")
    # Plant two problems: a record's bytes flipped in its entry log, and an index entry that
    # points past the end of its log.
    index = LmdbIndexStore(os.path.join(data_dir, "index"))
    log_id, offset = unpack_location(index.get(entry_key(ledger_id, 2)))
    with open(os.path.join(data_dir, "ledgers", entry_log_name(log_id)), "r+b") as log:
        log.seek(offset + RECORD_HEADER.size + 30)
        log.write(b"\x00\xff\x00")
    size = os.path.getsize(os.path.join(data_dir, "ledgers", entry_log_name(log_id)))
    index.write({entry_key(ledger_id, 5): pack_location(log_id, size + 4096)}, [])
    index.close()
    capsys.readouterr()
    status, text = await shell("localconsistencycheck", "--data-dir", data_dir, uri=None)
    err = capsys.readouterr().err
    assert status == 1
    assert [line.split(":")[0] for line in text.splitlines()] == [f"ledger {ledger_id} entry 2",
                                                                 f"ledger {ledger_id} entry 5"]
    assert "checksum mismatch" in text.splitlines()[0] and "cut short" in text.splitlines()[1]
    assert err == ("bk shell localconsistencycheck: checked 6 entries of 1 ledgers (4 CRC32C digests verified, 0 "
                   "not checkable without the ledger's password): 2 inconsistencies\n")
    status, text = await shell("localconsistencycheck", "--data-dir", data_dir, "--json", uri=None)
    report = json.loads(text)
    assert status == 1 and [(p["ledger_id"], p["entry_id"]) for p in report["inconsistencies"]] == [
        (ledger_id, 2), (ledger_id, 5)]


@pytest.mark.parametrize("missing", ["index", "everything"])
async def test_localconsistencycheck_refuses_a_directory_that_is_not_a_bookies(tmp_path, capsys, missing):
    (tmp_path / "ledgers").mkdir()
    target = tmp_path if missing == "index" else tmp_path / "nowhere"
    status, text = await shell("localconsistencycheck", "--data-dir", str(target), uri=None)
    err = capsys.readouterr().err
    assert (status, text) == (1, "") and err.count("\n") == 1 and "give --data-dir the bookie's dataDir" in err
    assert not (tmp_path / "index").exists() and not (tmp_path / "nowhere").exists()


# ---- confirmation prompts -------------------------------------------------------------------

@pytest.fixture
def terminal(monkeypatch):
    """stdin is a real pseudo-terminal; answer(text) types into it."""
    master, slave = pty.openpty()
    stdin = os.fdopen(slave, "r", buffering=1)
    monkeypatch.setattr(sys, "stdin", stdin)

    class Keyboard:
        def answer(self, text: str) -> None:
            os.write(master, text.encode())

    yield Keyboard()
    stdin.close()
    os.close(master)


async def test_deleteledger_asks_on_a_terminal_and_does_only_what_is_confirmed(cluster, terminal, capsys):
    [ledger_id] = await write_ledgers(1)
    capsys.readouterr()
    terminal.answer("n\n")
    assert (await shell("deleteledger", str(ledger_id))) == (1, "")
    err = capsys.readouterr().err
    assert err == (f"Are you sure to delete ledger {ledger_id}? (Y or N) "
                   f"bk shell deleteledger: not confirmed; nothing was done\n")
    assert (await shell("listledgers"))[1].split() == [str(ledger_id)]
    terminal.answer("maybe\nYES\n")                # asked again after an answer that is neither
    assert (await shell("deleteledger", str(ledger_id))) == (0, f"deleted ledger {ledger_id}\n")
    assert "Invalid input: maybe\n" in capsys.readouterr().err
    assert (await shell("listledgers"))[1] == ""


async def test_decommission_and_cookie_delete_ask_and_go_ahead_on_yes(cluster, terminal, capsys):
    await cluster.add_bookie()
    await write_ledgers(1)
    victim = cluster.bookies[0]
    await cluster.stop(victim)
    terminal.answer("y\n")
    status, text = await shell("decommission", victim.bookie_id)
    assert status == 0 and "decommissioned" in text
    assert f"Are you sure to decommission {victim.bookie_id}" in capsys.readouterr().err
    other = cluster.bookies[1]
    await cluster.stop(other)
    terminal.answer("n\n")
    assert (await shell("cookie_delete", other.bookie_id))[0] == 1
    assert other.bookie_id in (await shell("cookie_list"))[1].split()
    terminal.answer("y\n")
    assert (await shell("cookie_delete", other.bookie_id))[0] == 0
    assert other.bookie_id not in (await shell("cookie_list"))[1].split()


async def test_with_no_terminal_every_destructive_command_refuses_in_one_line_naming_f(cluster, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))      # an answer in a pipe is not read
    [ledger_id] = await write_ledgers(1)
    victim = cluster.bookies[0]
    await cluster.stop(victim)
    commands = [("deleteledger", str(ledger_id)), ("recover", victim.bookie_id),
                ("decommission", victim.bookie_id), ("cookie_delete", victim.bookie_id),
                ("bookieformat", "--data-dir", victim.config.data_dir)]
    capsys.readouterr()
    for argv in commands:
        assert (await shell(*argv)) == (1, ""), argv
        err = capsys.readouterr().err
        assert err.startswith(f"bk shell {argv[0]}: Are you sure") and err.count("\n") == 1, err
        assert err.endswith("There is no terminal to ask on: give -f to do it\n")
    assert (await shell("listledgers"))[1].split() == [str(ledger_id)]
    assert victim.bookie_id in (await shell("cookie_list"))[1].split()
    assert os.path.isdir(os.path.join(victim.config.data_dir, "journal"))
    # What asks nothing still runs: a dry run of recover changes nothing.
    assert (await shell("recover", victim.bookie_id, "-dr"))[0] == 0


# ---- progress ---------------------------------------------------------------------------------

async def test_recover_draws_its_bar_on_a_terminal_and_nothing_into_a_pipe(cluster, monkeypatch, capsys):
    await write_ledgers(3)
    victim = cluster.bookies[0]
    await cluster.stop(victim)
    await cluster.add_bookie()
    capsys.readouterr()
    status, text = await shell("recover", victim.bookie_id, "-f", "--json")
    assert status == 0 and json.loads(text)["fragments"] == 3
    assert capsys.readouterr().err == ""
    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as terminal_err:
        monkeypatch.setattr(sys, "stderr", terminal_err)
        status, text = await shell("recover", victim.bookie_id, "-f", "--json")
        terminal_err.flush()
        drawn = os.read(master, 65536).decode()
    os.close(master)
    assert status == 0 and "\r" not in text                                   # stdout: the JSON alone
    assert f"[{'#' * 30}] 3/3 ledgers" in drawn and drawn.startswith("\r\x1b[K") and drawn.endswith("\r\x1b[K")
