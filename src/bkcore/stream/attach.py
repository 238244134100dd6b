"""Attaching completed ledgers to a stream as new segments, exactly once per (writer, batch).

Batch writers (the Spark sink) write records into ledgers of their own, one per task, in the
stream's entry format; a driver then attaches all of them in one decision:

    outcome = await bk.streams.attach_segments("ns", "events", writer_id="job-7", batch_id=3,
                                               segments=[AttachedLedger(...), ...])

The decision is one compare-and-set on the writer's commit record,
`<stream>/commits/<writer_id>`, which holds the newest batch id it committed and that batch's
ledgers (with their totals). A batch id at or below the recorded one is refused (the outcome
says so and the caller deletes its duplicate ledgers): a replayed streaming batch or a re-run
job is never applied twice. The metastore has no multi-node transactions, so the segment nodes
are created after the decision, in order, by whoever sees a recorded batch whose ledgers are
not all segments yet (this call, and its retries after a crash); creating them is idempotent
(a ledger already attached is skipped). Before attaching, an in-progress last segment is sealed
as a new stream writer would (fencing its writer), and txids must not go backwards.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgpack

from bkcore.stream.errors import StreamMetadataConflict, TxidOutOfOrder
from bkcore.stream.segments import SegmentMetadata, SegmentState, decode_record, stream_last_txid
from bkcore.stream.catalog import StreamCatalog
from bkcore.stream.writer import recover_segment

COMMIT_FORMAT = 1
CAS_ATTEMPTS = 20


@dataclass(frozen=True, slots=True)
class AttachedLedger:
    """A closed ledger of stream entries and its totals (what the task that wrote it reports)."""

    ledger_id: int
    last_entry_id: int
    first_txid: int
    last_txid: int
    record_count: int
    size: int

    def to_list(self) -> list:
        return [self.ledger_id, self.last_entry_id, self.first_txid, self.last_txid, self.record_count, self.size]


@dataclass(frozen=True, slots=True)
class CommitRecord:
    batch_id: int
    ledgers: tuple[AttachedLedger, ...]
    version: int = -1

    def to_bytes(self) -> bytes:
        return msgpack.packb([COMMIT_FORMAT, self.batch_id, [ledger.to_list() for ledger in self.ledgers]])

    @classmethod
    def from_bytes(cls, data: bytes, *, version: int) -> CommitRecord:
        def build(fields: list) -> CommitRecord:
            batch_id, ledgers = fields
            return cls(batch_id, tuple(AttachedLedger(*values) for values in ledgers), version=version)
        return decode_record(data, expected_format=COMMIT_FORMAT, what="commit record", build=build)


@dataclass(frozen=True, slots=True)
class AttachOutcome:
    applied: bool                  # False: this batch id was committed before (nothing new attached)
    committed: CommitRecord        # the record as it stands
    seqnos: tuple[int, ...]        # the segments holding the committed batch's ledgers


def check_txids(ledgers: list[AttachedLedger], *, stream_last: int, name: str) -> None:
    """Txids never decrease along a stream: not across the attached ledgers, nor below the
    stream's newest."""
    newest = stream_last
    for ledger in ledgers:
        if ledger.record_count == 0:
            continue
        if ledger.first_txid < newest:
            raise TxidOutOfOrder(f"attaching ledger {ledger.ledger_id} to {name} would put txid {ledger.first_txid} "
                                 f"after {newest}; txids never decrease (sort the rows by txid, or let the "
                                 f"writer assign them)")
        newest = ledger.last_txid


async def attach_segments(bk, catalog: StreamCatalog, namespace: str, stream: str, *, writer_id: str,
                          batch_id: int, ledgers: list[AttachedLedger]) -> AttachOutcome:
    name = f"{namespace}/{stream}"
    for _ in range(CAS_ATTEMPTS):
        data, version = await catalog.commit_record(namespace, stream, writer_id)
        record = CommitRecord.from_bytes(data, version=version) if data is not None else None
        if record is not None:
            seqnos = await _materialize(bk, catalog, namespace, stream, record)
            if batch_id <= record.batch_id:
                return AttachOutcome(False, record, seqnos if batch_id == record.batch_id else ())
        segments = await _sealed_segments(bk, catalog, namespace, stream)
        check_txids(ledgers, stream_last=stream_last_txid(segments), name=name)
        new = CommitRecord(batch_id, tuple(ledgers), version=version)
        if await catalog.put_commit_record(namespace, stream, writer_id, new.to_bytes(), version):
            stored = CommitRecord(batch_id, tuple(ledgers))
            return AttachOutcome(True, stored, await _materialize(bk, catalog, namespace, stream, stored))
    raise StreamMetadataConflict(f"attaching to {name} as {writer_id!r} lost {CAS_ATTEMPTS} races in a row")


async def _sealed_segments(bk, catalog: StreamCatalog, namespace: str, stream: str) -> list[SegmentMetadata]:
    """The stream's segments with an in-progress last one recovered and completed."""
    segments = await catalog.segments(namespace, stream)
    if segments and segments[-1].state is SegmentState.IN_PROGRESS:
        segments[-1] = await recover_segment(bk, catalog, namespace, stream, segments[-1])
    return segments


async def _materialize(bk, catalog: StreamCatalog, namespace: str, stream: str,
                       record: CommitRecord) -> tuple[int, ...]:
    """Make every ledger of `record` a completed segment (skipping those that are); returns
    their seqnos in the record's order."""
    seqnos = []
    for ledger in record.ledgers:
        for _ in range(CAS_ATTEMPTS):
            segments = await catalog.segments(namespace, stream)
            present = next((s for s in segments if s.ledger_id == ledger.ledger_id), None)
            if present is not None:
                seqnos.append(present.seqno)
                break
            if segments and segments[-1].state is SegmentState.IN_PROGRESS:
                segments = await _sealed_segments(bk, catalog, namespace, stream)
            seqno = segments[-1].seqno + 1 if segments else 1
            segment = SegmentMetadata(seqno, ledger.ledger_id, SegmentState.COMPLETED, ledger.first_txid,
                                      ledger.last_txid, ledger.last_entry_id, ledger.record_count, ledger.size,
                                      int(bk.runtime.wall_time_s()))
            if await catalog.create_segment(namespace, stream, segment) is not None:
                seqnos.append(seqno)
                break
        else:
            raise StreamMetadataConflict(f"attaching ledger {ledger.ledger_id} to {namespace}/{stream} lost "
                                         f"{CAS_ATTEMPTS} races in a row")
    return tuple(seqnos)
