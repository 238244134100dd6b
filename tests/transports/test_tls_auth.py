"""TLS and the shared secret between clients and bookies, over real TCP."""

import json
import ssl

import pytest
import trio
import trustme

import bkclient
from bkcore.errors import BKException
from bkcore.wire import ErrorResponse, FrameDecoder, ReadLacRequest, encode_frame
from bktransports.metrics import exposition, read_samples, sample_value

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


def _ca_file(ca, tmp_path) -> str:
    path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


async def test_bk_shell_reaches_a_secured_cluster_with_its_flags_and_not_without(secure_cluster, ca, tmp_path,
                                                                                capsys, monkeypatch):
    import io
    import json

    from bkcli.main import build_parser
    from bkcli.shell_command import run_shell

    async def shell(*argv):
        out = io.StringIO()
        status = await run_shell(build_parser().parse_args(["shell", *argv, "--metastore", URI]), out)
        return status, out.getvalue()
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    status, text = await shell("simpletest", "--num-entries", "5", "--json", "--tls-ca", _ca_file(ca, tmp_path),
                               "--auth-secret-file", str(secret))
    assert status == 0 and json.loads(text)["entries"] == 5
    monkeypatch.setenv("BK_AUTH_SECRET", "s3cret")         # the secret from the environment instead
    assert (await shell("simpletest", "--num-entries", "5", "--tls-ca", _ca_file(ca, tmp_path)))[0] == 0
    monkeypatch.delenv("BK_AUTH_SECRET")
    capsys.readouterr()
    with trio.fail_after(60):                               # no TLS, no secret: the bookies refuse it
        status, text = await shell("simpletest", "--num-entries", "5")
    assert (status, text) == (1, "") and capsys.readouterr().err.count("\n") == 1
    status, _ = await shell("simpletest", "--tls-ca", str(tmp_path / "missing.pem"))
    assert status == 2 and capsys.readouterr().err == f"bk shell simpletest: {tmp_path / 'missing.pem'}: no such file\n"


async def test_a_bookies_own_stream_storage_reaches_secured_bookies(secure_cluster, ca, tmp_path, nursery):
    """The stream storage a bookie runs in its process (streamStorageEnabled) is a client of
    the cluster: it shows the bookies the secret and trusts tlsTrustStore. It serves gRPC over
    TLS with the bookie's certificate and asks its clients for the same secret. Its metrics
    are the bookie's."""
    pytest.importorskip("grpc")
    from bkcli.bookie_command import stream_storage_in_bookie
    from bkclient.storage_client import StorageClient
    from bklocal.processes import free_port
    from bktransports.bookie_server import BookieServerConfig
    bookie = secure_cluster.bookies[0].config
    config = BookieServerConfig(data_dir=str(tmp_path / "own"), auth_secret=b"s3cret", tls_cert_file=bookie.tls_cert_file,
                                tls_key_file=bookie.tls_key_file, tls_trust_file=_ca_file(ca, tmp_path),
                                stream_storage_port=free_port())
    registry = secure_cluster.bookies[0].server.registry
    await nursery.start(stream_storage_in_bookie, URI, config, registry)

    def use_table() -> bytes:
        with StorageClient(f"127.0.0.1:{config.stream_storage_port}", tls_ca=_ca_file(ca, tmp_path),
                           auth_secret=b"s3cret") as storage:
            storage.create_stream("default", "secured")
            table = storage.table("default", "secured")
            table.put(b"k", b"v")
            return table.get(b"k").value
    assert await trio.to_thread.run_sync(use_table) == b"v"
    samples = read_samples(exposition(registry).decode())
    assert sample_value(samples, "grpc_services_Put_grpc_completed") == 1
    assert sample_value(samples, "grpc_services_Put_grpc_latency_micros_count", success="true") == 1


