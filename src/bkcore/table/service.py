"""The table service of one process: tables over streams, each table's hash ranges owned here.

Any stream can be used as a table (as the seed's `stream create` then `table put` shows): its
settings give the number of hash ranges (`table_ranges`) and the replication of the range
journals. A key is a (pkey, lkey) pair, as BookKeeper's PTable has it: the pkey picks the range
(crc32c of the pkey modulo the range count) and ranges/deletes/txns stay within one pkey. The
plain Table of BookKeeper's Python client sends the key as both pkey and lkey; table_key() does
the same.

A range is opened (its journal writer fencing any previous owner, its state rebuilt) the first
time a key of it is used, and stays owned by this process until close(), or until the
rebalancer (bkcore.table.rebalance) hands it over to the server it belongs on now. With
ownership claims, a request for a range nobody owns is claimed here only if this server is the
range's preferred one (bkcore.table.placement); otherwise it gets NotOwner(preferred server).
"""

from __future__ import annotations

import contextlib
import logging
import math
from typing import AsyncIterator, Callable

import crc32c

from bkcore.stream.errors import NamespaceNotFound
from bkcore.stream.segments import StreamSettings
from bkcore.stream.send_rounds import SendRounds
from bkcore.table.commands import (
    Command, DeleteRange, DeleteResult, Increment, IncrementResult, KeyValue, Put, PutResult, RangeRead,
    RangeResult, TableError, Txn, TxnResult, fold_key, pkey_end, unfold_key,
)
from bkcore.table.kv import WatchEvent
from bkcore.table.ownership import NotOwner, OwnershipUncertain, RangeOwnership
from bkcore.table.range import TABLES_NAMESPACE, RangeClosed, TableRange, journal_stream_name
from bkcore.table.rebalance import Rebalancer

SETTINGS_TTL_S = 5.0
logger = logging.getLogger(__name__)
SESSION_CHECK_INTERVAL_S = 0.5
# How long a confirmed read lease may be relied on by reads outside the loop before the loop
# asks the metastore client again (a lease can only be shorter than what the client last said;
# and a session the client knows is lost stops those reads at once).
READ_LEASE_RECHECK_S = 0.1
# A range whose opening failed (no bookies, the metastore away) is not opened again for a
# while: the requests that arrive meanwhile get the same error, instead of each starting an
# opening of its own (a storm of metastore and bookie calls while the cause lasts). The pause
# doubles with each failure in a row, from the first to the last.
OPEN_RETRY_PAUSE_FIRST_S = 0.1
OPEN_RETRY_PAUSE_LAST_S = 2.0
# How long the server a range's claim named (or its preferred server, while nobody owned it) is
# taken as where the range's requests go, without asking the metastore again. Forgotten sooner
# when a request sent there comes back refused or unanswered (forget_owner): the range moved.
OWNER_KNOWN_S = 1.0


def range_of(pkey: bytes, range_count: int) -> int:
    return crc32c.crc32c(pkey) % range_count


def table_key(key: bytes) -> tuple[bytes, bytes]:
    """The (pkey, lkey) of a plain table key."""
    return key, key


class _Opening:
    """A range being opened, and what came of it once `done` is set."""

    __slots__ = ("done", "table_range", "error")

    def __init__(self, done) -> None:
        self.done = done
        self.table_range: TableRange | None = None
        self.error: Exception | None = None


