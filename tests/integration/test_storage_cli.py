"""`bk namespace`, `bk stream` and `bk table` against a real cluster (a raft-lite node, three
bookies and `bk stream-storage`, as processes): every command and option, its output (text
and --json / -w json) and its exit status (0 done, 1 refused, 2 bad usage).

Most commands run in this process (bkcli.main.main, stdout and stderr captured); a watch and
an interactive-less txn read from stdin run as `bk` processes, as users run them."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("bookkeeper", reason="the grpc extra (apache-bookkeeper-client) is not installed")

from bkcli.main import main as bk_main  # noqa: E402

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src")


@pytest.fixture(scope="module")
def address(stream_storage_cluster):
    return f"127.0.0.1:{stream_storage_cluster.stream_storage_port}"


class Bk:
    """`bk -s ADDRESS ...` in this process: (exit status, stdout, stderr)."""

    def __init__(self, address: str) -> None:
        self.address = address

    def __call__(self, *argv: str, stdin: str | None = None) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _stdin(stdin):
            try:
                code = bk_main(["-s", self.address, *argv])
            except SystemExit as exc:          # argparse's refusals
                code = exc.code
        return code, out.getvalue(), err.getvalue()

    def ok(self, *argv: str, stdin: str | None = None) -> str:
        code, out, err = self(*argv, stdin=stdin)
        assert code == 0 and err == "", (code, err)
        return out

    def json(self, *argv: str, stdin: str | None = None):
        """The one JSON document a command prints with --json (nothing else on stdout)."""
        return json.loads(self.ok(*argv, "--json", stdin=stdin))

    def refused(self, *argv: str, stdin: str | None = None, code: int = 1) -> str:
        """A refusal: the exit status `code`, nothing on stdout, one line on stderr."""
        got, out, err = self(*argv, stdin=stdin)
        assert (got, out) == (code, ""), (got, out, err)
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err
        return err

    def misused(self, *argv: str) -> str:
        """argparse's refusal: exit status 2, nothing on stdout, the usage and one error line."""
        got, out, err = self(*argv)
        assert (got, out) == (2, ""), (got, out, err)
        assert err.startswith("usage: ") and "error: " in err.splitlines()[-1], err
        return err.splitlines()[-1]

    def process(self, *argv: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "bkcli.main", "-s", self.address, *argv], input=stdin,
                              capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC}, timeout=60)


@contextlib.contextmanager
def _stdin(text: str | None):
    if text is None:
        yield
        return
    saved, sys.stdin = sys.stdin, io.StringIO(text)
    try:
        yield
    finally:
        sys.stdin = saved


@pytest.fixture
def bk(address) -> Bk:
    return Bk(address)


@pytest.fixture
def table(bk, request) -> str:
    """A fresh table of its own for each test."""
    name = "t_" + re.sub(r"[^a-z0-9]+", "_", request.node.name.lower())[-50:]
    bk.ok("stream", "create", "--stream", name)
    return name


# -- namespaces and streams ---------------------------------------------------------------------

def test_namespaces_are_created_shown_listed_and_deleted(bk):
    assert bk.ok("namespace", "create", "apps").strip() == "created namespace apps"
    assert bk.ok("stream", "namespace", "--name", "legacy").strip() == "created namespace legacy"   # the seed's form
    assert bk.ok("namespace", "get", "apps").startswith("namespace apps: id ")
    shown = bk.json("namespace", "get", "apps")
    assert shown["namespace"] == "apps" and shown["default_stream_conf"]["ranges"] == 4
    names = bk.json("namespace", "list")["namespaces"]
    assert {"apps", "legacy", "default"} <= set(names) and names == sorted(names)
    assert "apps" in bk.ok("namespace", "list").splitlines()

    assert "NAMESPACE_EXISTS" in bk.refused("namespace", "create", "apps")
    bk.ok("stream", "create", "--stream", "apps/s1")
    assert "still has streams" in bk.refused("namespace", "delete", "apps")        # ILLEGAL_OP
    bk.ok("stream", "delete", "--stream", "apps/s1")
    assert bk.json("namespace", "delete", "apps") == {"namespace": "apps", "deleted": True}
    assert "NAMESPACE_NOT_FOUND" in bk.refused("namespace", "get", "apps")
    assert "apps" not in bk.json("namespace", "list")["namespaces"]


