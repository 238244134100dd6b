"""What a `bk` client command, or a server's own client of the cluster, shows the bookies of a
secured cluster: a TLS context that trusts their certificates (and may carry a certificate of
its own), and the shared secret they ask for first.

    bk shell listbookies --tls-ca ca.pem --auth-secret-file secret.txt
    BK_AUTH_SECRET=... bk shell simpletest --tls-ca ca.pem

`client_credentials(...)` gives the keyword arguments of bkclient.connect / open_client.
"""

from __future__ import annotations

import os
import ssl

from bktransports.credentials import CredentialsError, read_secret_file, tls_context as _tls_context

AUTH_SECRET_ENV = "BK_AUTH_SECRET"


def add_security_arguments(parser) -> None:
    parser.add_argument("--tls-ca", metavar="PEM", help="CA certificate(s) that signed the bookies' certificates: "
                                                        "connect to them over TLS")
    parser.add_argument("--tls-cert", metavar="PEM", help="this client's certificate chain, if the bookies ask for one")
    parser.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert")
    parser.add_argument("--auth-secret-file", metavar="FILE",
                        help=f"file holding the bookies' shared secret (or ${AUTH_SECRET_ENV} holding it)")


def client_credentials(args, environ=None) -> dict:
    """{"tls": ..., "auth_secret": ...} from the arguments add_security_arguments made."""
    environ = os.environ if environ is None else environ
    return {"tls": tls_context(getattr(args, "tls_ca", None), getattr(args, "tls_cert", None),
                               getattr(args, "tls_key", None)),
            "auth_secret": auth_secret(getattr(args, "auth_secret_file", None), environ)}


def tls_context(ca_file: str | None, cert_file: str | None = None,
                key_file: str | None = None) -> ssl.SSLContext | None:
    """A client context trusting `ca_file` (None: no TLS unless a certificate is given, then the
    system's CAs), presenting `cert_file` if given (bktransports.credentials.tls_context)."""
    if key_file and not cert_file:
        raise CredentialsError("--tls-key needs --tls-cert")
    return _tls_context(ca_file, cert_file, key_file)


def auth_secret(path: str | None, environ) -> bytes:
    """The secret in `path` (its first line), else in ${AUTH_SECRET_ENV}; b"" when neither."""
    if path:
        return read_secret_file(path)
    return environ.get(AUTH_SECRET_ENV, "").encode()


def server_tls_context(cert_file: str | None, key_file: str | None = None, *, flag: str = "--grpc-tls",
                       alpn: tuple[str, ...] = ("h2",)) -> ssl.SSLContext | None:
    """A context to serve over TLS with (None without a certificate): gRPC by default (ALPN h2),
    a raft-lite member with alpn=(). `flag` names the options in errors ({flag}-cert, {flag}-key)."""
    if not cert_file:
        if key_file:
            raise CredentialsError(f"{flag}-key needs {flag}-cert")
        return None
    for path in (cert_file, key_file):
        if path and not os.path.isfile(path):
            raise CredentialsError(f"{path}: no such file")
    from bktransports.tls import server_context
    try:
        return server_context(cert_file, key_file, alpn=alpn)
    except (ssl.SSLError, OSError) as exc:
        raise CredentialsError(f"cannot use the TLS files {cert_file}, {key_file}: {exc}") from None