class Tables:
    def __init__(self, bk, nursery, *, checkpoint_every: int | None = None,
                 server_id: str | None = None, indexes=None) -> None:
        self._bk = bk
        self._rt = bk.runtime
        # Where ranges keep their applied state: `indexes.index_for(table, range_id)` (lmdb on
        # a server: streamstorage.lmdb_kv.LmdbRangeIndexes); None keeps them in memory (library
        # use, tests, the simulator).
        self._indexes = indexes
        self._nursery = nursery
        # The journals of the ranges served here send their entries in rounds, so that the
        # bookies sync them together (bkcore.stream.send_rounds).
        self.journal_rounds = SendRounds(self._rt, nursery.start_soon)
        # With a server id, ranges are claimed in the metastore (several servers share the
        # tables); without one, this process serves every range it is asked about.
        self._ownership = RangeOwnership(bk.store, bk.layout.root, server_id) if server_id else None
        self.rebalancer = (Rebalancer(tables=self, store=bk.store, root=bk.layout.root, server_id=server_id,
                                      runtime=self._rt) if server_id else None)
        self._is_rebalancing = False
        # Set by close() and stop_all(): no handover starts after it.
        self.is_stopping = False
        self._checkpoint_every = checkpoint_every
        self._ranges: dict[tuple[str, str, int], TableRange] = {}
        self._settings: dict[tuple[str, str], tuple[StreamSettings, float]] = {}
        # Ranges being opened now, by a task of their own (see _open).
        self._opening: dict[tuple[str, str, int], _Opening] = {}
        # Ranges being handed over now (no longer in _ranges; their claims still held), each
        # with the event set once the claim is released: requests for them wait for that.
        self._moving: dict[tuple[str, str, int], object] = {}
        # Ranges whose opening failed lately: the error, until when it stands, and the pause
        # that will follow the next failure in a row.
        self._open_failures: dict[tuple[str, str, int], tuple[Exception, float, float]] = {}
        # Ranges served elsewhere, as the last claim found them: the server their requests go to
        # and until when that is trusted (OWNER_KNOWN_S). Spares each request for such a range
        # a task and a metastore read; a server forwarding thousands of calls a second would
        # otherwise ask the metastore as often.
        self._elsewhere: dict[tuple[str, str, int], tuple[str, float]] = {}
        # monotonic_s() until which reads outside the loop may trust this server still owns
        # its ranges (set by the loop from the metastore session's lease; see read_in_thread).
        self._read_lease_until = 0.0 if server_id else math.inf

    async def register(self, *, peer_address: str | None = None) -> None:
        """Announce this server, with where it takes table calls from the others
        (streamstorage.peer_calls) when it does, and, the first time, start rebalancing its
        ranges."""
        if self._ownership is not None:
            if peer_address is not None:
                self._ownership.peer_address = peer_address
            await self._ownership.register()
            if not self._is_rebalancing:
                self._is_rebalancing = True
                self._nursery.start_soon(self.rebalancer.run)

    async def announce_peer_address(self, address: str) -> None:
        """Say where this server takes table calls from now on, once registered (a listener
        that moved). Nothing to say without ownership claims."""
        if self._ownership is not None:
            await self._ownership.announce_peer_address(address)

    def ranges_here(self) -> list[tuple[str, str, int]]:
        """The ranges served here now (open and serving, not being handed over)."""
        return [index for index, table_range in self._ranges.items() if table_range.is_serving]

    async def settings_of(self, namespace: str, stream: str) -> StreamSettings:
        """The table's stream settings, remembered for SETTINGS_TTL_S (a range count never
        changes while the stream exists; drop_table forgets at once)."""
        cached = self._settings.get((namespace, stream))
        if cached is not None and cached[1] > self._rt.monotonic_s():
            return cached[0]
        settings = (await self._bk.streams.catalog.get_stream(namespace, stream)).settings
        self._settings[(namespace, stream)] = (settings, self._rt.monotonic_s() + SETTINGS_TTL_S)
        return settings

    async def range_for(self, namespace: str, stream: str, pkey: bytes) -> TableRange:
        if not isinstance(pkey, bytes):
            raise TableError(f"a pkey is bytes, not {pkey!r:.60}")
        settings = await self.settings_of(namespace, stream)
        index = (namespace, stream, range_of(pkey, settings.table_ranges))
        while (moving := self._moving.get(index)) is not None:
            await moving.wait()         # then the opening below sends the request on
        table_range = self._ranges.get(index)
        if table_range is not None and table_range.is_serving:
            return table_range
        elsewhere = self._elsewhere.get(index)
        if elsewhere is not None:
            if elsewhere[1] > self._rt.monotonic_s():
                raise NotOwner(elsewhere[0], _range_what(index))
            del self._elsewhere[index]
        opening = self._opening.get(index)
        if opening is None:
            failure = self._open_failures.get(index)
            if failure is not None and failure[1] > self._rt.monotonic_s():
                raise failure[0]
            opening = self._opening[index] = _Opening(self._rt.Event())
            self._nursery.start_soon(self._open, index, settings, opening)
        await opening.done.wait()
        if opening.error is not None:
            raise opening.error
        return opening.table_range

    async def _open(self, index: tuple[str, str, int], settings: StreamSettings, opening: _Opening) -> None:
        """Claim range `index` and open it, in a task of the service rather than of the request
        that asked first: opening may take longer than a client waits, and a request given up
        must not abort what the next request would wait for (each would start over, and none
        would ever finish). Every request waiting for it gets the range or the error."""
        namespace, stream, range_id = index
        try:
            if self._ownership is not None:
                await self._claim(index)
            journal_settings = StreamSettings(settings.ensemble_size, settings.write_quorum_size,
                                              settings.ack_quorum_size)
            options = {} if self._checkpoint_every is None else {"checkpoint_every": self._checkpoint_every}
            table = f"{namespace}/{stream}"
            if self._indexes is not None:
                options["index"] = self._indexes.index_for(table, range_id)
            table_range = TableRange(self._bk.streams, table, range_id, settings=journal_settings,
                                     journal_rounds=self.journal_rounds, **options)
            try:
                await table_range.open(self._nursery)
            except BaseException:
                await self._release(index)
                raise
            self._nursery.start_soon(self._serve_range, index, table_range)
            self._ranges[index] = table_range
            self._open_failures.pop(index, None)
            opening.table_range = table_range
        except Exception as exc:      # noqa: BLE001 - raised to every request waiting for the range
            opening.error = exc
            if isinstance(exc, NotOwner):
                self._elsewhere[index] = (exc.owner, self._rt.monotonic_s() + OWNER_KNOWN_S)
            else:
                previous = self._open_failures.get(index)
                pause_s = OPEN_RETRY_PAUSE_FIRST_S if previous is None else previous[2]
                self._open_failures[index] = (exc, self._rt.monotonic_s() + pause_s,
                                              min(pause_s * 2, OPEN_RETRY_PAUSE_LAST_S))
        except BaseException:
            opening.error = RangeClosed(f"the table service stopped while opening range {range_id} of "
                                        f"{namespace}/{stream}")
            raise
        finally:
            del self._opening[index]
            opening.done.set()

    async def _claim(self, index: tuple[str, str, int]) -> None:
        """Claim range `index` here, or raise NotOwner naming where its requests go: its owner,
        or, while nobody owns it, its preferred server if that is another (so a server that
        handed a range over does not take it back at the next request of a stale client). A
        claim node naming this server, left by its earlier session, is claimed anew (and the
        rebalancer then hands the range over if it belongs elsewhere)."""
        what = _range_what(index)
        preferred = self.rebalancer.preferred(index)
        if preferred is not None and preferred != self._ownership.server_id:
            owner = await self._ownership.owner(index)
            if owner is None:
                raise NotOwner(preferred, what)
            if owner != self._ownership.server_id:
                raise NotOwner(owner, what)
        owner = await self._ownership.claim(index)
        if owner is not None:
            raise NotOwner(owner, what)

    def owner_elsewhere(self, namespace: str, stream: str, pkey: bytes) -> str | None:
        """The server requests for `pkey`'s range go to, when that is known without waiting: the
        range is not served here, and a claim found it elsewhere less than OWNER_KNOWN_S ago.
        None otherwise (the caller goes through execute() or read(), which find out)."""
        index = self._index_if_known(namespace, stream, pkey)
        if index is None or index in self._ranges:
            return None
        elsewhere = self._elsewhere.get(index)
        if elsewhere is None or elsewhere[1] <= self._rt.monotonic_s():
            return None
        return elsewhere[0]

    def _index_if_known(self, namespace: str, stream: str, pkey: bytes, *,
                        stale_ok: bool = False) -> tuple[str, str, int] | None:
        """The index of `pkey`'s range while the table's settings are remembered (stale_ok:
        remembered at all; a range count never changes while the stream exists); else None."""
        cached = self._settings.get((namespace, stream))
        if cached is None or not isinstance(pkey, bytes) or (cached[1] <= self._rt.monotonic_s() and not stale_ok):
            return None
        return namespace, stream, range_of(pkey, cached[0].table_ranges)

    def forget_owner(self, namespace: str, stream: str, pkey: bytes) -> None:
        """A request sent to the server this one took for the owner of `pkey`'s range came back
        refused (NotOwner) or unanswered: look the owner up again at the next request."""
        index = self._index_if_known(namespace, stream, pkey, stale_ok=True)
        if index is not None:
            self._elsewhere.pop(index, None)

    async def hand_over(self, index: tuple[str, str, int], target: str) -> bool:
        """Give range `index` up for `target`, which the rebalancer found it belongs on: new
        commands are refused with NotOwner(target) and the requests that arrive meanwhile wait,
        accepted commands finish durably (TableRange.aclose), the journal is sealed, then the
        claim is released and the waiting requests go on (to `target`, through _claim). The
        target claims the range at its next request and fences the journal, as any new owner
        does. Shielded: a handover half done would leave the range refusing commands here
        while nobody else may claim it. Returns whether it handed the range over (False: it
        was not served here any more, or the server is stopping)."""
        table_range = self._ranges.get(index)
        if table_range is None or not table_range.is_serving or self.is_stopping:
            return False
        namespace, stream, range_id = index
        del self._ranges[index]
        moving = self._moving[index] = self._rt.Event()
        try:
            with self._rt.CancelScope(shield=True):
                logger.info("handing range %d of table %s/%s over to %s", range_id, namespace, stream, target)
                await self._close_range(index, table_range,
                                        NotOwner(target, _range_what(index)))
        finally:
            del self._moving[index]
            moving.set()
        return True

    async def _close_range(self, index: tuple[str, str, int], table_range: TableRange,
                           refusal: Exception | None = None) -> None:
        """Close a range no longer in _ranges and release its claim (a close that fails stops
        the range unsealed: its next owner recovers the journal)."""
        try:
            await table_range.aclose(refusal=refusal)
        except Exception as exc:      # noqa: BLE001 - the claim must go either way
            logger.warning("closing table range %s: %s", index, exc)
            table_range.stop(exc)
        await self._release(index)

    async def _serve_range(self, index: tuple[str, str, int], table_range: TableRange) -> None:
        """While the range is served: journal TTL expiries; once it stops (fenced, or this
        server's metastore session is gone) give the claim up. A range closed on purpose
        (handed over, its table dropped) was taken out of _ranges by whoever closed it, who
        releases the claim."""
        async with self._rt.open_nursery() as nursery:
            nursery.start_soon(table_range.expire_keys_when_due)
            while table_range.is_serving:
                if self._bk.store.session_lost:
                    table_range.stop(ConnectionError("this server's metastore session ended; its ranges "
                                                     "may be served elsewhere now"))
                await self._rt.sleep(SESSION_CHECK_INTERVAL_S)
            nursery.cancel_scope.cancel()
        if self._ranges.get(index) is table_range:
            del self._ranges[index]
            with self._rt.CancelScope(shield=True):
                await self._release(index)

    async def _release(self, index: tuple[str, str, int]) -> None:
        if self._ownership is not None and not self._bk.store.session_lost:
            with contextlib.suppress(ConnectionError, OSError):
                await self._ownership.release(index)

    async def drop_table(self, namespace: str, stream: str) -> None:
        """Stop serving a table whose stream is being deleted, and delete its range journals
        and checkpoints."""
        self._settings.pop((namespace, stream), None)
        for index in [i for i in self._ranges if i[:2] == (namespace, stream)]:
            await self._close_range(index, self._ranges.pop(index))
        if self._indexes is not None:
            self._indexes.drop_table(f"{namespace}/{stream}")
        streams = self._bk.streams
        prefix = journal_stream_name(f"{namespace}/{stream}", 0).rsplit("~", 1)[0] + "~"
        with contextlib.suppress(NamespaceNotFound):
            for name in await streams.list_streams(TABLES_NAMESPACE):
                if name.startswith(prefix) and name[len(prefix):].split("~")[0].isdigit():
                    await streams.delete_stream(TABLES_NAMESPACE, name)

    def stop_all(self, error: BaseException) -> None:
        """Stop serving every range here at once, sealing nothing: this server can no longer be
        sure it owns them (its metastore session ended), and sealing would need that session.
        Each range's next owner recovers its journal."""
        self.is_stopping = True
        for table_range in self._ranges.values():
            table_range.stop(error)
        self._ranges.clear()

    async def close(self) -> None:
        """Close every range served here (sealing their journals where the cluster still
        answers; a range that cannot be sealed is recovered by its next owner)."""
        self.is_stopping = True
        for index, table_range in list(self._ranges.items()):
            try:
                await table_range.aclose()
            except Exception as exc:      # noqa: BLE001 - closing the others matters more
                logger.warning("closing table range %s: %s", index, exc)
                table_range.stop(exc)
        self._ranges.clear()
        if self._indexes is not None:
            self._indexes.close()
            self._indexes = None

    # -- operations ---------------------------------------------------------------------------

    async def execute(self, namespace: str, stream: str, pkey: bytes, command: Command) -> object:
        """Run a command whose keys are all folded keys of `pkey`."""
        _check_keys_share(pkey, command)
        table_range = await self.range_for(namespace, stream, pkey)
        return await table_range.execute(command)

    def submit_here(self, namespace: str, stream: str, pkey: bytes, command: Command,
                    on_done: Callable[[object, BaseException | None], None]) -> bool:
        """execute() without a task, when it needs nothing that waits: the table's settings are
        known and its range is open and serving here. Then the command is queued in the range
        (TableRange.submit: on_done tells its outcome) and the answer is True; otherwise False,
        nothing done, and the caller goes through execute() (which opens the range, or says
        where it is served). Raises what execute() would raise at once (a bad key, a range
        closing)."""
        _check_keys_share(pkey, command)
        table_range = self._range_served_here(namespace, stream, pkey)
        if table_range is None:
            return False
        table_range.submit(command, on_done)
        return True

    def _range_served_here(self, namespace: str, stream: str, pkey: bytes) -> TableRange | None:
        """The range of `pkey` if it is open and serving here, found without waiting (known
        settings, no handover under way); None otherwise."""
        index = self._index_if_known(namespace, stream, pkey)
        if index is None:
            return None
        table_range = self._ranges.get(index)
        if table_range is None or not table_range.is_serving or index in self._moving:
            return None
        return table_range

    async def put(self, namespace: str, stream: str, pkey: bytes, lkey: bytes, value: bytes, *,
                  prev_kv: bool = False, ttl_ms: int = 0) -> PutResult:
        return await self.execute(namespace, stream, pkey, Put(fold_key(pkey, lkey), value, prev_kv, ttl_ms))

    async def increment(self, namespace: str, stream: str, pkey: bytes, lkey: bytes, amount: int) -> IncrementResult:
        return await self.execute(namespace, stream, pkey, Increment(fold_key(pkey, lkey), amount))

    async def delete(self, namespace: str, stream: str, pkey: bytes, lkey: bytes, lkey_end: bytes | None = None, *,
                     prev_kv: bool = False) -> DeleteResult:
        return await self.execute(namespace, stream, pkey,
                                  DeleteRange(fold_key(pkey, lkey), _folded_end(pkey, lkey_end), prev_kv))

    async def txn(self, namespace: str, stream: str, pkey: bytes, txn: Txn) -> TxnResult:
        return await self.execute(namespace, stream, pkey, txn)

    async def get(self, namespace: str, stream: str, pkey: bytes, lkey: bytes) -> KeyValue | None:
        result = await self.range(namespace, stream, pkey, lkey)
        return result.kvs[0] if result.kvs else None

    async def range(self, namespace: str, stream: str, pkey: bytes, lkey: bytes, lkey_end: bytes | None = None, *,
                    limit: int = 0, count_only: bool = False, keys_only: bool = False) -> RangeResult:
        """`lkey`, or [lkey, lkey_end) within the pkey (lkey_end b"": to the pkey's end)."""
        return await self.read(namespace, stream, pkey, RangeRead(fold_key(pkey, lkey), _folded_end(pkey, lkey_end),
                                                                  limit, count_only, keys_only))

    async def read(self, namespace: str, stream: str, pkey: bytes, op: RangeRead) -> RangeResult:
        """A read whose keys are folded keys of `pkey` (see range()).

        Answered from this owner's applied state, which is the newest only while no other
        server can have taken the range over: with ownership claims, that is while the
        metastore session holding the claim is certain to be alive (a read lease). Writes need
        no lease; a deposed owner's journal write is fenced."""
        table_range = await self.range_for(namespace, stream, pkey)
        if self._ownership is not None:
            lease_s = self._bk.store.session_lease_s()
            if lease_s <= 0:
                raise OwnershipUncertain(f"range {table_range.range_id} of table {namespace}/{stream}: this server's "
                                         f"metastore session is not confirmed, so it may have lost the range; retry")
            self._read_lease_until = self._rt.monotonic_s() + min(lease_s, READ_LEASE_RECHECK_S)
        return await table_range.read(op)

    def read_in_thread(self, namespace: str, stream: str, pkey: bytes, op: RangeRead) -> RangeResult | None:
        """read() from a thread other than the loop's, when it needs nothing of the loop: the
        table's settings are cached, its range is open and serving here, and the read lease the
        loop last confirmed still holds. None otherwise, and for anything unusual (a bad key,
        an index closed under the read): the caller then goes through the loop, which answers
        or raises properly. Plain dict and attribute reads only: the loop may change them
        meanwhile, and each is atomic."""
        try:
            cached = self._settings.get((namespace, stream))
            now = self._rt.monotonic_s()
            if cached is None or cached[1] <= now or now >= self._read_lease_until or self._bk.store.session_lost:
                return None
            table_range = self._ranges.get((namespace, stream, range_of(pkey, cached[0].table_ranges)))
            if table_range is None:
                return None
            return table_range.read_in_thread(op)
        except Exception:      # noqa: BLE001 - the loop's path reads again and reports it
            return None

    async def watch(self, namespace: str, stream: str, pkey: bytes, lkey: bytes, lkey_end: bytes | None = None, *,
                    start_revision: int = 0, started=None, deliver=None) -> AsyncIterator[WatchEvent]:
        """See TableRange.watch."""
        table_range = await self.range_for(namespace, stream, pkey)
        async for event in table_range.watch(fold_key(pkey, lkey), _folded_end(pkey, lkey_end),
                                             start_revision=start_revision, started=started, deliver=deliver):
            yield event


def _range_what(index: tuple[str, str, int]) -> str:
    namespace, stream, range_id = index
    return f"range {range_id} of table {namespace}/{stream}"


def _check_keys_share(pkey: bytes, command: Command) -> None:
    start, end = fold_key(pkey), pkey_end(fold_key(pkey))
    for key, is_range_end in _keys_of(command):
        if not (start <= key <= end if is_range_end else unfold_key(key)[0] == pkey):
            raise TableError("every key of one command must share its pkey")


def _folded_end(pkey: bytes, lkey_end: bytes | None) -> bytes | None:
    if lkey_end is None:
        return None
    return pkey_end(fold_key(pkey)) if lkey_end == b"" else fold_key(pkey, lkey_end)


def _keys_of(command) -> list[tuple[bytes, bool]]:
    """(folded key, whether it is a range end) of every key a command touches."""
    if isinstance(command, Txn):
        return [(c.key, False) for c in command.compares] + [k for op in command.success + command.failure
                                                              for k in _keys_of(op)]
    keys = [(command.key, False)] if hasattr(command, "key") else []
    if getattr(command, "range_end", None) is not None:
        keys.append((command.range_end, True))
    return keys