def test_streams_are_created_shown_listed_and_deleted(bk):
    bk.ok("namespace", "create", "media")
    created = bk.json("stream", "create", "--stream", "media/videos")
    assert created["namespace"] == "media" and created["stream"] == "videos" and created["ranges"] == 4
    assert bk.ok("stream", "create", "--stream", "media/audio").startswith("created stream media/audio (id ")
    assert bk.json("stream", "get", "--stream", "media/videos")["id"] == created["id"]
    assert bk.ok("stream", "get", "--stream", "media/videos").startswith("stream media/videos: id ")
    assert bk.ok("stream", "list", "-n", "media").splitlines() == ["audio", "videos"]
    assert bk.json("stream", "list", "--namespace", "media") == {"namespace": "media", "streams": ["audio", "videos"]}
    assert bk.ok("stream", "-w", "json", "delete", "--stream", "media/audio") == \
        '{"namespace": "media", "stream": "audio", "deleted": true}\n'
    assert bk.ok("stream", "list", "-n", "media").splitlines() == ["videos"]
    assert "STREAM_NOT_FOUND" in bk.refused("stream", "get", "--stream", "media/audio")
    assert "NAMESPACE_NOT_FOUND" in bk.refused("stream", "list", "-n", "nowhere")
    assert "STREAM_EXISTS" in bk.refused("stream", "create", "--stream", "media/videos")


# -- put, get, incr, del --------------------------------------------------------------------------

def test_put_get_incr_and_their_json(bk, table):
    assert bk.ok("table", "put", "-t", table, "-k", "greeting", "-v", "hello").strip() == "put greeting"
    assert re.fullmatch(r"greeting = hello  \(version 0, revision \d+\)\n",
                        bk.ok("table", "get", "-t", table, "-k", "greeting"))
    kv = bk.json("table", "get", "-t", table, "-k", "greeting")
    assert (kv["key"], kv["value"], kv["is_number"], kv["version"], kv["expire_time_ms"]) == \
        ("greeting", "hello", False, 0, None)
    assert bk.ok("table", "get", "-t", table, "-k", "greeting", "--keys-only") == "greeting\n"
    assert "value" not in bk.json("table", "get", "-t", table, "-k", "greeting", "--keys-only")
    assert bk.ok("table", "incr", "-t", table, "-k", "visits", "-a", "5") == "visits = 5\n"
    assert bk.json("table", "incr", "-t", table, "-k", "visits", "-a", "2") == {"key": "visits", "total": 7}
    assert bk.json("table", "get", "-t", table, "-k", "visits")["value"] == 7
    # -w json at the group's level, and --write-out json, say the same as --json.
    assert json.loads(bk.ok("table", "-w", "json", "get", "-t", table, "-k", "visits"))["value"] == 7
    assert json.loads(bk.ok("table", "get", "-t", table, "-k", "visits", "--write-out", "json"))["value"] == 7
    assert bk.json("table", "put", "-t", table, "-k", "greeting", "-v", "hi") == \
        {"key": "greeting", "put": True, "ttl_s": None}
    assert "holds a number" in bk.refused("table", "put", "-t", table, "-k", "visits", "-v", "x")


def test_a_missing_key_is_not_an_error(bk, table):
    assert bk.ok("table", "get", "-t", table, "-k", "nothing") == "(no such key)\n"
    assert bk.ok("table", "get", "-t", table, "-k", "nothing", "--json") == "null\n"
    assert bk.ok("table", "get", "-t", table, "-k", "nothing", "--count-only") == "0\n"


