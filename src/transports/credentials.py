"""What a client shows a secured cluster, made from files: a TLS context that trusts the CA of
the bookies' certificates (and may carry a certificate of its own), and the shared secret, the
first line of a file. One way for every caller: `bk` commands name the files with flags
(bkcli.credentials), the Spark source with options (bkspark.options).

    tls = tls_context("ca.pem")                     # bkclient.connect(uri, tls=tls, ...)
    secret = read_secret_file("secret.txt")         # ... auth_secret=secret
"""

from __future__ import annotations

import os
import ssl


class CredentialsError(ValueError):
    """A certificate, key or secret file that cannot be used; the message names it."""


def tls_context(ca_file: str | None, cert_file: str | None = None,
                key_file: str | None = None) -> ssl.SSLContext | None:
    """A client context trusting `ca_file` (None: no TLS unless a certificate is given, then the
    system's CAs), presenting `cert_file` (with `key_file`, or the key in its file) if given."""
    if not (ca_file or cert_file):
        return None
    for path in (ca_file, cert_file, key_file):
        if path and not os.path.isfile(path):
            raise CredentialsError(f"{path}: no such file")
    try:
        context = ssl.create_default_context(cafile=ca_file or None)
        if cert_file:
            context.load_cert_chain(cert_file, key_file or None)
    except (ssl.SSLError, OSError) as exc:
        which = ", ".join(path for path in (ca_file, cert_file, key_file) if path)
        raise CredentialsError(f"cannot use the TLS files {which}: {exc}") from None
    return context


def read_secret_file(path: str) -> bytes:
    """The secret on the first line of the file at `path`."""
    try:
        with open(path, "rb") as file:
            lines = file.read().splitlines()
    except OSError as exc:
        raise CredentialsError(f"cannot read the auth secret file {path}: {exc.strerror}") from None
    if not lines or not lines[0]:
        raise CredentialsError(f"the auth secret file {path} holds no secret on its first line")
    return lines[0]


def bookie_client_credentials(config) -> dict:
    """What a bookie's own clients of the cluster (its metastore session, autorecovery, stream
    storage, its HTTP admin API's client) show the bookies and a raft-lite metastore, from its
    BookieServerConfig: TLS when the bookies speak it (trusting tlsTrustStore, else the system's
    CAs; a raft+tls:// metastore is trusted the same way), and the shared secret."""
    if not config.tls_cert_file:
        return {"tls": None, "auth_secret": config.auth_secret}
    tls = tls_context(config.tls_trust_file) if config.tls_trust_file else ssl.create_default_context()
    return {"tls": tls, "auth_secret": config.auth_secret}
