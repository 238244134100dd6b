"""TLS and the shared secret on raft-lite members, over real TCP in this process: a secured
3-member cluster elects (its members show each other the secret and check each other's
certificates) and serves a client with the credentials; clients without the secret, with a wrong
one, in the clear, or not trusting the members' CA are refused in one line, and what they send
is not applied; members with different secrets never form a majority."""

import logging
import ssl

import pytest
import trio
import trustme

from bkcore.metaops import Create, Get, MetaCode, op_to_list
from bklocal.processes import free_port
from bkmetastore.api import MetastoreRefused
from bkmetastore.raftlite.client import member_status
from bkcore.wire import FrameDecoder
from bkmetastore.raftlite.connection import decode, encode
from bkmetastore.raftlite.core import MS, RaftConfig
from bkmetastore.uri import open_metastore
from bktransports.raftlite_server import RaftSecurity, RaftServer
from bktransports.tls import server_context

CONFIG = RaftConfig(session_timeout_ns=2_000 * MS)
SECRET = b"s3cret"


@pytest.fixture(scope="module")
def ca():
    return trustme.CA()


@pytest.fixture
def files(ca, tmp_path):
    """The member certificate (for 127.0.0.1) and key, and the CA, as PEM files."""
    cert = ca.issue_cert("127.0.0.1")
    paths = {name: str(tmp_path / name) for name in ("cert.pem", "key.pem", "ca.pem")}
    cert.private_key_and_cert_chain_pem.write_to_path(paths["cert.pem"])
    cert.private_key_pem.write_to_path(paths["key.pem"])
    ca.cert_pem.write_to_path(paths["ca.pem"])
    return paths


def trusting(ca) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


async def start_members(nursery, tmp_path, securities: list[RaftSecurity]) -> tuple[list[str], list[RaftServer]]:
    """One member per RaftSecurity, all of one cluster: their addresses and servers."""
    peers = {i + 1: ("127.0.0.1", free_port()) for i in range(len(securities))}
    servers = []
    for (node_id, (host, port)), security in zip(peers.items(), securities):
        server = RaftServer(node_id=node_id, addresses=peers, data_dir=str(tmp_path / f"n{node_id}"), config=CONFIG,
                            security=security)
        await nursery.start(server.serve, host, port)
        servers.append(server)
    return [f"{h}:{p}" for h, p in peers.values()], servers


@pytest.fixture
async def secured(nursery, tmp_path, files, ca):
    """A 3-member cluster serving TLS and asking for SECRET: (addresses, servers)."""
    security = RaftSecurity(tls=server_context(files["cert.pem"], files["key.pem"]), peer_tls=trusting(ca),
                            auth_secret=SECRET)
    return await start_members(nursery, tmp_path, [security] * 3)


async def test_a_secured_cluster_elects_and_serves_a_client_with_the_credentials(secured, ca):
    addresses, servers = secured
    uri = "raft+tls://" + ",".join(addresses)
    async with await open_metastore(uri, session_timeout_s=2.0, tls=trusting(ca), auth_secret=SECRET) as store:
        assert (await store.execute(Create("/secured", b"1"))).code is MetaCode.OK
        assert (await store.execute(Get("/secured"))).data == b"1"
    statuses = [await member_status(a, tls=trusting(ca), auth_secret=SECRET) for a in addresses]
    assert sorted(s["role"] for s in statuses) == ["follower", "follower", "leader"]
    assert sum(s.refused_connection_count for s in servers) == 0


@pytest.mark.parametrize("uri_scheme, secret, why", [
    ("raft+tls", b"", "no auth secret; pass --auth-secret-file or set BK_AUTH_SECRET (a bookie: bookieAuthSecret)"),
    ("raft+tls", b"wrong", "wrong auth secret; pass the cluster's secret with --auth-secret-file or BK_AUTH_SECRET "
                           "(a bookie: bookieAuthSecret)"),
    ("raft", SECRET, "it serves TLS only; use a raft+tls:// metastore URI (and --tls-ca with its CA)"),
])
async def test_a_client_lacking_a_credential_is_refused_in_one_line(secured, ca, caplog, uri_scheme, secret, why):
    addresses, servers = secured
    first = addresses[0]
    with caplog.at_level(logging.WARNING, logger="bk.metastore"):
        for _ in range(2):
            with pytest.raises(MetastoreRefused) as refused:
                await open_metastore(f"{uri_scheme}://{first}", session_timeout_s=2.0, tls=trusting(ca),
                                     auth_secret=secret)
            assert str(refused.value) == f"raft-lite metastore {first} refused the connection: {why}"
    # The member logged it once (not for the second try) and serves on.
    logged = [r.getMessage() for r in caplog.records if "refused a connection" in r.getMessage()]
    assert len(logged) == 1 and logged[0].startswith("metastore node 1: refused a connection from 127.0.0.1:")
    assert servers[0].refused_connection_count == 2
    assert (await member_status(first, tls=trusting(ca), auth_secret=SECRET))["node"] == 1