def test_del_and_its_prefix_count_what_they_delete(bk, table):
    for key in ("app", "apple", "apricot", "banana"):
        bk.ok("table", "put", "-t", table, "-p", "fruit", "-k", key, "-v", key.upper())
    bk.ok("table", "put", "-t", table, "-k", "apple", "-v", "plain")        # the plain table's key: pkey apple
    assert bk.ok("table", "del", "-t", table, "-p", "fruit", "-k", "ap", "--prefix") == "deleted 3 key(s)\n"
    assert bk.ok("table", "range", "-t", table, "-p", "fruit", "--keys-only") == "banana\n"
    assert bk.json("table", "get", "-t", table, "-k", "apple")["value"] == "plain"       # another pkey
    assert bk.json("table", "del", "-t", table, "-p", "fruit", "-k", "ap", "--prefix") == {"deleted": 0}
    assert bk.ok("table", "delete", "-t", table, "-k", "apple") == "deleted 1 key(s)\n"  # the alias
    assert bk.ok("table", "del", "-t", table, "-k", "apple") == "deleted 0 key(s)\n"
    # A prefix of nothing is every key of the pkey.
    assert bk.json("table", "del", "-t", table, "-p", "fruit", "-k", "", "--prefix") == {"deleted": 1}


# -- range and get --prefix -------------------------------------------------------------------------

def test_range_and_get_prefix_with_limit_keys_only_and_count_only(bk, table):
    for key in ("a", "b1", "b2", "b3", "c"):
        bk.ok("table", "put", "-t", table, "-p", "user", "-k", key, "-v", f"value-{key}")
    listed = bk.ok("table", "range", "-t", table, "-p", "user")
    assert [line.split(" = ")[0] for line in listed.splitlines()] == ["a", "b1", "b2", "b3", "c"]
    assert bk.ok("table", "range", "-t", table, "-p", "user", "--prefix", "b", "--keys-only") == "b1\nb2\nb3\n"
    assert bk.ok("table", "range", "-t", table, "-p", "user", "--limit", "2", "--keys-only") == "a\nb1\n"
    limited = bk.json("table", "range", "-t", table, "-p", "user", "--prefix", "b", "--limit", "2")
    assert [kv["key"] for kv in limited["kvs"]] == ["b1", "b2"] and limited["more"] is True
    assert limited["kvs"][0]["value"] == "value-b1"
    everything = bk.json("table", "range", "-t", table, "-p", "user")
    assert everything["count"] == 5 and everything["more"] is False
    assert bk.ok("table", "range", "-t", table, "-p", "user", "--count-only") == "5\n"
    assert bk.json("table", "range", "-t", table, "-p", "user", "--prefix", "b", "--count-only", "--limit", "1") == \
        {"count": 3}
    assert bk.ok("table", "range", "-t", table, "-p", "user", "--from", "b2", "--to", "c", "--keys-only") == "b2\nb3\nc\n"
    assert bk.ok("table", "get", "-t", table, "-p", "user", "-k", "b", "--prefix", "--keys-only") == "b1\nb2\nb3\n"
    assert bk.ok("table", "get", "-t", table, "-p", "user", "-k", "b", "--prefix", "--count-only") == "3\n"
    assert bk.ok("table", "get", "-t", table, "-p", "user", "-k", "x", "--prefix") == ""
    assert bk.json("table", "get", "-t", table, "-p", "user", "-k", "x", "--prefix") == \
        {"kvs": [], "count": 0, "more": False}
    assert "without --from and --to" in bk.refused("table", "range", "-t", table, "-p", "user", "--prefix", "b",
                                                   "--from", "a", code=2)


# -- TTL ------------------------------------------------------------------------------------------

def test_a_put_with_a_ttl_is_gone_after_it(bk, table):
    assert bk.ok("table", "put", "-t", table, "-k", "session", "-v", "s1", "--ttl", "1") == \
        "put session (expires in 1 s)\n"
    bk.ok("table", "put", "-t", table, "-k", "forever", "-v", "f")
    kv = bk.json("table", "get", "-t", table, "-k", "session")
    assert kv["value"] == "s1" and kv["expire_time_ms"] > time.time() * 1000 - 5000
    time.sleep(2.0)
    assert bk.ok("table", "get", "-t", table, "-k", "session") == "(no such key)\n"
    assert bk.json("table", "get", "-t", table, "-k", "forever")["value"] == "f"
    assert "--ttl: 0 is not at least 1" in bk.misused("table", "put", "-t", table, "-k", "k", "-v", "v", "--ttl", "0")


# -- txn ------------------------------------------------------------------------------------------

