"""The async metadata store interface that real clients, bookies and tools use (trio).

Every backend (memory://, raft://, zk://) offers the same small surface over the tree model of
bkcore.metaops:

    result = await store.execute(op)               one op, a MetaResult back
    result, watch = await store.execute_watch(op)  Get or Children, plus a one-shot watch
    await watch.wait()                             returns once that node's data (Get) or
                                                   child list (Children) may have changed

Rules every backend keeps:
- execute() never raises for store-level outcomes: NO_NODE, NODE_EXISTS, BAD_VERSION,
  NOT_EMPTY come back as codes. CONNECTION_LOSS means the outcome is unknown (the op may have
  been applied): a conditional write must be re-read and compared before it is retried.
- Ephemeral creates belong to the store's session: they vanish when the session ends
  (aclose(), or expiry after session_timeout_s without contact). `session_lost` is set once the
  session is gone for good; a bookie then registers again on a new store.
- A watch fires once: on any change of what it watches (including creation or deletion of the
  node), and also when the connection or session is lost, since changes may have been missed.
  After it fires the caller re-reads (with a new watch if it still cares). Spurious wake-ups are
  allowed; missed changes are not.
- Results and watch firings arrive in the caller's trio task; no backend blocks the event loop.
"""

from __future__ import annotations

import abc
import math

import trio

from bkcore.metaops import Children, Get, MetaOp, MetaResult
from bkmetastore.watches import OneShotWatch


class MetastoreRefused(ConnectionError):
    """The metastore turned this client away: its credentials are missing or wrong (no secret,
    a wrong one, the clear against a member that serves TLS, a certificate not trusted). The
    message is one line naming what is missing and how to give it. Trying again cannot help."""


class Watch(OneShotWatch):
    """A one-shot notification that something watched may have changed, for trio code."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(trio.Event())


class MetadataStore(abc.ABC):
    """One client session with a metastore. Use as `async with open_metastore(uri) as store:`."""

    @abc.abstractmethod
    async def execute(self, op: MetaOp) -> MetaResult:
        """Apply one op. Ephemeral creates are tied to this store's session."""

    @abc.abstractmethod
    async def execute_watch(self, op: Get | Children) -> tuple[MetaResult, Watch]:
        """Read a node (Get) or its children (Children) and watch it for the next change. The
        watch is set even when the node does not exist yet (it then fires on creation)."""

    @property
    @abc.abstractmethod
    def session_lost(self) -> bool:
        """True once the session has expired or closed: its ephemeral nodes are gone."""

    def session_lease_s(self) -> float:
        """For how many more seconds this session's ephemeral nodes are certain to stay, even if
        the metastore is never heard from again (0.0 once that is not certain). A server that
        owns something through an ephemeral node may act as sole owner only while this is
        positive: after that, another may have taken over. An in-process store's session ends
        only when told to, so here it is unbounded until then."""
        return 0.0 if self.session_lost else math.inf

    @abc.abstractmethod
    async def aclose(self) -> None:
        """End the session (its ephemeral nodes vanish) and release connections. Idempotent."""

    async def __aenter__(self) -> MetadataStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
