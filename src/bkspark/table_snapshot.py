"""Snapshots of a table's ranges, rebuilt from the ranges' journals and checkpoints in the
reading process: no table server and no gRPC, only ledgers and the metastore (through the
process's blocking client, bkspark.cluster).

A range of a table is a deterministic state machine over its journal (bkcore.table.range):
whoever applies the same journal records in the same order gets the same keys, values and
revision. So a snapshot is a journal position:

- The driver plans one RangeCut per range that has a journal: the journal's end as its bookies
  confirm it now (completed segments to their last entry, the in-progress one to its LAC), and
  the time TTLs are judged at. Ranges never used have no journal and hold nothing.
- A worker loads the newest intact checkpoint that covers no more than the cut, replays the
  journal records after it up to the cut, and reads every live key. A task Spark retries reads
  exactly the same rows.
- The owner goes on meanwhile: it may checkpoint and truncate its journal behind the older of
  its last two checkpoints. If that removed what the cut needs (a journal ledger or the
  checkpoint), the worker starts over (SNAPSHOT_ATTEMPTS times) and then fails naming the range.

Consistency: each range is read as of one journal position, so every command (a txn included:
all its keys share a pkey, hence a range) is in a snapshot wholly or not at all. The cuts of
different ranges are taken one after another while the driver plans, not at one instant: a
write to one range that follows a write to another may be in while the earlier one is not. A
command is in once its journal entry is confirmed to the bookies (the LAC): an owner's last
command shows once its next one is written or its explicit LAC is sent, which a range's journal
does once it has been idle for bkcore.table.range.LAC_PUSH_DELAY_NS (10 ms; sooner would cost
every bookie a WriteLac per group of commands under load).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from bkcore.stream.errors import StreamNotFound
from bkcore.stream.entry_format import unpack_entry
from bkcore.stream.records import DLSN, DLSN_START, PositionedRecord, positioned
from bkcore.table.commands import RangeRead, RangeResult, TableError, decode_stamped
from bkcore.table.kv import KEY_SIZE_MAX, MemoryKvIndex, RangeState
from bkspark import cluster
from bkspark.planning import StreamView, earliest, end_of, plan_spans
from bkspark.read_sizing import read_range
from bkcore.table.checkpoints import CheckpointInfo, CheckpointParser, checkpoint_stream_name
from bkcore.table.range import TABLES_NAMESPACE, journal_stream_name

SNAPSHOT_ATTEMPTS = 3
# Past every folded key (a folded key is at most KEY_SIZE_MAX bytes).
_KEYS_END = b"\xff" * (KEY_SIZE_MAX + 1)


class TableNotFound(LookupError):
    """The table to read does not exist."""


class TableSnapshotError(RuntimeError):
    """A range's snapshot could not be rebuilt as planned."""


class _MovedOn(Exception):
    """What the cut needs was truncated or deleted while it was being read: start over."""


@dataclass(frozen=True, slots=True)
class RangeCut:
    """What one Spark partition reads: range `range_id` of `table` after the journal records
    before `journal_end`, its TTLs judged at `now_ms`."""

    table: str                       # "namespace/name"
    range_id: int
    journal_end: DLSN                # exclusive
    now_ms: int

    @property
    def journal_name(self) -> str:
        return journal_stream_name(self.table, self.range_id)


# -- the driver -----------------------------------------------------------------------------


async def plan_cuts(bk, namespace: str, name: str, *, now_ms: int) -> list[RangeCut]:
    """One cut per range of table namespace/name that has a journal, at its end now."""
    table = f"{namespace}/{name}"
    try:
        settings = (await bk.streams.catalog.get_stream(namespace, name)).settings
    except StreamNotFound:
        raise TableNotFound(f'option "table"={table!r}: table {table} does not exist. A table is a stream '
                            f'used as one: create it (bk stream create --stream {name}, or '
                            f'bk.streams.create_stream("{namespace}", "{name}")) or check the name') from None
    cuts = []
    for range_id in range(settings.table_ranges):
        try:
            view = await cluster.stream_view(bk, TABLES_NAMESPACE, journal_stream_name(table, range_id))
        except StreamNotFound:
            continue                 # no key of this range was ever written
        cuts.append(RangeCut(table, range_id, end_of(view).position, now_ms))
    return cuts


