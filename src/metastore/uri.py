"""Metastore URIs and open_metastore(): the one place that maps a URI to a backend.

    memory://[name][/root]                       in-process tree (tests, one-process tools)
    raft://127.0.0.1:2281,127.0.0.1:2282[/root]  raft-lite cluster (any member; finds the leader)
    zk://127.0.0.1:2181[,host:port...][/root]    ZooKeeper ensemble (hosts apart by "," or, as in
                                                 BookKeeper's metadataServiceUri, by ";")
    zk+flat://..., zk+hierarchical://...         (and raft+..., memory+...) pick the ledger layout
    raft+tls://127.0.0.1:2281,...[/root]         raft-lite members that serve TLS (bk metastore
                                                 --tls-cert): connect over TLS (also raft+tls+flat://)

The path is the ledger root (default /ledgers). The layout named in the scheme is used when the
cluster is new and checked against the one recorded under <root>/LAYOUT otherwise; with no layout
in the scheme the recorded one is used (hierarchical for a new cluster, as BookKeeper's default).

Whether the metastore is reached over TLS is the URI's to say (a cluster may secure its bookies
and its metastore apart); what to trust and the secret to show are the process's credentials,
the same it shows the bookies: open_metastore(uri, tls=..., auth_secret=...). A raft-lite member
started with a secret asks every connection for it; ZooKeeper and memory:// ignore both.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from bkmetastore.api import MetadataStore

BACKENDS = ("memory", "raft", "zk")
LAYOUTS = ("flat", "hierarchical")
DEFAULT_ROOT = "/ledgers"


class MetastoreUriError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class MetastoreUri:
    backend: str                       # memory | raft | zk
    hosts: tuple[tuple[str, int], ...]  # empty for memory
    name: str                          # memory: the tree's name
    root: str                          # ledger root, e.g. /ledgers
    layout: str | None                 # flat | hierarchical | None (use the recorded one)
    is_tls: bool = False               # raft+tls://: the members serve TLS

    def __str__(self) -> str:
        scheme = self.backend + ("+tls" if self.is_tls else "") + (f"+{self.layout}" if self.layout else "")
        where = self.name if self.backend == "memory" else ",".join(f"{h}:{p}" for h, p in self.hosts)
        return f"{scheme}://{where}{self.root}"


def parse_metastore_uri(uri: str) -> MetastoreUri:
    scheme, sep, rest = uri.partition("://")
    if not sep:
        raise MetastoreUriError(f"metastore URI {uri!r} has no scheme: use memory://, raft://host:port or "
                                "zk://host:port/ledgers")
    backend, *modifiers = scheme.split("+")
    if backend not in BACKENDS:
        raise MetastoreUriError(f"metastore URI {uri!r}: unknown backend {backend!r} (known: {', '.join(BACKENDS)})")
    is_tls, layout = _scheme_modifiers(uri, backend, modifiers)
    where, slash, path = rest.partition("/")
    root = "/" + path.rstrip("/") if slash and path.strip("/") else DEFAULT_ROOT
    if "//" in root:
        raise MetastoreUriError(f"metastore URI {uri!r}: ledger root {root!r} has an empty part")
    if backend == "memory":
        return MetastoreUri(backend, (), where or "default", root, layout)
    hosts = []
    for part in where.replace(";", ",").split(","):
        host, colon, port = part.strip().rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise MetastoreUriError(f"metastore URI {uri!r}: {part!r} is not host:port")
        hosts.append((host, int(port)))
    return MetastoreUri(backend, tuple(hosts), "", root, layout, is_tls)


def _scheme_modifiers(uri: str, backend: str, modifiers: list[str]) -> tuple[bool, str | None]:
    """(is_tls, layout) from what follows the backend in the scheme ("tls", a layout; any order)."""
    is_tls, layouts = "tls" in modifiers, [m for m in modifiers if m != "tls"]
    for modifier in layouts:
        if modifier not in LAYOUTS:
            raise MetastoreUriError(f"metastore URI {uri!r}: unknown layout {modifier!r} (known: {', '.join(LAYOUTS)}"
                                    f"; raft+tls:// asks for TLS)")
    if len(layouts) > 1 or modifiers.count("tls") > 1:
        raise MetastoreUriError(f"metastore URI {uri!r}: the scheme names more than one layout, or tls twice")
    if is_tls and backend != "raft":
        raise MetastoreUriError(f"metastore URI {uri!r}: only the raft-lite metastore speaks TLS here (raft+tls://); "
                                f"use {backend}:// without +tls")
    return is_tls, layouts[0] if layouts else None


async def open_metastore(uri: str | MetastoreUri, *, session_timeout_s: float = 10.0,
                         tls: ssl.SSLContext | None = None, auth_secret: bytes = b"") -> MetadataStore:
    """Connect to the metastore a URI names. The caller closes it (or uses `async with`).

    tls: what a raft+tls:// client trusts (and presents), the context its bookie connections use
    (None: the system's CAs); a raft:// URI connects in the clear whatever it is. auth_secret:
    the cluster's shared secret, shown to every raft-lite member first (b"": none). A member that
    turns the connection away raises MetastoreRefused, saying why."""
    parsed = uri if isinstance(uri, MetastoreUri) else parse_metastore_uri(uri)
    if parsed.backend == "memory":
        from bkmetastore.memory_store import MemoryStore, memory_server
        return MemoryStore(memory_server(parsed.name))
    if parsed.backend == "raft":
        from bkmetastore.raftlite.client import open_raft_store
        member_tls = (tls or ssl.create_default_context()) if parsed.is_tls else None
        return await open_raft_store(parsed.hosts, session_timeout_s=session_timeout_s, tls=member_tls,
                                     auth_secret=auth_secret)
    from bkcore.extras import require_extra
    require_extra("zookeeper", f"the ZooKeeper metastore ({parsed})")
    from bkmetastore.zk_store import open_zookeeper_store
    return await open_zookeeper_store(parsed.hosts, session_timeout_s=session_timeout_s)
