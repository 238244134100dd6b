"""`bk shell deleteledger` as a user runs it: a real `bk` process against a real cluster (a
raft-lite node and a bookie, each a process), asking on a real terminal (a pseudo-terminal) and
refusing in one line when its stdin is no terminal."""

import os
import pty
import subprocess
import sys

import pytest
import trio

import bkclient
from bklocal.standalone import StandaloneCluster

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = StandaloneCluster.on_free_ports(str(tmp_path_factory.mktemp("prompts")), bookie_count=1,
                                              metastore_count=1)
    with cluster.running(log=lambda line: None):
        yield cluster


def new_ledger(uri: str) -> int:
    async def create() -> int:
        async with bkclient.connect(uri) as bk:
            ledger = await bk.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, password=b"pw")
            await ledger.add(b"x")
            return (await ledger.close()).ledger_id
    return trio.run(create)


def ledger_exists(uri: str, ledger_id: int) -> bool:
    async def listed() -> bool:
        async with bkclient.connect(uri) as bk:
            return ledger_id in await bk.list_ledgers()
    return trio.run(listed)


def bk(*argv: str, **popen) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(SRC)}
    return subprocess.Popen([sys.executable, "-m", "bkcli.main", *argv], env=env, **popen)


def on_a_terminal(argv: list[str], answer: str) -> tuple[int, str, str]:
    """Run `bk` with stdin and stderr on a pseudo-terminal; type `answer` once it asks."""
    master, slave = pty.openpty()
    process = bk(*argv, stdin=slave, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    seen = b""
    while b"(Y or N)" not in seen:
        chunk = os.read(master, 4096)
        assert chunk, seen
        seen += chunk
    os.write(master, answer.encode())
    out, _ = process.communicate(timeout=60)
    try:
        while chunk := os.read(master, 4096):
            seen += chunk
    except OSError:             # the terminal's other end is gone with the process
        pass
    os.close(master)
    return process.returncode, out.decode(), seen.decode()


def test_deleteledger_asks_on_a_terminal_and_refuses_without_one(cluster):
    uri = cluster.metastore_uri
    ledger_id = new_ledger(uri)
    argv = ["shell", "deleteledger", str(ledger_id), "--metastore", uri]
    status, out, terminal = on_a_terminal(argv, "n\n")
    assert status == 1 and out == ""
    assert f"Are you sure to delete ledger {ledger_id}? (Y or N) " in terminal and "not confirmed" in terminal
    assert ledger_exists(uri, ledger_id)
    refused = bk(*argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = refused.communicate(timeout=60)
    assert refused.returncode == 1 and out == b"" and err.decode().count("\n") == 1
    assert err.decode().endswith("There is no terminal to ask on: give -f to do it\n")
    assert ledger_exists(uri, ledger_id)
    status, out, terminal = on_a_terminal(argv, "y\n")
    assert (status, out) == (0, f"deleted ledger {ledger_id}\n")
    assert not ledger_exists(uri, ledger_id)
