"""StreamHistory: what the stream workload's processes saw, and the checker that judges it.

The workload only records; check_stream_history() decides. Its rules, each a kind of
violation:

- lost-ack: a record whose write was acknowledged at a position at or after the final
  truncation point is not in the final stream at that position with that payload. (A record
  acknowledged after its writer was fenced, at a position past the end the fencing sealed,
  shows up here too, as fenced-ack.)
- two-contents: one position was read (or acknowledged) with two different payloads.
- reader-order: a reader's records, from its first one at or after the final truncation
  point, are not the final stream's records in order without gaps; or a reader started at a
  position skipped records after it.
- txid-order: the final stream's txids do not strictly increase.
- below-truncation: a reader opened after a truncation to P was acknowledged returned a
  record before P.
- cursor-truncated: a record after a cursor's committed position was truncated while the
  stream's settings keep what cursors have not consumed, or the workload's truncation (which
  stays below every cursor) went past one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bkcore.stream.records import DLSN


@dataclass(slots=True)
class ReaderLog:
    name: str
    start_kind: str                   # earliest, latest, position, txid, cursor
    start: DLSN                       # the position the reader resolved its start to
    opened_at_ns: int
    records: list[tuple[DLSN, int, bytes]] = field(default_factory=list)
    # Whether the start is exact: the first record must be the first of the stream at or after
    # `start` (a txid start skips records below the txid; latest may race with writes).
    is_start_exact: bool = True


@dataclass(slots=True)
class StreamHistory:
    writes_invoked: int = 0
    writes_failed: int = 0
    acks: list[tuple[str, bytes, DLSN]] = field(default_factory=list)     # (writer, payload, position)
    writer_opens: list[tuple[str, int]] = field(default_factory=list)      # (writer, first seqno)
    readers: list[ReaderLog] = field(default_factory=list)
    truncations: list[tuple[DLSN, int]] = field(default_factory=list)     # (position, acked at)
    cursor_commits: list[tuple[str, DLSN]] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)                  # kind -> count
    # Set by the verifier once the faults have ended.
    final_records: list[tuple[DLSN, int, bytes]] | None = None
    final_truncated_to: DLSN | None = None
    final_cursors: dict[str, DLSN] = field(default_factory=dict)
    keeps_unconsumed: bool = False

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1


@dataclass(frozen=True, slots=True)
class StreamViolation:
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


def _short(payload: bytes | None) -> str:
    """A payload as a violation shows it: the workload puts its identity first."""
    return repr(payload if payload is None or len(payload) <= 24 else payload[:24] + b"...")


def check_stream_history(history: StreamHistory) -> list[StreamViolation]:
    violations: list[StreamViolation] = []
    if history.final_records is None:
        return violations
    truncated_to = history.final_truncated_to
    final = history.final_records
    final_at = {dlsn: payload for dlsn, _, payload in final}
    violations += _acks_kept(history, truncated_to, final_at)
    violations += _one_content_per_position(history)
    violations += _readers_see_the_stream(history, truncated_to, final)
    violations += _txids_increase(final)
    violations += _nothing_below_truncation(history)
    violations += _cursors_respected(history, truncated_to)
    return violations


def _acks_kept(history: StreamHistory, truncated_to: DLSN, final_at: dict) -> list[StreamViolation]:
    found = []
    sealed_end = {}
    for dlsn in final_at:
        key = dlsn.segment
        sealed_end[key] = max(sealed_end.get(key, DLSN(key, -1, 0)), dlsn)
    for writer, payload, dlsn in history.acks:
        if dlsn < truncated_to:
            continue
        if final_at.get(dlsn) == payload:
            continue
        end = sealed_end.get(dlsn.segment)
        if end is not None and dlsn > end:
            found.append(StreamViolation("fenced-ack", f"{writer} was acknowledged {_short(payload)} at {dlsn}, past the "
                                                       f"end {end} its segment was sealed at"))
        else:
            found.append(StreamViolation("lost-ack", f"{writer}'s acknowledged {_short(payload)} at {dlsn} is not in the "
                                                     f"final stream (there: {_short(final_at.get(dlsn))})"))
    return found[:5]


def _one_content_per_position(history: StreamHistory) -> list[StreamViolation]:
    seen: dict[DLSN, bytes] = {}
    found = []
    observations = [(f"ack by {w}", d, p) for w, p, d in history.acks]
    for reader in history.readers:
        observations += [(reader.name, d, p) for d, _, p in reader.records]
    observations += [("final read", d, p) for d, _, p in history.final_records]
    for who, dlsn, payload in observations:
        before = seen.setdefault(dlsn, payload)
        if before != payload:
            found.append(StreamViolation("two-contents", f"{dlsn} held {_short(before)}, then {who} saw {_short(payload)}"))
    return found[:5]


def _readers_see_the_stream(history: StreamHistory, truncated_to: DLSN,
                            final: list[tuple[DLSN, int, bytes]]) -> list[StreamViolation]:
    index_of = {record[0]: index for index, record in enumerate(final)}
    found = []
    for reader in history.readers:
        records = [r for r in reader.records if r[0] >= truncated_to]
        if not records:
            continue
        first = index_of.get(records[0][0])
        if first is None:
            found.append(StreamViolation("reader-order", f"{reader.name} read {records[0][0]}, which the final "
                                                         f"stream does not have"))
            continue
        expected = final[first:first + len(records)]
        if [(d, p) for d, _, p in records] != [(d, p) for d, _, p in expected]:
            mismatch = next(i for i, (a, b) in enumerate(zip(records, expected + [None] * len(records)))
                            if b is None or (a[0], a[2]) != (b[0], b[2]))
            found.append(StreamViolation("reader-order", f"{reader.name}'s record {mismatch} is {records[mismatch][0]}, "
                                                         f"the stream has {expected[mismatch][0] if mismatch < len(expected) else 'nothing'} there"))
            continue
        if reader.is_start_exact and reader.start >= truncated_to and records[0] is reader.records[0]:
            skipped = [d for d, _, _ in final if reader.start <= d < records[0][0]]
            if skipped:
                found.append(StreamViolation("reader-order", f"{reader.name} started at {reader.start} but its first "
                                                             f"record is {records[0][0]}, skipping {skipped[0]}"))
    return found[:5]


def _txids_increase(final: list[tuple[DLSN, int, bytes]]) -> list[StreamViolation]:
    for (dlsn_a, txid_a, _), (dlsn_b, txid_b, _) in zip(final, final[1:]):
        if txid_b <= txid_a:
            return [StreamViolation("txid-order", f"txid {txid_b} at {dlsn_b} follows txid {txid_a} at {dlsn_a}")]
    return []


def _nothing_below_truncation(history: StreamHistory) -> list[StreamViolation]:
    found = []
    for position, acked_ns in history.truncations:
        for reader in history.readers:
            if reader.opened_at_ns > acked_ns:
                below = [d for d, _, _ in reader.records if d < position]
                if below:
                    found.append(StreamViolation("below-truncation", f"{reader.name}, opened after the stream was "
                                                                     f"truncated to {position}, read {below[0]}"))
    return found[:5]


def _cursors_respected(history: StreamHistory, truncated_to: DLSN) -> list[StreamViolation]:
    """Nothing a cursor had not consumed was truncated (cursors only move forward here, and
    exist before the first record)."""
    if not history.final_cursors:
        return []
    consumed_to = min(history.final_cursors.values())
    unconsumed = sorted(d for _, _, d in history.acks if consumed_to < d < truncated_to)
    if unconsumed:
        return [StreamViolation("cursor-truncated", f"the stream is truncated to {truncated_to}, but a cursor has "
                                                    f"consumed only up to {consumed_to}: {unconsumed[0]} and "
                                                    f"{len(unconsumed) - 1} later acknowledged records are gone")]
    return []
