"""The LAYOUT node: which ledger layout a cluster uses, recorded once under its ledger root.

The first client or bookie to reach a new cluster writes <root>/LAYOUT with the layout its URI
asks for (hierarchical when it asks for none, as BookKeeper's default), and the cluster's
instance id beside it (bkmetastore.instance_id); everyone after reads it.
A URI that names a different layout than the recorded one is refused: mixing layouts would
hide ledgers from each other and from garbage collection.
"""

from __future__ import annotations

from bkcore.ledger.layout import LedgerLayout
from bkcore.metaops import Create, Get, MetaCode
from bkmetastore.api import MetadataStore
from bkmetastore.instance_id import ensure_instance_id
from bkmetastore.uri import MetastoreUri

LAYOUT_FORMAT_VERSION = 1
DEFAULT_LAYOUT = "hierarchical"


class LayoutMismatch(Exception):
    pass


def layout_node_path(root: str) -> str:
    return f"{root}/LAYOUT"


def encode_layout(name: str) -> bytes:
    return f"format {LAYOUT_FORMAT_VERSION}\nmanager {name}\n".encode()


def decode_layout(data: bytes, *, path: str) -> str:
    fields = dict(line.split(" ", 1) for line in data.decode("utf-8", "replace").splitlines() if " " in line)
    name = fields.get("manager", "")
    if fields.get("format") != str(LAYOUT_FORMAT_VERSION) or name not in ("flat", "hierarchical"):
        raise LayoutMismatch(f"{path} holds {data[:100]!r}, not a layout this version understands")
    return name


async def resolve_layout(store: MetadataStore, uri: MetastoreUri) -> LedgerLayout:
    path = layout_node_path(uri.root)
    for _ in range(10):
        result = await store.execute(Get(path))
        if result.code is MetaCode.OK:
            recorded = decode_layout(result.data, path=path)
            if uri.layout is not None and uri.layout != recorded:
                raise LayoutMismatch(f"{uri} asks for the {uri.layout} layout but the cluster at {uri.root} uses "
                                     f"{recorded}; use {uri.backend}+{recorded}:// or no layout in the URI")
            return LedgerLayout(root=uri.root, is_hierarchical=recorded == "hierarchical")
        if result.code is MetaCode.NO_NODE:
            created = await store.execute(Create(path, encode_layout(uri.layout or DEFAULT_LAYOUT)))
            if created.code is MetaCode.OK:       # this is a new cluster: it gets its instance id
                await ensure_instance_id(store, LedgerLayout(root=uri.root))
            if created.code in (MetaCode.OK, MetaCode.NODE_EXISTS, MetaCode.CONNECTION_LOSS):
                continue    # read back what is recorded, whoever wrote it
    raise ConnectionError(f"cannot read or record the ledger layout at {path}: the metastore keeps failing")
