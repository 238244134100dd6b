"""Where client commands look by default: the cluster `bk standalone` starts with its defaults.

`--metastore URI` on a command, or the BK_METASTORE environment variable, points elsewhere.
"""

from __future__ import annotations

import os

STANDALONE_RAFT_PORTS = (2281, 2282, 2283)
STANDALONE_BOOKIE_PORT_BASE = 3181
STANDALONE_DATA_DIR = "data/standalone"
STANDALONE_METASTORE_URI = "raft://" + ",".join(f"127.0.0.1:{port}" for port in STANDALONE_RAFT_PORTS)
METASTORE_ENV = "BK_METASTORE"


def default_metastore_uri() -> str:
    return os.environ.get(METASTORE_ENV) or STANDALONE_METASTORE_URI


def add_metastore_argument(parser) -> None:
    parser.add_argument("--metastore", default=None, metavar="URI",
                        help=f"metastore URI (default: ${METASTORE_ENV}, else the local standalone "
                             f"{STANDALONE_METASTORE_URI})")


def metastore_uri(args) -> str:
    return args.metastore or default_metastore_uri()


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (an ensemble, a quorum, a count)."""
    import argparse
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def nobody_listening(uri: str, *, timeout_s: float = 1.0) -> str | None:
    """Why a command cannot reach the metastore `uri` names, when no host of it accepts a TCP
    connection (said at once, rather than after a session's timeout); None when one does, or
    when the URI names no hosts (memory://) or cannot be parsed (the command says why)."""
    import socket

    from bkmetastore.uri import MetastoreUriError, parse_metastore_uri
    try:
        hosts = parse_metastore_uri(uri).hosts
    except MetastoreUriError:
        return None
    if not hosts:
        return None
    refusals = []
    for host, port in hosts:
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
            return None
        except OSError as exc:
            refusals.append(f"{host}:{port} ({exc.strerror or exc})")
    return (f"nothing is listening at {uri}: {', '.join(refusals)}; is the cluster running? (bk standalone, "
            f"or --metastore URI, or ${METASTORE_ENV})")
