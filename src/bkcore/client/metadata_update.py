"""Reading ledger metadata and changing it by compare-and-set, in one retry loop.

Every metadata change of the client (ensemble change, close, mark in recovery) goes through
`update_ledger_metadata`: apply a transform to the newest metadata, CAS it on its version, and
on conflict re-read and transform again. A lost connection leaves the outcome unknown, so the
loop re-reads and, if the stored bytes are exactly what it wrote, takes that as success.
"""

from __future__ import annotations

from typing import Callable

from bkcore.errors import BKException, MetadataError, NoSuchLedger
from bkcore.ledger.metadata import LedgerMetadata, MetadataFormatError
from bkcore.metaops import Get, MetaCode, SetData
from bkcore.client.context import ClientContext

DoneCallback = Callable[[LedgerMetadata | None, BKException | None, int], None]
# A transform returns the metadata to write, or None when the current metadata already says
# what the caller wants; it raises a BKException to give up (e.g. the ledger was closed).
Transform = Callable[[LedgerMetadata], LedgerMetadata | None]


def read_ledger_metadata(ctx: ClientContext, ledger_id: int, on_done: DoneCallback, *,
                         now_ns: int, attempt_index: int = 0) -> None:
    path = ctx.layout.ledger_path(ledger_id)

    def on_result(result, at_ns: int) -> None:
        if result.code is MetaCode.OK:
            try:
                on_done(LedgerMetadata.from_bytes(result.data, version=result.version), None, at_ns)
            except MetadataFormatError as exc:
                on_done(None, MetadataError(f"ledger {ledger_id}: {exc}"), at_ns)
        elif result.code is MetaCode.NO_NODE:
            on_done(None, NoSuchLedger(f"ledger {ledger_id} does not exist"), at_ns)
        elif attempt_index + 1 < ctx.config.metadata_retry_count_max:
            ctx.retry_later(at_ns, lambda t: read_ledger_metadata(
                ctx, ledger_id, on_done, now_ns=t, attempt_index=attempt_index + 1))
        else:
            on_done(None, MetadataError(f"ledger {ledger_id}: metadata unreadable: {result.code.name}"), at_ns)

    ctx.call_metadata(Get(path), on_result)


def update_ledger_metadata(ctx: ClientContext, current: LedgerMetadata, transform: Transform,
                           on_done: DoneCallback, *, now_ns: int) -> None:
    _Update(ctx, transform, on_done).start(current, now_ns)


class _Update:
    __slots__ = ("ctx", "transform", "on_done", "attempt_count", "written")

    def __init__(self, ctx: ClientContext, transform: Transform, on_done: DoneCallback) -> None:
        self.ctx = ctx
        self.transform = transform
        self.on_done = on_done
        self.attempt_count = 0
        self.written: bytes | None = None

    def start(self, current: LedgerMetadata, now_ns: int) -> None:
        try:
            wanted = self.transform(current)
        except BKException as exc:
            self.on_done(None, exc, now_ns)
            return
        if wanted is None:
            self.on_done(current, None, now_ns)
            return
        self.attempt_count += 1
        if self.attempt_count > self.ctx.config.metadata_retry_count_max:
            self.on_done(None, MetadataError(f"ledger {current.ledger_id}: gave up after "
                                             f"{self.attempt_count - 1} metadata updates"), now_ns)
            return
        self.written = wanted.to_bytes()
        path = self.ctx.layout.ledger_path(current.ledger_id)
        self.ctx.call_metadata(SetData(path, self.written, current.version),
                               lambda result, at_ns: self._on_set(result, wanted, at_ns))

    def _on_set(self, result, wanted: LedgerMetadata, now_ns: int) -> None:
        if result.code is MetaCode.OK:
            self.on_done(wanted.with_version(result.version), None, now_ns)
        elif result.code is MetaCode.NO_NODE:
            self.on_done(None, NoSuchLedger(f"ledger {wanted.ledger_id} was deleted"), now_ns)
        elif result.code is MetaCode.BAD_VERSION:
            read_ledger_metadata(self.ctx, wanted.ledger_id, self._on_reread, now_ns=now_ns)
        else:  # outcome unknown: re-read and compare
            self.ctx.retry_later(now_ns, lambda t: read_ledger_metadata(
                self.ctx, wanted.ledger_id, self._on_reread, now_ns=t))

    def _on_reread(self, fresh: LedgerMetadata | None, error: BKException | None, now_ns: int) -> None:
        if error is not None:
            self.on_done(None, error, now_ns)
        elif fresh.to_bytes() == self.written:
            self.on_done(fresh, None, now_ns)
        else:
            self.start(fresh, now_ns)