def test_a_txn_whose_compares_hold_runs_its_success_operations(bk, table):
    bk.ok("table", "put", "-t", table, "-k", "k", "-v", "v1")
    bk.ok("table", "put", "-t", table, "-k", "k", "-v", "v2")            # version 1
    revision = bk.json("table", "get", "-t", table, "-k", "k")["mod_revision"]
    text = (f'value("k") = "v2"\nversion("k") > "0"\nmod("k") < "{revision + 1}"\n\n'
            'put k "v3 with spaces"\nget k\n\nput k failed\n')
    out = bk.ok("table", "txn", "-t", table, stdin=text)
    lines = out.splitlines()
    assert lines[:4] == ["SUCCESS", "", "put k", ""], out
    assert re.fullmatch(r"k = v3 with spaces  \(version 2, revision \d+\)", lines[4]) and len(lines) == 5
    assert bk.json("table", "get", "-t", table, "-k", "k")["value"] == "v3 with spaces"


def test_a_txn_whose_compares_fail_runs_its_failure_operations(bk, table):
    bk.ok("table", "put", "-t", table, "-k", "k", "-v", "v1")
    text = 'val("k") = "other"\n\nput k never\n\nget k\ndel k\n'
    document = bk.json("table", "txn", "-t", table, stdin=text)
    assert document["succeeded"] is False
    assert [response["op"] for response in document["responses"]] == ["get", "del"]
    assert document["responses"][0]["kv"]["value"] == "v1" and document["responses"][1]["deleted"] == 1
    assert bk.ok("table", "get", "-t", table, "-k", "k") == "(no such key)\n"
    # As a `bk` process reading a pipe; `value("k") = ""` holds for a missing key (create-if-absent).
    done = bk.process("table", "txn", "-t", table, stdin='value("k") = ""\n\nput k created\n')
    assert (done.returncode, done.stdout, done.stderr) == (0, "SUCCESS\n\nput k\n", "")
    done = bk.process("table", "txn", "-t", table, stdin='value("k") = ""\n\nput k again\n\ndel k\n')
    assert (done.returncode, done.stdout) == (0, "FAILURE\n\ndeleted 1 key(s)\n")


def test_a_txn_over_keys_of_one_pkey_and_its_refusals(bk, table):
    bk.ok("table", "put", "-t", table, "-p", "acct", "-k", "balance", "-v", "10")
    text = 'value("balance") = "10"\n\nput balance 5\nput audit "moved 5"\n\n'
    assert bk.ok("table", "txn", "-t", table, "-p", "acct", stdin=text) == "SUCCESS\n\nput balance\n\nput audit\n"
    assert bk.ok("table", "range", "-t", table, "-p", "acct", "--keys-only") == "audit\nbalance\n"
    # Keys of different pkeys cannot share a txn: without -p each key is its own pkey.
    assert "-p PKEY" in bk.refused("table", "txn", "-t", table, stdin=text, code=2)
    # BookKeeper refuses the whole txn when it compares the version of a missing key.
    assert "KEY_NOT_FOUND" in bk.refused("table", "txn", "-t", table, stdin='version("ghost") = "0"\n\nget ghost\n')
    # A put on a counter is refused inside the txn; the rest runs, and the exit status says so.
    bk.ok("table", "incr", "-t", table, "-k", "n", "-a", "1")
    code, out, _ = bk("table", "txn", "-t", table, stdin='\nput n text\nget n\n')
    assert code == 1 and out.splitlines()[:3] == ["SUCCESS", "", "put n refused (BAD_REQUEST)"]


@pytest.mark.parametrize("text, line, words", [
    ('value("k") == "v"\n', 1, "malformed comparison"),
    ('value("k") = "v"\nlease("k") = "1"\n', 2, "no leases"),
    ('version("k") > "one"\n', 1, "whole number"),
    ('\nput k\n', 2, "put KEY VALUE"),
    ('\nget k\nfetch k\n', 3, "unknown operation"),
    ('\nget k --prefix\n', 2, "options"),
    ('\nput k "unclosed\n', 2, "malformed operation"),
    ('\nget k\n\nget k\n\nget k\n', 6, "text after the failure operations"),
])
def test_a_malformed_txn_is_refused_naming_its_line(bk, text, line, words):
    # Refused before anything is sent: the table need not exist.
    err = bk.refused("table", "txn", "-t", "never_created", stdin=text, code=2)
    assert err.startswith(f"bk table txn: line {line}: ") and words in err, err


