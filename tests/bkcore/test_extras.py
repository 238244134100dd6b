"""A missing optional extra is named in one line with the pip command that installs it."""

import sys

import pytest

from bkcli.main import main
from bkcore.extras import DISTRIBUTION, MissingExtra, missing_module, require_extra
from bkmetastore.uri import open_metastore


def test_installed_extras_are_found_and_a_hidden_one_is_named(monkeypatch):
    assert missing_module("grpc") is None and missing_module("zookeeper") is None
    monkeypatch.setitem(sys.modules, "grpc", None)
    assert missing_module("grpc") == "grpc"
    with pytest.raises(MissingExtra, match=rf"^tables needs the 'grpc' extra \(no module grpc here\): "
                                           rf"pip install '{DISTRIBUTION}\[grpc\]'$"):
        require_extra("grpc", "tables")


def test_a_table_command_without_grpc_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "grpc", None)
    assert main(["table", "get", "-t", "demo", "-k", "key"]) == 1
    assert capsys.readouterr().err == (f"bk table: talking to stream storage over gRPC needs the 'grpc' extra (no "
                                       f"module grpc here): pip install '{DISTRIBUTION}[grpc]'\n")


async def test_a_zookeeper_uri_without_kazoo_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "kazoo", None)
    with pytest.raises(MissingExtra, match=r"pip install '.*\[zookeeper\]'"):
        await open_metastore("zk://127.0.0.1:1/ledgers")
