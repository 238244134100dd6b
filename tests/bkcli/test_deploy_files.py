"""The deployment files (deploy/) are usable as they stand: the bookie's conf loads with every
key supported, the systemd units name commands and files that exist in this repository's
terms, and docs/deploy.md names every file."""

import configparser
import pathlib

from bkcli.bookie_config import load_bookie_config
from bkcli.main import build_parser

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_deploy_bookie_conf_loads_with_nothing_left_out():
    uri, config, notes = load_bookie_config(str(ROOT / "deploy" / "conf" / "bk_server.conf"), environ={})
    assert uri.startswith("zk+hierarchical://") and notes == []
    assert (config.host, config.advertised_address, config.data_dir) == ("10.0.0.11", "10.0.0.11:3181",
                                                                         "/var/lib/bookkeeper")
    assert config.tls_cert_file and config.tls_trust_file and config.auth_secret and config.autorecovery


def test_the_units_run_bk_commands_that_parse():
    parser = build_parser()
    environment = {"${STREAM_STORAGE_HOST}": "10.0.0.21", "${METASTORE_NODE_ID}": "1",
                   "${METASTORE_PEERS}": "1=10.0.0.11:2281,2=10.0.0.12:2281,3=10.0.0.13:2281"}
    for name in ("bk-bookie.service", "bk-stream-storage.service", "bk-metastore.service"):
        unit = configparser.ConfigParser(interpolation=None, strict=False)
        unit.read(ROOT / "deploy" / "systemd" / name)
        command = unit["Service"]["ExecStart"].replace("\\\n", " ").split()
        assert command[0] == "/opt/bookkeeper/venv/bin/bk"
        parser.parse_args([environment.get(arg, arg) for arg in command[1:]])


def test_the_deploy_document_names_every_file():
    text = (ROOT / "docs" / "deploy.md").read_text()
    for path in sorted((ROOT / "deploy").rglob("*")):
        if path.is_file():
            assert str(path.relative_to(ROOT)) in text, path
