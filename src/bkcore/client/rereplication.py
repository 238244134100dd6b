"""Re-replication: copying a lost bookie's fragments to another bookie (autorecovery's worker).

A fragment is one ensemble's span of entries as seen from one position: entries first..last of
that ensemble whose write set includes the position. Re-replicating it means
1. for each such entry, reading it from another bookie of its write set (trying each in turn)
   and storing the same bytes on the target with a recovery add (the ledger's master key, kept
   in its metadata) — bytes are copied, never rebuilt; CRC32C entries are checked on the way;
2. then replacing the lost bookie with the target in that ensemble, by compare-and-set, only if
   the ensemble still names the lost bookie at that position.
Only fragments whose entries are final are copied: every ensemble of a closed ledger, and every
ensemble but the last of an open one (its writer moves off a lost bookie by itself).

An entry that no surviving replica has fails the fragment (metadata untouched): either it was
never acknowledged on a survivor — impossible for a closed ledger's entries — or data is lost,
and an operator must look.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from bkcore.client.context import ClientContext
from bkcore.client.metadata_update import update_ledger_metadata
from bkcore.digest import Digester, DigestMismatch, DigestType
from bkcore.errors import BKException, Code, IllegalOperation, NoSuchEntry, exception_for
from bkcore.ledger.metadata import LedgerMetadata
from bkcore.ledger.schedule import write_set
from bkcore.wire import AddRequest, ReadRequest

COPY_WINDOW = 64          # entries being copied at once


@dataclass(frozen=True, slots=True)
class Fragment:
    ledger_id: int
    ensemble_start: int       # first entry id of the ensemble (its key in the metadata)
    first_entry_id: int
    last_entry_id: int        # inclusive
    position: int             # the lost bookie's position in that ensemble
    bookie: str               # the lost bookie

    def entry_ids(self, metadata: LedgerMetadata) -> list[int]:
        return [e for e in range(self.first_entry_id, self.last_entry_id + 1)
                if self.position in write_set(e, ensemble_size=metadata.ensemble_size,
                                              write_quorum_size=metadata.write_quorum_size)]


def fragments_on(metadata: LedgerMetadata, bookie: str) -> list[Fragment]:
    """The final fragments of `metadata` that name `bookie` (see the module docstring)."""
    ensembles = metadata.ensembles
    found = []
    for index, (start, bookies) in enumerate(ensembles):
        if bookie not in bookies:
            continue
        is_last = index == len(ensembles) - 1
        if is_last and not metadata.is_closed:
            continue
        last = metadata.last_entry_id if is_last else ensembles[index + 1][0] - 1
        if last >= start:
            found.append(Fragment(metadata.ledger_id, start, start, last, bookies.index(bookie), bookie))
    return found


class FragmentReplication:
    """Copy one fragment to `target`, then swap it into the metadata. on_done(metadata, error,
    now_ns) gets the updated metadata."""

    def __init__(self, *, ctx: ClientContext, metadata: LedgerMetadata, fragment: Fragment, target: str,
                 on_done) -> None:
        self.ctx = ctx
        self.metadata = metadata
        self.fragment = fragment
        self.target = target
        self.on_done = on_done
        ensemble = dict(metadata.ensembles)[fragment.ensemble_start]
        self.ensemble = ensemble
        self._todo = fragment.entry_ids(metadata)
        self._next_index = 0
        self._in_flight = 0
        self._copied_count = 0
        self._failed = False
        # CRC32C needs no password; HMAC entries are copied unverified (readers verify them).
        self._digester = (Digester(ledger_id=metadata.ledger_id, digest_type=DigestType.CRC32C, password=b"")
                          if metadata.digest_type is DigestType.CRC32C else None)

    @property
    def copied_count(self) -> int:
        return self._copied_count

    def start(self, now_ns: int) -> None:
        if not self.metadata.master_key:
            self._finish(IllegalOperation(f"ledger {self.metadata.ledger_id}: its metadata has no master key "
                                          f"(written by an older version); it cannot be re-replicated"), now_ns)
            return
        if self.target in self.ensemble:
            self._finish(IllegalOperation(f"ledger {self.metadata.ledger_id}: {self.target} is already in the "
                                          f"ensemble at entry {self.fragment.ensemble_start}"), now_ns)
            return
        self._fill(now_ns)

    def _fill(self, now_ns: int) -> None:
        while not self._failed and self._in_flight < COPY_WINDOW and self._next_index < len(self._todo):
            entry_id = self._todo[self._next_index]
            self._next_index += 1
            self._in_flight += 1
            self._read(entry_id, self._sources(entry_id), now_ns)
        if not self._failed and self._in_flight == 0 and self._next_index == len(self._todo):
            self._swap_in(now_ns)

    def _sources(self, entry_id: int) -> list[str]:
        positions = write_set(entry_id, ensemble_size=self.metadata.ensemble_size,
                              write_quorum_size=self.metadata.write_quorum_size)
        return [self.ensemble[p] for p in positions if p != self.fragment.position]

    def _read(self, entry_id: int, sources: list[str], now_ns: int) -> None:
        if not sources:
            self._fail(NoSuchEntry(f"ledger {self.metadata.ledger_id} entry {entry_id}: no surviving replica "
                                   f"of {self.fragment.bookie}'s fragment has it"), now_ns)
            return
        source, rest = sources[0], sources[1:]
        ledger_id = self.metadata.ledger_id

        def on_response(response, at_ns: int) -> None:
            if self._failed:
                return
            if response is None or response.code != Code.OK or not self._is_intact(response.body, entry_id):
                self._read(entry_id, rest, at_ns)          # the next replica
                return
            self._write(entry_id, response.body, at_ns)

        self.ctx.send_request(source, lambda rid: ReadRequest(request_id=rid, ledger_id=ledger_id, entry_id=entry_id),
                              on_response, timeout_ns=self.ctx.config.read_entry_timeout_ns, now_ns=now_ns)

    def _is_intact(self, body: bytes, entry_id: int) -> bool:
        if self._digester is None:
            return True
        try:
            self._digester.unpack_entry(body, expected_entry_id=entry_id)
            return True
        except DigestMismatch:
            return False

    def _write(self, entry_id: int, body: bytes, now_ns: int) -> None:
        metadata = self.metadata

        def on_response(response, at_ns: int) -> None:
            if self._failed:
                return
            if response is None or response.code != Code.OK:
                code = Code.TIMEOUT if response is None else Code(response.code)
                self._fail(exception_for(code, f"ledger {metadata.ledger_id} entry {entry_id}: copy to "
                                               f"{self.target} failed ({code.name})"), at_ns)
                return
            self._in_flight -= 1
            self._copied_count += 1
            self._fill(at_ns)

        self.ctx.send_request(
            self.target, lambda rid: AddRequest(request_id=rid, ledger_id=metadata.ledger_id, entry_id=entry_id,
                                                master_key=metadata.master_key, body=body, is_recovery=True),
            on_response, timeout_ns=self.ctx.config.add_entry_timeout_ns, now_ns=now_ns)

    def _swap_in(self, now_ns: int) -> None:
        fragment, target = self.fragment, self.target

        def transform(current: LedgerMetadata) -> LedgerMetadata | None:
            ensembles = dict(current.ensembles)
            bookies = ensembles.get(fragment.ensemble_start)
            if bookies is None or bookies[fragment.position] != fragment.bookie:
                raise IllegalOperation(f"ledger {current.ledger_id}: the ensemble at entry {fragment.ensemble_start} "
                                       f"changed while its fragment was copied; nothing swapped")
            replaced = bookies[:fragment.position] + (target,) + bookies[fragment.position + 1:]
            return dataclasses.replace(current, ensembles=tuple(
                (start, replaced if start == fragment.ensemble_start else members)
                for start, members in current.ensembles))

        update_ledger_metadata(self.ctx, self.metadata, transform, self._on_swapped, now_ns=now_ns)

    def _on_swapped(self, metadata: LedgerMetadata | None, error: BKException | None, now_ns: int) -> None:
        self.on_done(metadata, error, now_ns)

    def _fail(self, error: BKException, now_ns: int) -> None:
        if not self._failed:
            self._failed = True
            self._finish(error, now_ns)

    def _finish(self, error: BKException, now_ns: int) -> None:
        self.on_done(None, error, now_ns)