async def test_stream_storage_serves_grpc_over_tls(secure_cluster, ca, tmp_path, nursery, capsys):
    """The gRPC endpoint over TLS (ALPN h2): StorageClient and `bk table --tls-ca` reach it; a
    client in the clear does not."""
    pytest.importorskip("grpc")
    from bkcli.credentials import server_tls_context
    from bkcli.main import main
    from bkclient.storage_client import StorageClient
    from streamstorage.grpc_gateway import GrpcGateway
    bookie = secure_cluster.bookies[0].config
    trust = ssl.create_default_context()
    ca.configure_trust(trust)
    async with bkclient.connect(URI, tls=trust, auth_secret=b"s3cret", renew_session=False) as bk:
        gateway = await nursery.start(GrpcGateway(bk, port=0, tls=server_tls_context(
            bookie.tls_cert_file, bookie.tls_key_file)).run)
        address, ca_file = f"127.0.0.1:{gateway.port}", _ca_file(ca, tmp_path)

        def over_tls() -> bytes:
            with StorageClient(address, tls_ca=ca_file) as storage:
                storage.create_stream("default", "tls")
                storage.table("default", "tls").put(b"k", b"v")
                return storage.table("default", "tls").get(b"k").value
        assert await trio.to_thread.run_sync(over_tls) == b"v"
        status = await trio.to_thread.run_sync(main, ["table", "get", "-s", address, "--tls-ca", ca_file, "-t", "tls",
                                                      "-k", "k", "--json"])
        assert status == 0 and json.loads(capsys.readouterr().out)["value"] == "v"

        def in_the_clear() -> int:
            return main(["table", "get", "-s", address, "-t", "tls", "-k", "k"])
        assert await trio.to_thread.run_sync(in_the_clear) == 1
        said = (f"bk table get: stream storage at {address} speaks TLS and this client does not: pass the CA that "
                f"signed its certificate with --tls-ca (StorageClient's tls_ca)")
        assert said in capsys.readouterr().err.splitlines()     # (beside the server's log, in this process)
        nursery.cancel_scope.cancel()
    # Once it is gone, the same client is told it did not answer (no TLS spoken there any more).
    with pytest.raises(ConnectionError, match=r"did not answer \(UNAVAILABLE\); is it running"):
        await trio.to_thread.run_sync(lambda: StorageClient(address).list_streams("default"))


