"""The async API of ledgers, over any driver of the client core: create, open and delete
ledgers; a WriteHandle adds, a ReadHandle reads, tails and waits for the LAC.

A driver runs bkcore's Client for these handles: bktransports.client_driver.ClientDriver over trio
and real bookie connections, bksim.processes' driver inside the simulator. What a driver offers:

    runtime                          bkcore.runtime (events, nurseries)
    client, store, layout            the Client core, the async metastore, the ledger layout
    await call(start)                start(op_id, now_ns) against the core; the Completed's
                                     result, or its error raised
    start_add(writer, payload, on_done, alone)  a pipelined add; on_done(entry_id, error) when it
                                         resolves; alone: no other add follows in a row, send it now

The same handles therefore serve library users, the stream and table layers on a server, and
the simulator's processes. Errors are the typed exceptions of bkcore.errors.
"""

from __future__ import annotations

from typing import AsyncIterator, Callable, Sequence

from bkcore.client.client import LedgerSpec
from bkcore.client.reader import LedgerReader
from bkcore.client.writer import LedgerWriter
from bkcore.digest import DigestType
from bkcore.errors import BKException, IllegalOperation, NoSuchLedger
from bkcore.ledger.metadata import LedgerMetadata
from bkcore.metaops import Children, Get, MetaCode
from bkcore.runtime import race

DIGESTS = {"crc32c": DigestType.CRC32C, "hmac": DigestType.HMAC_SHA256}
# How many entries tail() asks for in one read.
TAIL_READ_BATCH_COUNT = 256
# How long a tail waits before asking the metastore again when it did not answer.
METADATA_RETRY_PAUSE_S = 0.1
LONG_POLL_RETRY_PAUSE_S = 0.05


class WriteHandle:
    """The single writer of an open ledger."""

    def __init__(self, driver, writer: LedgerWriter) -> None:
        self._driver = driver
        self._writer = writer

    @property
    def ledger_id(self) -> int:
        return self._writer.ledger_id

    @property
    def last_add_confirmed(self) -> int:
        return self._writer.last_add_confirmed

    @property
    def metadata(self) -> LedgerMetadata:
        return self._writer.metadata

    async def add(self, payload: bytes) -> int:
        """Append one entry; returns its entry id once Qa bookies have it durably."""
        payload = _as_bytes(payload)
        return await self._driver.call(lambda op_id, now_ns: self._writer.add(op_id, payload, now_ns=now_ns))

    async def add_many(self, payloads: Sequence[bytes]) -> list[int]:
        """Append entries pipelined (all in flight at once); returns their ids in order. If one
        fails, the error is raised after every add has resolved; entries before it are durable."""
        payloads = [_as_bytes(payload) for payload in payloads]
        if not payloads:
            return []
        results: list[int | None] = [None] * len(payloads)
        errors: list[BKException] = []
        remaining = [len(payloads)]
        done = self._driver.runtime.Event()

        def on_done(index: int, entry_id: int | None, error: BKException | None) -> None:
            if error is not None:
                errors.append(error)
            else:
                results[index] = entry_id
            remaining[0] -= 1
            if remaining[0] == 0:
                done.set()

        for index, payload in enumerate(payloads):
            self.start_add(payload, lambda entry_id, error, i=index: on_done(i, entry_id, error))
        await done.wait()
        if errors:
            raise errors[0]
        return results

    def start_add(self, payload: bytes, on_done: Callable[[int | None, BKException | None], None], *,
                  alone: bool = False) -> None:
        """Start one add without waiting for it: `on_done(entry_id, None)` or
        `on_done(None, error)` runs in the driver's loop once it resolves (adds resolve in order).
        Adds started in a row leave together once the caller yields; alone=True says no other
        add follows now, so this one leaves at once."""
        self._driver.start_add(self._writer, payload if type(payload) is bytes else _as_bytes(payload), on_done,
                               alone=alone)

    async def force(self) -> int:
        """Make every acknowledged entry durable (deferred-sync ledgers); returns the LAC."""
        return await self._driver.call(lambda op_id, now_ns: self._writer.force(op_id, now_ns=now_ns))

    async def close(self) -> LedgerMetadata:
        """Wait for pending adds, then seal the ledger at its LAC. Returns the closed metadata."""
        return await self._driver.call(lambda op_id, now_ns: self._writer.close(op_id, now_ns=now_ns))


