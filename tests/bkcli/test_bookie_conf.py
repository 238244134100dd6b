"""A bookie configured as BookKeeper's is: bk_server.conf (Java properties) with its key names,
BK_<key> environment overrides, unsupported keys named; and the repository's sample starts."""

import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from bkcli.bookie_config import ConfigError, load_bookie_config
from bkcli.properties import parse_properties
from bklocal.processes import free_ports

SAMPLE = pathlib.Path(__file__).resolve().parents[2] / "conf" / "bk_server.conf"


def test_java_properties_are_read_as_java_reads_them():
    text = ("# comment\n! also a comment\n  bookiePort=3181\njournalDirectories : /data/j\nzkServers localhost:2181\n"
            "long = first \\\n      second\nkey\\=with\\:separators = v\nunicode=\\u0041\\tB\nempty=\nbookiePort=3182\n")
    assert parse_properties(text) == {"bookiePort": "3182", "journalDirectories": "/data/j",
                                      "zkServers": "localhost:2181", "long": "first second",
                                      "key=with:separators": "v", "unicode": "A\tB", "empty": ""}


def write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_a_bookkeeper_conf_maps_onto_this_bookies_options_and_names_what_it_leaves_out(tmp_path):
    base = tmp_path / "bk"
    path = write(tmp_path, "bk_server.conf", f"""
zkServers=zk1:2181,zk2:2181
zkLedgersRootPath=/cluster-a/ledgers
bookiePort=3190
bookieId=10.0.0.5:3190
journalDirectories={base}/journal
ledgerDirectories={base}/ledgers
indexDirectories={base}/index
httpServerEnabled=true
journalFlushWhenQueueEmpty=false
minorCompactionThreshold=0.3
ledgerStorageClass=org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage
""")
    uri, config, notes = load_bookie_config(path, environ={})
    assert uri == "zk://zk1:2181,zk2:2181/cluster-a/ledgers"
    assert (config.port, config.advertised_address, config.http_port) == (3190, "10.0.0.5:3190", 8080)
    assert (config.data_dir, config.journal.journal_dir, config.journal.ledger_dirs) == (str(base), "journal",
                                                                                        ("ledgers",))
    assert config.bookie.journal_flush_when_queue_empty is False
    assert config.compaction.minor_compaction_threshold == 0.3
    assert notes == [f"{path}: not supported here, so left out: indexDirectories, ledgerStorageClass "
                     f"(docs/operations.md lists what is)"]
    # BookKeeper's metadataServiceUri (hosts apart by ';') wins over zkServers.
    with open(path, "a") as file:
        file.write("metadataServiceUri=zk+hierarchical://a:2181;b:2181/ledgers\nhttpServerEnabled=false\n")
    uri, config, _ = load_bookie_config(path, environ={})
    assert uri == "zk+hierarchical://a:2181;b:2181/ledgers" and config.http_port == 0


def test_environment_overrides_the_file_in_either_format(tmp_path):
    toml = write(tmp_path, "bookie.toml", f'metadataServiceUri = "memory://x"\ndataDir = "{tmp_path}"\n'
                                          f'bookiePort = 3181\n')
    conf = write(tmp_path, "bookie.conf", f"metadataServiceUri=memory://x\ndataDir={tmp_path}\nbookiePort=3181\n")
    for path in (toml, conf):
        _, config, _ = load_bookie_config(path, environ={"BK_bookiePort": "3199", "BK_METASTORE": "ignored",
                                                         "BK_journalMaxBackups": "7"})
        assert (config.port, config.journal.journal_max_backups) == (3199, 7)
        with pytest.raises(ConfigError, match=r"bookiePort must be int, not 'many'"):
            load_bookie_config(path, environ={"BK_bookiePort": "many"})


def test_what_this_bookie_cannot_hold_is_refused_in_one_line(tmp_path):
    two = write(tmp_path, "two.conf", "metadataServiceUri=memory://x\nledgerDirectories=/a/l1,/a/l2\n")
    with pytest.raises(ConfigError, match=r"ledgerDirectories lists 2 directories; this bookie keeps one"):
        load_bookie_config(two, environ={})
    apart = write(tmp_path, "apart.conf", "metadataServiceUri=memory://x\njournalDirectories=/j\nledgerDirectories=/l\n")
    with pytest.raises(ConfigError, match=r"share no directory but /; set dataDir"):
        load_bookie_config(apart, environ={})
    boolean = write(tmp_path, "bool.conf", f"metadataServiceUri=memory://x\ndataDir={tmp_path}\n"
                                           f"autoRecoveryDaemonEnabled=yes\n")
    with pytest.raises(ConfigError, match=r"autoRecoveryDaemonEnabled must be bool, not 'yes'"):
        load_bookie_config(boolean, environ={})


def test_the_sample_bk_server_conf_starts_a_bookie_as_it_is(tmp_path):
    """conf/bk_server.conf with nothing changed but the metastore (a memory:// one here, so that no
    standalone cluster is needed) and the ports (free ones); its directories land under the
    directory the bookie starts in."""
    bookie_port, http_port = free_ports(2)
    environment = {**os.environ, "BK_metadataServiceUri": "memory://sample", "BK_bookiePort": str(bookie_port),
                   "BK_httpServerPort": str(http_port)}
    process = subprocess.Popen([sys.executable, "-m", "bkcli.main", "bookie", "--config", str(SAMPLE)],
                               cwd=tmp_path, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    try:
        output = ""
        deadline = time.monotonic() + 60
        while "listening on" not in output:
            line = process.stdout.readline()
            assert line and time.monotonic() < deadline, output
            output += line
        assert f"127.0.0.1:{bookie_port}" in output and "not supported" not in output
        assert (tmp_path / "data" / "bk_server" / "journal").is_dir()
        assert (tmp_path / "data" / "bk_server" / "ledgers").is_dir()
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