async def test_the_admin_port_serves_https_with_the_bookies_certificate(start_cluster, ca, tmp_path):
    """httpServerTlsEnable: the HTTP admin endpoint over TLS; plain HTTP gets no answer."""
    from bklocal.processes import free_port
    cert = ca.issue_cert("127.0.0.1")
    cert_path, key_path = tmp_path / "bookie.pem", tmp_path / "bookie.key"
    cert.private_key_and_cert_chain_pem.write_to_path(str(cert_path))
    cert.private_key_pem.write_to_path(str(key_path))
    cluster = await start_cluster(URI, 1, http_port=free_port(), http_tls=True, tls_cert_file=str(cert_path),
                                  tls_key_file=str(key_path))
    port = cluster.bookies[0].server.http_port
    context = ssl.create_default_context()
    ca.configure_trust(context)
    stream = await trio.open_ssl_over_tcp_stream("127.0.0.1", port, ssl_context=context, https_compatible=True)
    await stream.send_all(b"GET /heartbeat HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    answer = b""
    with trio.fail_after(10):
        while chunk := await stream.receive_some(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"OK\n")
    plain = await trio.open_tcp_stream("127.0.0.1", port)
    await plain.send_all(b"GET /heartbeat HTTP/1.1\r\nHost: x\r\n\r\n")
    with trio.fail_after(15):
        try:
            reply = await plain.receive_some(4096)
        except trio.BrokenResourceError:
            reply = b""
    assert not reply.startswith(b"HTTP/1.1 200")
    await plain.aclose()


async def test_stream_storage_asks_grpc_clients_for_its_secret(secure_cluster, ca, tmp_path, nursery, capsys):
    """GrpcGateway(auth_secret=...): calls without "authorization: Bearer <secret>" are refused
    (UNAUTHENTICATED), named as such in one line by `bk table`; with the secret they work, the
    watch's stream included."""
    pytest.importorskip("grpc")
    from bkcli.main import main
    from bkclient.storage_client import StorageClient
    from streamstorage.grpc_gateway import GrpcGateway
    trust = ssl.create_default_context()
    ca.configure_trust(trust)
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    async with bkclient.connect(URI, tls=trust, auth_secret=b"s3cret", renew_session=False) as bk:
        gateway = await nursery.start(GrpcGateway(bk, port=0, auth_secret=b"s3cret").run)
        address = f"127.0.0.1:{gateway.port}"

        def with_the_secret() -> tuple[bytes, str]:
            with StorageClient(address, auth_secret=b"s3cret") as storage:
                storage.create_stream("default", "guarded")
                table = storage.table("default", "guarded")
                table.put(b"k", b"v")
                events = table.watch(b"k", start_revision=1)
                first = next(iter(events))
                events.cancel()
                return table.get(b"k").value, first["value"]
        assert await trio.to_thread.run_sync(with_the_secret) == (b"v", b"v")
        status = await trio.to_thread.run_sync(main, ["table", "get", "-s", address, "--auth-secret-file", str(secret),
                                                      "-t", "guarded", "-k", "k", "--json"])
        assert status == 0 and json.loads(capsys.readouterr().out)["value"] == "v"
        status = await trio.to_thread.run_sync(main, ["table", "get", "-s", address, "-t", "guarded", "-k", "k"])
        err = capsys.readouterr().err
        assert status == 1 and err.count("\n") == 1 and "asks for the cluster's secret" in err
        nursery.cancel_scope.cancel()


async def test_the_admin_port_of_a_bookie_with_a_secret_asks_every_request_for_it(start_cluster, ca, tmp_path,
                                                                                 caplog):
    """bookieAuthSecret guards the HTTP admin port too (over HTTPS here): a request without
    "Authorization: Bearer <secret>", or with another one, on any path, is 401 with a
    WWW-Authenticate header and one line, and does nothing; the first refusal is logged once.
    With the secret the endpoint answers and acts."""
    from bklocal.processes import free_port
    from bktransports.http_admin_client import admin_request
    cert = ca.issue_cert("127.0.0.1")
    cert_path, key_path = tmp_path / "bookie.pem", tmp_path / "bookie.key"
    cert.private_key_and_cert_chain_pem.write_to_path(str(cert_path))
    cert.private_key_pem.write_to_path(str(key_path))
    cluster = await start_cluster(URI, 1, http_port=free_port(), http_tls=True, auth_secret=b"s3cret",
                                  tls_cert_file=str(cert_path), tls_key_file=str(key_path))
    server = cluster.bookies[0].server
    base, ca_file = f"https://127.0.0.1:{server.http_port}", _ca_file(ca, tmp_path)

    def request(path, *, secret=b"", method="GET", body=None):
        return admin_request(base + path, method=method, body=body, auth_secret=secret, tls_ca=ca_file)

    def refused_and_accepted():
        import urllib.request
        answers = {"none": request("/api/v1/bookie/state/readonly", method="PUT", body={"readOnly": True}),
                   "wrong": request("/heartbeat", secret=b"wrong"),
                   "unknown path": request("/api/v1/nothing")}
        with pytest.raises(urllib.error.HTTPError) as raw:      # the headers, as any client sees them
            urllib.request.urlopen(urllib.request.Request(base + "/metrics"), timeout=5,
                                   context=ssl.create_default_context(cafile=ca_file))
        answers["header"] = raw.value.headers["WWW-Authenticate"]
        raw.value.close()
        answers["after"] = request("/api/v1/bookie/state/readonly", secret=b"s3cret")
        answers["set"] = request("/api/v1/bookie/state/readonly", secret=b"s3cret", method="PUT",
                                 body={"readOnly": True})
        answers["heartbeat"] = request("/heartbeat", secret=b"s3cret")
        return answers
    answers = await trio.to_thread.run_sync(refused_and_accepted)
    for name in ("none", "wrong", "unknown path"):
        status, text = answers[name]
        assert status == 401 and text.count("\n") == 1, (name, answers[name])
    assert "send the header Authorization: Bearer <secret>" in answers["none"][1]
    assert "does not carry this endpoint's secret" in answers["wrong"][1]
    assert answers["header"] == 'Bearer realm="bookkeeper"'
    assert answers["after"] == (200, '{"readOnly": false}\n')        # the refused PUT did nothing
    assert answers["set"] == (200, '{"readOnly": true}\n') and answers["heartbeat"] == (200, "OK\n")
    lines = [r.getMessage() for r in caplog.records if r.name == "bk.http" and "refused" in r.getMessage()]
    assert len(lines) == 1 and "127.0.0.1" in lines[0]


async def test_a_client_the_bookies_refuse_is_told_what_credential_it_lacks(secure_cluster, ca):
    """The add fails for want of bookies, and its error names why they refused: in the clear
    against TLS bookies, no secret, a wrong one, a CA that did not sign their certificates."""
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)
    cases = [({}, "closed the connection unanswered (does it speak TLS? then pass --tls-ca)"),
             ({"tls": trusting}, "asked for the cluster's auth secret, which this client lacks"),
             ({"tls": trusting, "auth_secret": b"wrong"}, "refused this client's auth secret"),
             ({"tls": ssl.create_default_context(), "auth_secret": b"s3cret"},
              "failed the TLS handshake (")]
    for credentials, reason in cases:
        async with bkclient.connect(URI, **credentials) as bk:
            with pytest.raises(BKException) as refused:
                with trio.fail_after(30):
                    ledger = await bk.create_ledger(password=b"pw")
                    await ledger.add(b"x")
        message = str(refused.value)
        bookie_ids = sorted(bookie.bookie_id for bookie in secure_cluster.bookies)
        assert f"bookies {', '.join(bookie_ids)} {reason}" in message, message