class ReadHandle:
    """A reader of a ledger: closed (after recovery) or still being written (no recovery)."""

    def __init__(self, driver, reader: LedgerReader) -> None:
        self._driver = driver
        self._reader = reader
        self._metadata_watch = None      # on this ledger's metadata, while tailing

    @property
    def ledger_id(self) -> int:
        return self._reader.ledger_id

    @property
    def last_add_confirmed(self) -> int:
        return self._reader.last_add_confirmed

    @property
    def is_closed(self) -> bool:
        return self._reader.is_closed

    @property
    def metadata(self) -> LedgerMetadata:
        return self._reader.metadata

    async def read(self, first_entry_id: int, last_entry_id: int) -> list[bytes]:
        """Entries first..last (inclusive), which must be at or below the LAC."""
        return await self._driver.call(
            lambda op_id, now_ns: self._reader.read(op_id, first_entry_id, last_entry_id, now_ns=now_ns))

    async def read_lac(self) -> int:
        """Ask the bookies for the newest LAC."""
        return await self._driver.call(lambda op_id, now_ns: self._reader.read_lac(op_id, now_ns=now_ns))

    async def wait_for_lac_beyond(self, lac: int, *, timeout_s: float | None = None) -> int:
        """Long-poll until the LAC passes `lac` or the ledger is closed (the ledger's metadata
        is watched meanwhile, so a close ends the wait at once); returns the LAC."""
        timeout_ns = None if timeout_s is None else int(timeout_s * 1e9)
        reader, driver = self._reader, self._driver
        while reader.last_add_confirmed <= lac and not reader.is_closed:
            before = reader.last_add_confirmed
            async def long_poll() -> None:
                await driver.call(lambda op_id, now_ns: reader.long_poll_lac(op_id, now_ns=now_ns,
                                                                             timeout_ns=timeout_ns))

            async def until_closed() -> None:
                while not await self._has_closed():
                    await self._metadata_watch.wait()

            await race(driver.runtime, long_poll, until_closed)
            if reader.last_add_confirmed == before:
                if timeout_ns is not None:
                    break
                # The poll came back with nothing (a bookie without the ledger answers at once,
                # without waiting): poll again after a pause, not at the network's pace.
                await driver.runtime.sleep(LONG_POLL_RETRY_PAUSE_S)
        return reader.last_add_confirmed

    async def _has_closed(self) -> bool:
        """Whether the ledger is closed, re-reading its metadata only when the one watch this
        handle keeps on it has fired (so a long tail does not pile up watches)."""
        if self._reader.is_closed:
            return True
        if self._metadata_watch is not None and not self._metadata_watch.is_fired:
            return False
        driver = self._driver
        result, self._metadata_watch = await driver.store.execute_watch(Get(driver.layout.ledger_path(self.ledger_id)))
        if result.code is MetaCode.SESSION_EXPIRED:
            # No watch can be set any more, and waiting on one that fired would spin.
            raise ConnectionError(f"tailing ledger {self.ledger_id}: the metastore session of this client expired; "
                                  f"connect again to go on")
        if result.code is MetaCode.CONNECTION_LOSS:
            await driver.runtime.sleep(METADATA_RETRY_PAUSE_S)     # its watch fired already: look again soon
        elif result.code is MetaCode.OK and LedgerMetadata.from_bytes(result.data, version=result.version).is_closed:
            await driver.call(lambda op_id, now_ns: self._reader.refresh_metadata(op_id, now_ns=now_ns))
        return self._reader.is_closed

    async def tail(self, start_entry_id: int = 0) -> AsyncIterator[tuple[int, bytes]]:
        """Yield (entry_id, payload) from start_entry_id on, waiting (long poll) for new entries
        while the ledger is open; ends once a closed ledger has been read to its end."""
        next_id = start_entry_id
        while True:
            lac = self._reader.last_add_confirmed
            polled = self._reader.take_polled_entry(next_id) if next_id <= lac else None
            if polled is not None:          # the long poll brought it: no read needed
                yield next_id, polled
                next_id += 1
            elif next_id <= lac:
                last = min(lac, next_id + TAIL_READ_BATCH_COUNT - 1)
                for offset, payload in enumerate(await self.read(next_id, last)):
                    yield next_id + offset, payload
                next_id = last + 1
            elif self._reader.is_closed:
                return
            else:
                await self.wait_for_lac_beyond(next_id - 1)


