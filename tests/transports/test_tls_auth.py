"""TLS and the shared secret between clients and bookies, over real TCP."""

import ssl

import pytest
import trio
import trustme

import bkclient
from bkcore.errors import BKException
from bkcore.wire import ErrorResponse, FrameDecoder, ReadLacRequest, encode_frame

URI = "memory://secure"


@pytest.fixture
def ca():
    return trustme.CA()


@pytest.fixture
async def secure_cluster(start_cluster, tmp_path, ca):
    cert = ca.issue_cert("127.0.0.1")
    cert_path, key_path = tmp_path / "bookie.pem", tmp_path / "bookie.key"
    cert.cert_chain_pems[0].write_to_path(str(cert_path))
    for pem in cert.cert_chain_pems[1:]:
        pem.write_to_path(str(cert_path), append=True)
    cert.private_key_pem.write_to_path(str(key_path))
    return await start_cluster(URI, 3, auth_secret=b"s3cret", tls_cert_file=str(cert_path),
                               tls_key_file=str(key_path))


async def test_tls_with_the_secret_works(secure_cluster, ca):
    context = ssl.create_default_context()
    ca.configure_trust(context)
    async with bkclient.connect(URI, tls=context, auth_secret=b"s3cret") as bk:
        ledger = await bk.create_ledger(password=b"pw")
        await ledger.add_many([b"a", b"b"])
        await ledger.close()
        reader = await bk.open_ledger(ledger.ledger_id, password=b"pw")
        assert await reader.read(0, 1) == [b"a", b"b"]


async def test_wrong_secret_or_no_tls_is_refused(secure_cluster, ca):
    context = ssl.create_default_context()
    ca.configure_trust(context)
    async with bkclient.connect(URI, tls=context, auth_secret=b"wrong") as bk:
        with pytest.raises(BKException):
            with trio.fail_after(30):
                ledger = await bk.create_ledger(password=b"pw")
                await ledger.add(b"x")
    assert sum(b.server.counts["auth_failures"] for b in secure_cluster.bookies) >= 1
    # Plain TCP to a TLS bookie: the handshake fails, nothing is served.
    host, port = secure_cluster.bookies[0].bookie_id.split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    await stream.send_all(encode_frame([ReadLacRequest(1, 1)]))
    with trio.fail_after(15):
        data = await stream.receive_some(1024)
    assert not data.startswith(b"\0\0")   # no frame of ours came back
    await stream.aclose()


async def test_secret_without_tls_refuses_an_unauthenticated_request(start_cluster):
    (bookie,) = (await start_cluster(URI, 1, auth_secret=b"s3cret")).bookies
    host, port = bookie.bookie_id.split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    await stream.send_all(encode_frame([ReadLacRequest(1, 1)]))
    decoder = FrameDecoder()
    with trio.fail_after(5):
        while (frame := decoder.next_frame()) is None:
            decoder.feed(await stream.receive_some(1024))
    assert isinstance(frame[0], ErrorResponse) and "authentication" in frame[0].reason