@pytest.mark.parametrize("hello, tls, reason", [(["client", b""], True, "no auth secret"),
                                                (["client", b"wrong"], True, "wrong auth secret"),
                                                (["client", SECRET], False,
                                                 "no TLS handshake; this member serves TLS only")])
async def test_what_a_refused_client_sends_after_its_hello_is_not_applied(secured, ca, hello, tls, reason):
    """A raw client sends its hello, a session opening and a create in one go: every member is
    asked (the leader among them); the create is nowhere afterwards."""
    addresses, _ = secured
    create = op_to_list(Create("/intruder", b"x"))
    for address in addresses:
        host, port = address.split(":")
        stream = await trio.open_tcp_stream(host, int(port))
        if tls:
            stream = trio.SSLStream(stream, trusting(ca), server_hostname=host)
        await stream.send_all(encode(hello) + encode(["open", 1]) + encode(["op", 2, 1, create, 0]))
        decoder = FrameDecoder(decode=decode)
        with trio.fail_after(10):
            while (frame := decoder.next_frame()) is None:
                decoder.feed(await stream.receive_some(4096))
        assert frame == [["refused", reason]] and decoder.next_frame() is None
        await trio.aclose_forcefully(stream)
    uri = "raft+tls://" + ",".join(addresses)
    async with await open_metastore(uri, session_timeout_s=2.0, tls=trusting(ca), auth_secret=SECRET) as store:
        assert (await store.execute(Get("/intruder"))).code is MetaCode.NO_NODE


async def test_a_client_not_trusting_the_members_ca_is_refused(secured, caplog):
    addresses, servers = secured
    with caplog.at_level(logging.WARNING, logger="bk"):
        for _ in range(2):
            with pytest.raises(MetastoreRefused) as refused:
                await open_metastore(f"raft+tls://{addresses[0]}", session_timeout_s=2.0,
                                     tls=trusting(trustme.CA()), auth_secret=SECRET)
            assert str(refused.value).startswith(f"raft-lite metastore {addresses[0]} refused the connection: its "
                                                 f"certificate is not trusted (")
            assert "pass the CA that signed the members' certificates with --tls-ca" in str(refused.value)
        with trio.fail_after(5):              # (the member hears of the failed handshake a moment later)
            while servers[0].refused_connection_count < 2:
                await trio.sleep(0.01)
    logged = [r.getMessage() for r in caplog.records if "TLS handshake" in r.getMessage()]
    assert len(logged) == 1 and logged[0].startswith("metastore node 1: refused a connection from 127.0.0.1: TLS handshake failed")


async def test_tls_to_a_member_in_the_clear_is_refused(nursery, tmp_path, ca):
    (address,), (server,) = await start_members(nursery, tmp_path, [RaftSecurity(auth_secret=SECRET)])
    with pytest.raises(MetastoreRefused) as refused:
        await open_metastore(f"raft+tls://{address}", session_timeout_s=2.0, tls=trusting(ca), auth_secret=SECRET)
    assert "the TLS handshake failed" in str(refused.value) and "does it serve TLS?" in str(refused.value)
    assert server.refused_connection_count == 1
    async with await open_metastore(f"raft://{address}", session_timeout_s=2.0, auth_secret=SECRET) as store:
        assert (await store.execute(Create("/clear", b""))).code is MetaCode.OK


async def test_members_with_different_secrets_elect_no_leader(nursery, tmp_path, caplog):
    """Two members (a majority needs both) that refuse each other's secret: no leader, and
    each says once that the other refuses it."""
    with caplog.at_level(logging.WARNING, logger="bk.metastore"):
        addresses, servers = await start_members(nursery, tmp_path, [RaftSecurity(auth_secret=b"one"),
                                                                     RaftSecurity(auth_secret=b"two")])
        await trio.sleep(3)               # several election timeouts
    assert all(server.core.leader_id is None for server in servers)
    lines = [r.getMessage() for r in caplog.records]
    assert sum("member 2 refuses this one: raft-lite metastore" in line and "wrong auth secret" in line
               for line in lines) == 1
    assert sum(line.startswith("metastore node 2: refused a connection from member 1: wrong auth secret")
               for line in lines) == 1


async def test_members_with_one_secret_elect_a_leader(nursery, tmp_path):
    addresses, servers = await start_members(nursery, tmp_path, [RaftSecurity(auth_secret=b"one")] * 2)
    with trio.fail_after(10):
        while not any(server.core.is_leader for server in servers):
            await trio.sleep(0.05)
