"""A small synchronous wrapper for scripts: the async library on a background trio thread.

    from bkclient.sync import connect
    with connect("raft://127.0.0.1:2281") as bk:
        ledger = bk.create_ledger(password=b"pw")
        ledger.add(b"hello")
        ledger.close()
        print(bk.open_ledger(ledger.ledger_id, password=b"pw").read(0, 0))

Every call blocks until the async call finishes and raises the same typed exceptions. The
handles' async iterators (tail) are not offered here; use the async library for tailing.
"""

from __future__ import annotations

import concurrent.futures
import threading

import trio

from bkclient.library import connect as async_connect


class _Portal:
    """Runs `async with connect(...)` on its own thread until close()."""

    def __init__(self, uri: str, kwargs: dict) -> None:
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._nursery: trio.Nursery | None = None
        self.bk = None
        self._thread = threading.Thread(target=trio.run, args=(self._main, uri, kwargs), daemon=True,
                                        name="bkclient-sync")
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    async def _main(self, uri: str, kwargs: dict) -> None:
        self.token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        try:
            async with async_connect(uri, **kwargs) as bk, trio.open_nursery() as nursery:
                self.bk, self._nursery = bk, nursery
                self._ready.set()
                await self._stop.wait()
                nursery.cancel_scope.cancel()       # calls submitted and not finished: cancelled
        except BaseException as exc:      # noqa: BLE001 - handed to the caller's thread
            self._error = exc
            self._ready.set()

    def call(self, fn, *args, **kwargs):
        return trio.from_thread.run(lambda: fn(*args, **kwargs), trio_token=self.token)

    def submit(self, fn, *args, **kwargs) -> concurrent.futures.Future:
        """Start `await fn(*args, **kwargs)` on the client's thread and return at once: a
        Future of its result or exception (CancelledError if the client closes first)."""
        future: concurrent.futures.Future = concurrent.futures.Future()

        async def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = await fn(*args, **kwargs)
            except trio.Cancelled:
                future.set_exception(concurrent.futures.CancelledError("the client closed first"))
                raise
            except BaseException as exc:      # noqa: BLE001 - handed to the caller's thread
                future.set_exception(exc)
            else:
                future.set_result(result)
        trio.from_thread.run_sync(self._nursery.start_soon, run, trio_token=self.token)
        return future

    def close(self) -> None:
        if self._thread.is_alive():
            trio.from_thread.run_sync(self._stop.set, trio_token=self.token)
            self._thread.join()


class _SyncHandle:
    """Blocking versions of a WriteHandle's or ReadHandle's coroutine methods."""

    _METHODS = ("add", "add_many", "force", "close", "read", "read_lac", "wait_for_lac_beyond")

    def __init__(self, portal: _Portal, handle) -> None:
        self._portal = portal
        self._handle = handle

    def __getattr__(self, name: str):
        value = getattr(self._handle, name)
        if name in self._METHODS:
            return lambda *args, **kwargs: self._portal.call(value, *args, **kwargs)
        return value


class AddPipeline:
    """Adds into one ledger from a blocking thread without waiting for each other, for bulk
    writers (Spark's sink): send() starts a list of adds on the client's thread and returns at
    once, unless more than `bytes_max` payload bytes are still unacknowledged, when it first waits
    for some to be; finish() waits for all and returns the last entry id. The first failed add is
    raised by the next send() or by finish() (adds after it fail too: a ledger's adds resolve in
    order)."""

    def __init__(self, portal: _Portal, handle, *, bytes_max: int = 64 * 1024 * 1024) -> None:
        self._portal = portal
        self._handle = handle
        self._bytes_max = bytes_max
        self._changed = threading.Condition()
        self._unacknowledged = 0       # bytes; guarded by _changed
        self._adds_pending = 0
        self._last_entry_id = -1
        self._error: BaseException | None = None

    def send(self, payloads: list[bytes]) -> None:
        size = sum(map(len, payloads))
        with self._changed:
            self._changed.wait_for(lambda: self._error is not None or self._adds_pending == 0
                                   or self._unacknowledged + size <= self._bytes_max)
            self._raise_error()
            self._unacknowledged += size
            self._adds_pending += len(payloads)
        trio.from_thread.run_sync(self._start, payloads, trio_token=self._portal.token)

    @property
    def unacknowledged_bytes(self) -> int:
        with self._changed:
            return self._unacknowledged

    def finish(self) -> int:
        """Wait for every add sent; the ledger's last entry id so far (-1: none)."""
        with self._changed:
            self._changed.wait_for(lambda: self._adds_pending == 0)
            self._raise_error()
            return self._last_entry_id

    def _start(self, payloads: list[bytes]) -> None:       # on the client's thread
        for payload in payloads:
            self._handle.start_add(payload, lambda entry_id, error, size=len(payload): self._done(entry_id, error, size))

    def _done(self, entry_id: int | None, error: BaseException | None, size: int) -> None:
        with self._changed:
            self._unacknowledged -= size
            self._adds_pending -= 1
            if error is not None:
                self._error = self._error or error
            else:
                self._last_entry_id = max(self._last_entry_id, entry_id)
            self._changed.notify_all()

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error


class SyncBookKeeper:
    def __init__(self, uri: str, **kwargs) -> None:
        self._portal = _Portal(uri, kwargs)
        self._bk = self._portal.bk

    def create_ledger(self, **kwargs) -> _SyncHandle:
        return _SyncHandle(self._portal, self._portal.call(self._bk.create_ledger, **kwargs))

    def open_ledger(self, ledger_id: int, **kwargs) -> _SyncHandle:
        return _SyncHandle(self._portal, self._portal.call(self._bk.open_ledger, ledger_id, **kwargs))

    def delete_ledger(self, ledger_id: int) -> None:
        self._portal.call(self._bk.delete_ledger, ledger_id)

    def pipeline(self, handle, *, bytes_max: int = 64 * 1024 * 1024) -> AddPipeline:
        """Adds into an open ledger (a handle of this client: blocking or async) that do not
        wait for each other (see AddPipeline)."""
        return AddPipeline(self._portal, getattr(handle, "_handle", handle), bytes_max=bytes_max)

    def list_ledgers(self) -> list[int]:
        return self._portal.call(self._bk.list_ledgers)

    def list_bookies(self, *, readonly: bool = False) -> list[str]:
        return self._portal.call(self._bk.list_bookies, readonly=readonly)

    def run(self, fn, *args, **kwargs):
        """Run `await fn(bk, *args, **kwargs)` with the async client on its thread and return
        the result (for callers that need the async API, e.g. bk.streams, from blocking code)."""
        return self._portal.call(fn, self._bk, *args, **kwargs)

    def submit(self, fn, *args, **kwargs) -> concurrent.futures.Future:
        """run() without waiting: `await fn(bk, *args, **kwargs)` starts on the client's thread
        and a Future of its result comes back at once, so one thread can keep many calls on
        their way (no thread is held per call)."""
        return self._portal.submit(fn, self._bk, *args, **kwargs)

    def close(self) -> None:
        self._portal.close()

    def __enter__(self) -> SyncBookKeeper:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def connect(uri: str, **kwargs) -> SyncBookKeeper:
    """Blocking connect(); use as a context manager or call close()."""
    return SyncBookKeeper(uri, **kwargs)
