"""A cluster whose processes stand on separate loopback addresses (127.0.0.2, 127.0.0.3, ...),
as on separate hosts: every one listens on its own address only, several on the same port, and
they find each other through what they announce, so nothing assumes 127.0.0.1."""

import json
import os
import socket

import pytest

from bkclient.storage_client import StorageClient
from bkcli.main import main
from bklocal.processes import free_ports, spawn_bk, spawn_bookie


def _address_works(host: str) -> bool:
    try:
        with socket.socket() as probe:
            probe.bind((host, 0))
        return True
    except OSError:
        return False


pytestmark = pytest.mark.skipif(not _address_works("127.0.0.9"), reason="this host cannot bind 127.0.0.2-9")


def _refused(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1).close()
        return False
    except ConnectionRefusedError:
        return True


def test_each_process_on_its_own_address(tmp_path, capsys):
    metastore_port, bookie_port, storage_port, peer_port = free_ports(4)
    metastore_hosts = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    bookie_hosts = ["127.0.0.5", "127.0.0.6", "127.0.0.7"]
    storage_hosts = ["127.0.0.8", "127.0.0.9"]
    peers = ",".join(f"{index + 1}={host}:{metastore_port}" for index, host in enumerate(metastore_hosts))
    uri = "raft://" + ",".join(f"{host}:{metastore_port}" for host in metastore_hosts)
    children = []
    try:
        for index, host in enumerate(metastore_hosts):
            directory = tmp_path / f"metastore{index + 1}"
            directory.mkdir()
            children.append(spawn_bk(f"metastore {host}", ["metastore", "--node-id", str(index + 1), "--peers", peers,
                                                          "--data-dir", str(directory)],
                                     log_path=str(directory / "metastore.log"), port=metastore_port,
                                     ready_text="listening on"))
        for host in bookie_hosts:       # the same port on each address
            children.append(spawn_bookie(data_dir=str(tmp_path / f"bookie-{host}"), metastore_uri=uri,
                                         port=bookie_port, extra={"listeningInterface": host}))
        for host in storage_hosts:      # their table calls to each other go to the peer port they announce
            directory = tmp_path / f"storage-{host}"
            children.append(spawn_bk(f"stream storage {host}",
                                     ["stream-storage", "--metastore", uri, "--host", host, "--port", str(storage_port),
                                      "--peer-port", str(peer_port), "--data-dir", str(directory)],
                                     log_path=str(tmp_path / f"storage-{host}.log"), port=storage_port,
                                     ready_text="stream storage listening on"))

        assert main(["shell", "listbookies", "--metastore", uri]) == 0
        assert capsys.readouterr().out.split() == [f"{host}:{bookie_port}" for host in bookie_hosts]
        assert main(["shell", "simpletest", "--metastore", uri, "--num-entries", "20", "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["entries"] == 20 and sorted(report["ensemble"]) == [f"{host}:{bookie_port}"
                                                                          for host in bookie_hosts]
        for port in (metastore_port, bookie_port, storage_port, peer_port):
            assert _refused("127.0.0.1", port), f"something listens on 127.0.0.1:{port}"

        # Writes through either server land in the table, whichever server owns each range.
        with StorageClient(f"{storage_hosts[0]}:{storage_port}") as first:
            first.create_stream("default", "spread")
            table = first.table("default", "spread")
            for index in range(16):
                table.put(b"key-%d" % index, b"value-%d" % index)
        with StorageClient(f"{storage_hosts[1]}:{storage_port}") as second:
            table = second.table("default", "spread")
            assert [table.get(b"key-%d" % index).value for index in range(16)] == [b"value-%d" % index
                                                                                   for index in range(16)]
    finally:
        for child in reversed(children):
            child.stop()
        for child in children:
            if os.path.exists(child.log_path) and child.process.returncode not in (0, -15, None):
                print(child.name, child.log_tail())
