"""The source's and sink's calls into the store, from blocking Spark code.

Spark calls the data source from plain threads (the driver's planner, Python workers). Each
process keeps one blocking client per metastore URI and credentials (bkclient.sync, a trio
thread), opened on first use and reused by every task the worker runs, since connecting costs a
metastore session. It shows the cluster the credentials the options name (tlsCa, tlsCert, tlsKey,
authSecretFile), their files read here, in the process that connects. The coroutines here run
on that client's thread through SyncBookKeeper.run().
"""

from __future__ import annotations

import threading

from bkclient.sync import SyncBookKeeper
from bkclient.sync import connect as sync_connect
from bkcore.errors import NoSuchEntry, NoSuchLedger
from bkcore.stream.entry_format import unpack_entry
from bkcore.stream.segments import SegmentState
from bkspark.options import Credentials, OptionError, SourceOptions
from bkspark.planning import ReadSpan, StreamView, extent_of
from bkcore.stream.writer import STREAM_LEDGER_PASSWORD
from bktransports.credentials import CredentialsError, read_secret_file, tls_context

_clients: dict[tuple[str, Credentials], SyncBookKeeper] = {}
_clients_lock = threading.Lock()


def client(options: SourceOptions) -> SyncBookKeeper:
    """This process's client of the cluster whose metastore is options.metastore, showing it the
    options' credentials."""
    key = (options.metastore, options.credentials)
    with _clients_lock:
        bk = _clients.get(key)
        if bk is None:
            bk = _clients[key] = sync_connect(options.metastore, **connect_credentials(options.credentials))
        return bk


def connect_credentials(credentials: Credentials) -> dict:
    """bkclient.connect's tls and auth_secret from the credentials' files; an OptionError naming
    the option of a file that cannot be used here."""
    try:
        tls = tls_context(credentials.tls_ca, credentials.tls_cert, credentials.tls_key)
    except CredentialsError as exc:
        raise OptionError(f"options tlsCa, tlsCert, tlsKey: {exc} (each file must be on every machine "
                          f"Spark runs on)") from None
    path = credentials.auth_secret_file
    try:
        return {"tls": tls, "auth_secret": read_secret_file(path) if path else b""}
    except CredentialsError as exc:
        raise OptionError(f'option "authSecretFile": {exc} (the file must be on every machine Spark runs on)') from None


def close_clients() -> None:
    with _clients_lock:
        for bk in _clients.values():
            bk.close()
        _clients.clear()


async def stream_view(bk, namespace: str, stream: str) -> StreamView:
    """The stream's truncation point and its segments, in-progress ones up to their LAC now."""
    catalog = bk.streams.catalog
    metadata = await catalog.get_stream(namespace, stream)
    extents = []
    for segment in await catalog.segments(namespace, stream):
        if segment.state is not SegmentState.IN_PROGRESS:
            extents.append(extent_of(segment))
            continue
        try:
            handle = await bk.open_ledger(segment.ledger_id, password=STREAM_LEDGER_PASSWORD, recovery=False)
        except NoSuchLedger:
            extents.append(extent_of(segment, lac=-1))
            continue
        lac = handle.last_add_confirmed
        if lac < 0:
            extents.append(extent_of(segment, lac=-1))
            continue
        last = unpack_entry((await handle.read(lac, lac))[0])
        extents.append(extent_of(segment, lac=lac, records_through=last.records_through,
                                 bytes_through=last.bytes_through))
    return StreamView(f"{namespace}/{stream}", metadata.truncated_to, tuple(extents))


async def ledger_extents(bk, ledger_ids: tuple[int, ...], password: bytes) -> list[tuple[int, int, int]]:
    """(ledger id, last readable entry id, average entry size; 0: none to go by) of raw ledgers,
    opened without recovery (an analytics read never fences a ledger's writer). A closed ledger's
    size is in its metadata; an open one's is guessed from its entry at the LAC."""
    extents = []
    for ledger_id in ledger_ids:
        handle = await bk.open_ledger(ledger_id, password=password, recovery=False)
        last = handle.last_add_confirmed
        if last < 0:
            entry_size = 0
        elif handle.is_closed:
            entry_size = handle.metadata.length // (last + 1)
        else:
            entry_size = len((await handle.read(last, last))[0])
        extents.append((ledger_id, last, entry_size))
    return extents


async def open_span(bk, span: ReadSpan, password: bytes):
    """A read handle of the span's ledger, its LAC known to cover the span; None if the ledger
    is gone (truncated since planning)."""
    if span.stream is not None:
        password = STREAM_LEDGER_PASSWORD
    try:
        handle = await bk.open_ledger(span.ledger_id, password=password, recovery=False)
    except NoSuchLedger:
        return None
    if handle.last_add_confirmed < span.last_entry_id and not handle.is_closed:
        await handle.read_lac()
    if handle.last_add_confirmed < span.last_entry_id:
        raise NoSuchEntry(f"ledger {span.ledger_id} was planned up to entry {span.last_entry_id} but its bookies "
                          f"confirm only {handle.last_add_confirmed}")
    return handle


async def read_entries(bk, handle, first_entry_id: int, last_entry_id: int) -> list[bytes] | None:
    """Entries first..last; None if the ledger was deleted meanwhile."""
    try:
        return await handle.read(first_entry_id, last_entry_id)
    except NoSuchLedger:
        return None