# -- the workers ----------------------------------------------------------------------------


def read_cut(bk, cut: RangeCut, *, chunk_entries: int) -> RangeResult:
    """Every live key of the range as of the cut (bk: a bkclient.sync client), with the
    range's revision there."""
    failures = []
    for _ in range(SNAPSHOT_ATTEMPTS):
        try:
            state = _rebuild(bk, cut, chunk_entries)
        except _MovedOn as exc:
            failures.append(str(exc))
            continue
        return state.read(RangeRead(b"", _KEYS_END), now_ms=cut.now_ms)
    raise TableSnapshotError(f"range {cut.range_id} of table {cut.table}: the snapshot planned at journal "
                             f"position {cut.journal_end} cannot be rebuilt, what it needs went while it was read "
                             f"({'; '.join(failures)}): the range's owner checkpointed twice since planning and "
                             f"truncated behind it, or the table was deleted. Run the query again")


def _rebuild(bk, cut: RangeCut, chunk_entries: int) -> RangeState:
    checkpoint = _newest_checkpoint(bk, cut, chunk_entries)
    info, items = checkpoint if checkpoint is not None else (None, {})
    start = info.replay_from if info is not None and info.replay_from is not None else DLSN_START
    state = RangeState(MemoryKvIndex(items))
    try:
        view = bk.run(cluster.stream_view, TABLES_NAMESPACE, cut.journal_name)
    except StreamNotFound:
        raise _MovedOn(f"journal {cut.journal_name} was deleted") from None
    if start < view.truncated_to:
        raise _MovedOn(f"journal truncated up to {view.truncated_to}, past {start}")
    for record in stream_records(bk, view, start, cut.journal_end, chunk_entries=chunk_entries):
        try:
            stamped = decode_stamped(record.payload)
        except TableError as exc:
            raise TableSnapshotError(f"range {cut.range_id} of table {cut.table}: journal record {record.dlsn} "
                                     f"is unreadable: {exc}") from None
        state.apply(stamped, position=list(record.dlsn))
    return state


def _newest_checkpoint(bk, cut: RangeCut, chunk_entries: int) -> tuple[CheckpointInfo, dict] | None:
    """The newest intact checkpoint that includes only journal records before the cut."""
    try:
        view = bk.run(cluster.stream_view, TABLES_NAMESPACE, checkpoint_stream_name(cut.journal_name))
    except StreamNotFound:
        return None
    parser = CheckpointParser(lambda info: info.journal_position is None or info.journal_position < cut.journal_end)
    newest = None
    for record in stream_records(bk, view, earliest(view).position, end_of(view).position,
                                 chunk_entries=chunk_entries):
        newest = parser.feed(record.dlsn, record.payload) or newest
    return newest


def stream_records(bk, view: StreamView, start: DLSN, end: DLSN, *,
                   chunk_entries: int) -> Iterator[PositionedRecord]:
    """The records of [start, end) of the stream `view` shows, read at most chunk_entries
    entries (and about READ_BYTES_TARGET bytes) at a time.
    Raises _MovedOn if a ledger went meanwhile."""
    for span in plan_spans(view, start, end, max_entries=2**62):
        handle = bk.run(cluster.open_span, span, b"")
        if handle is None:
            raise _MovedOn(f"ledger {span.ledger_id} of {view.name} was deleted")
        reads = read_range(bk, handle, span.first_entry_id, span.last_entry_id, entries_max=chunk_entries,
                           in_flight_max=2)
        for first, payloads in reads:
            if payloads is None:
                raise _MovedOn(f"ledger {span.ledger_id} of {view.name} was deleted")
            for entry_id, payload in enumerate(payloads, first):
                for record in positioned(span.seqno, entry_id, unpack_entry(payload)):
                    if start <= record.dlsn < end:
                        yield record