class BookKeeperClient:
    """Ledgers through a driver (see the module docstring), and the log streams on them."""

    def __init__(self, driver) -> None:
        self._driver = driver
        self.runtime = driver.runtime
        self.store = driver.store
        self.layout = driver.layout
        self._streams = None

    @property
    def streams(self):
        """Log streams over this client's ledgers (bkcore.stream.streams.Streams)."""
        from bkcore.stream.streams import Streams
        if self._streams is None:
            self._streams = Streams(self)
        return self._streams

    async def create_ledger(self, *, ensemble: int = 3, write_quorum: int = 3, ack_quorum: int = 2,
                            password: bytes = b"", digest: str = "crc32c", deferred_sync: bool = False,
                            custom_metadata: dict[str, bytes] | None = None,
                            bookies: Sequence[str] = (), lac_push_delay_ns: int | None = None) -> WriteHandle:
        """A new open ledger on `ensemble` bookies chosen at random (or exactly `bookies`).
        lac_push_delay_ns: for a ledger no reader tails closely, how long its writer stays
        idle before it pushes its LAC explicitly (None: the client's explicit LAC policy)."""
        if digest not in DIGESTS:
            raise ValueError(f"digest {digest!r}: use one of {', '.join(DIGESTS)}")
        spec = LedgerSpec(ensemble_size=ensemble, write_quorum_size=write_quorum, ack_quorum_size=ack_quorum,
                          digest_type=DIGESTS[digest], is_deferred_sync=deferred_sync,
                          custom_metadata=tuple(sorted((custom_metadata or {}).items())), bookies=tuple(bookies))
        writer = await self._driver.call(lambda op_id, now_ns: self._driver.client.create_ledger(
            op_id, password=password, spec=spec, now_ns=now_ns))
        writer.lac_push_delay_ns = lac_push_delay_ns      # (no add yet: nothing scheduled)
        return WriteHandle(self._driver, writer)

    async def open_ledger(self, ledger_id: int, *, password: bytes | None = b"", recovery: bool = True,
                          force_recovery: bool = False) -> ReadHandle:
        """Open for reading. With recovery (the default) the ledger is fenced and closed first,
        so its end is final; without, it is read while its writer may still be adding.
        password=None (with recovery=False): an administrator's read, without the password, of
        a ledger whose digests need none (CRC32C); Unauthorized for one whose digests do."""
        reader = await self._driver.call(lambda op_id, now_ns: self._driver.client.open_ledger(
            op_id, ledger_id, password=password, is_recovery=recovery, is_forced=force_recovery, now_ns=now_ns))
        return ReadHandle(self._driver, reader)

    async def delete_ledger(self, ledger_id: int) -> None:
        await self._driver.call(lambda op_id, now_ns: self._driver.client.delete_ledger(op_id, ledger_id, now_ns=now_ns))

    async def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        result = await self.store.execute(Get(self.layout.ledger_path(ledger_id)))
        if result.code is MetaCode.NO_NODE:
            raise NoSuchLedger(f"ledger {ledger_id} does not exist")
        if result.code is not MetaCode.OK:
            raise ConnectionError(f"reading ledger {ledger_id}'s metadata failed: {result.code.name}")
        return LedgerMetadata.from_bytes(result.data, version=result.version)

    async def replicate_fragment(self, metadata: LedgerMetadata, fragment, target: str) -> LedgerMetadata:
        """Copy a lost bookie's fragment to `target` and swap it in; returns the new metadata."""
        return await self._driver.call(lambda op_id, now_ns: self._driver.client.replicate_fragment(
            op_id, metadata, fragment, target, now_ns=now_ns))

    async def list_bookies(self, *, readonly: bool = False) -> list[str]:
        path = self.layout.readonly_path if readonly else self.layout.available_path
        result = await self.store.execute(Children(path))
        if result.code is MetaCode.NO_NODE:
            return []
        if result.code is not MetaCode.OK:
            raise ConnectionError(f"listing {path} failed: {result.code.name}")
        return sorted(name for name in result.children if name != "readonly")


def _as_bytes(payload: object) -> bytes:
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise IllegalOperation(f"an entry is bytes, not {type(payload).__name__}")
    return bytes(payload)