def test_bk_stream_storage_names_a_credential_file_it_cannot_use(tmp_path, capsys):
    pytest.importorskip("grpc")
    from bkcli.main import main
    missing = tmp_path / "missing.pem"
    assert main(["stream-storage", "--metastore", "raft://127.0.0.1:1", "--grpc-tls-cert", str(missing)]) == 2
    assert capsys.readouterr().err == f"bk stream-storage: {missing}: no such file\n"


async def test_the_admin_apis_client_speaks_tls_to_the_bookies_trusting_tls_trust_store(start_cluster, ca, tmp_path):
    """The endpoints that ask the other bookies (list_bookie_info, ledger/read, ...) show them
    what the bookie's other clients do: TLS trusting tlsTrustStore, and the secret."""
    from bklocal.processes import free_port
    from test_http_admin import call
    cert = ca.issue_cert("127.0.0.1")
    cert_path, key_path = tmp_path / "bookie.pem", tmp_path / "bookie.key"
    cert.private_key_and_cert_chain_pem.write_to_path(str(cert_path))
    cert.private_key_pem.write_to_path(str(key_path))
    cluster = await start_cluster(URI, 0)
    for _ in range(3):
        await cluster.add_bookie(http_port=free_port(), auth_secret=b"s3cret", tls_cert_file=str(cert_path),
                                 tls_key_file=str(key_path), tls_trust_file=_ca_file(ca, tmp_path))
    port = cluster.bookies[0].server.http_port
    context = ssl.create_default_context()
    ca.configure_trust(context)
    async with bkclient.connect(URI, tls=context, auth_secret=b"s3cret") as bk:
        ledger = await bk.create_ledger(password=b"pw")
        await ledger.add_many([b"a", b"b"])
        await ledger.close()
    status, info = await call(port, "GET", "/api/v1/bookie/list_bookie_info", secret=b"s3cret")
    assert status == 200 and sorted(info) == sorted([b.bookie_id for b in cluster.bookies] + ["clusterInfo"])
    assert await call(port, "GET", f"/api/v1/ledger/read?ledger_id={ledger.ledger_id}", secret=b"s3cret") == (
        200, {"0": "a", "1": "b"})
    assert sum(b.server.counts["auth_failures"] for b in cluster.bookies) == 0