def test_an_interactive_txn_prompts_on_stderr(bk, table):
    code, out, err = bk("table", "txn", "-t", table, "-i", "--json", stdin='value("k") = ""\n\nput k v\n\n')
    assert code == 0 and json.loads(out)["succeeded"] is True
    assert err.splitlines() == ["compares:", "success requests (get, put, del):", "failure requests (get, put, del):"]


# -- watch ----------------------------------------------------------------------------------------

class Watcher:
    """`bk table watch|get --watch ...` as a process, its stdout lines collected as they come."""

    def __init__(self, address: str, *argv: str) -> None:
        self.lines: list[str] = []
        self.process = subprocess.Popen([sys.executable, "-m", "bkcli.main", "-s", address, "table", *argv],
                                        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": SRC})
        threading.Thread(target=lambda: self.lines.extend(iter(self.process.stdout.readline, "")), daemon=True).start()

    def wait_for(self, count: int, timeout_s: float = 60.0) -> list[str]:
        deadline = time.monotonic() + timeout_s
        while len(self.lines) < count:
            assert time.monotonic() < deadline, f"timed out with {self.lines}"
            assert self.process.poll() is None, f"the watch ended ({self.process.returncode}): {self.lines}"
            time.sleep(0.05)
        return self.lines

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def test_watch_a_prefix_as_json_lines_and_from_a_revision(bk, address, table):
    bk.ok("table", "put", "-t", table, "-p", "cfg", "-k", "db.host", "-v", "h1")
    first = bk.json("table", "get", "-t", table, "-p", "cfg", "-k", "db.host")["mod_revision"]
    bk.ok("table", "put", "-t", table, "-p", "cfg", "-k", "db.port", "-v", "5432")
    watcher = Watcher(address, "watch", "-t", table, "-p", "cfg", "-k", "db.", "--prefix", "--rev", str(first),
                      "--json")
    try:
        watcher.wait_for(2)                          # the two puts since revision `first`
        bk.ok("table", "put", "-t", table, "-p", "cfg", "-k", "web.host", "-v", "w")    # not under the prefix
        bk.ok("table", "del", "-t", table, "-p", "cfg", "-k", "db.host")
        events = [json.loads(line) for line in watcher.wait_for(3)]
    finally:
        watcher.stop()
    assert [(e["type"], e["key"]) for e in events] == [("put", "db.host"), ("put", "db.port"), ("delete", "db.host")]
    assert events[0]["value"] == "h1" and events[0]["revision"] == first and events[1]["value"] == "5432"


def test_get_watch_prints_the_value_then_each_change(bk, address, table):
    bk.ok("table", "put", "-t", table, "-k", "k", "-v", "v1")
    watcher = Watcher(address, "get", "-t", table, "-k", "k", "--watch")
    try:
        assert watcher.wait_for(1)[0].startswith("k = v1  (version 0, ")
        bk.ok("table", "put", "-t", table, "-k", "k", "-v", "v2")
        bk.ok("table", "del", "-t", table, "-k", "k")
        lines = watcher.wait_for(3)
    finally:
        watcher.stop()
    assert lines[1].startswith("k = v2  (version 1, revision ") and re.fullmatch(r"k deleted  \(revision \d+\)\n",
                                                                                  lines[2])


# -- failures and usage -----------------------------------------------------------------------------

def test_refusals_and_bad_usage_keep_their_exit_status(bk, table):
    assert "STREAM_NOT_FOUND" in bk.refused("table", "get", "-t", "no_such_table", "-k", "k", "--json")
    assert "-k/--key" in bk.misused("table", "get", "-t", table)
    assert "--limit: 0 is not at least 1" in bk.misused("table", "range", "-t", table, "-p", "p", "--limit", "0")
    assert "invalid choice: 'yaml'" in bk.misused("table", "get", "-t", table, "-k", "k", "-w", "yaml")
    done = subprocess.run([sys.executable, "-m", "bkcli.main", "-s", "127.0.0.1:1", "namespace", "list"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC}, timeout=60)
    assert done.returncode == 1 and done.stdout == "" and "did not answer" in done.stderr
    assert len(done.stderr.splitlines()) == 1
