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
