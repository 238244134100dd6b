"""Read operations shared by readers and recovery.

- EntryRead: one entry from the replicas of its write set, one at a time; the next replica is
  asked at once after an error and speculatively after speculative_read_timeout_ns without an
  answer. The first answer whose digest checks out wins. Only when every replica said "no such
  entry" is the result NoSuchEntry; an I/O error, a timeout or a digest mismatch is never that.
- BatchRead: consecutive entries of one fragment of a ledger whose bookies each hold every
  entry (E == Qw), a bookie at a time, in as few round trips as the bookie allows. Failures move
  to the next replica as EntryRead's do, and fail the read with the error EntryRead would give
  for the first entry still missing.
- RecoveryEntryRead: one entry from every replica of its write set at once, with fencing. Found
  when any replica returns a good copy; missing only when Qw - Qa + 1 replicas say "no such entry".
- LacRead: the LAC from the last ensemble. Non-fencing reads take max(explicit LAC, LAC of the
  last entry held); fencing reads (recovery) read the last entry held and fence the ledger.
  Done when the answers cover the ensemble (every write set has fewer than Qa silent bookies).
"""

from __future__ import annotations

from typing import Callable

from bkcore.client.context import ClientContext
from bkcore.digest import Digester, UnpackedEntry
from bkcore.errors import (
    BKException, BookieIOError, Code, DigestMismatch, NoSuchEntry, Unauthorized, code_of, exception_for,
)
from bkcore.ledger.metadata import LedgerMetadata
from bkcore.ledger.schedule import is_covered, missing_threshold, write_set
from bkcore.wire import INVALID_ENTRY_ID, LAST_ENTRY_ID, ReadBatchRequest, ReadLacRequest, ReadRequest

EntryCallback = Callable[[UnpackedEntry | None, BKException | None, int], None]
PayloadsCallback = Callable[[list | None, BKException | None, int], None]
_NO_SUCH = (Code.NO_SUCH_ENTRY, Code.NO_SUCH_LEDGER)
# Looked up once: reading an enum member off its class is slow in CPython 3.11, and every answer
# to a read is checked against it.
_OK = Code.OK


def _replicas(metadata: LedgerMetadata, entry_id: int) -> list[str]:
    ensemble = metadata.ensemble_for(entry_id)
    return [ensemble[p] for p in write_set(entry_id, ensemble_size=metadata.ensemble_size,
                                             write_quorum_size=metadata.write_quorum_size)]


def _verified(digester: Digester, response, entry_id: int) -> tuple[UnpackedEntry | None, Code]:
    """(entry, OK) for a good answer, else (None, the code that describes the failure)."""
    if response is None:
        return None, Code.TIMEOUT
    if response.code != _OK:
        return None, code_of(response.code)
    try:
        return digester.unpack_entry(response.body, expected_entry_id=entry_id), _OK
    except DigestMismatch:
        return None, Code.DIGEST_MISMATCH


def _read_error(ledger_id: int, entry_id: int, codes: list[Code]) -> BKException:
    if codes and all(code in _NO_SUCH for code in codes):
        error = NoSuchEntry(f"ledger {ledger_id} entry {entry_id}: no replica has it")
        error.entry_id = entry_id
        return error
    worst = next(code for code in codes if code not in _NO_SUCH)
    return exception_for(worst, f"ledger {ledger_id} entry {entry_id}: read failed on every replica "
                                f"({', '.join(code.name for code in codes)})")


class _OneReplicaAtATime:
    """A read that asks one replica at a time (the next after a failure or a speculative
    timeout): stopping it forgets its outstanding requests and its timer."""

    __slots__ = ()

    def cancel(self) -> None:
        """Stop without reporting (a sibling read of the same operation failed)."""
        if self.is_done:
            return
        self.is_done = True
        if self.timer_key is not None:
            self.ctx.cancel_timer(self.timer_key)
        if self.outstanding:        # (after a first answer, usually nothing is)
            for request_id in self.outstanding:
                self.ctx.forget_request(request_id)
            self.outstanding.clear()

    def _finish(self, result, error: BKException | None, now_ns: int) -> None:
        self.cancel()
        self.on_done(result, error, now_ns)


class EntryRead(_OneReplicaAtATime):
    __slots__ = ("ctx", "metadata", "digester", "entry_id", "on_done", "replicas", "next_index",
                 "outstanding", "codes", "is_done", "timer_key")

    def __init__(self, *, ctx: ClientContext, metadata: LedgerMetadata, digester: Digester,
                 entry_id: int, on_done: EntryCallback) -> None:
        self.ctx = ctx
        self.metadata = metadata
        self.digester = digester
        self.entry_id = entry_id
        self.on_done = on_done
        self.replicas = _replicas(metadata, entry_id)
        self.next_index = 0
        self.outstanding: dict[int, str] = {}    # request id -> bookie
        self.codes: list[Code] = []
        self.is_done = False
        self.timer_key: int | None = None

    def start(self, now_ns: int) -> None:
        self._ask_next(now_ns)

    def _ask_next(self, now_ns: int) -> None:
        bookie = self.replicas[self.next_index]
        self.next_index += 1
        ledger_id, entry_id = self.metadata.ledger_id, self.entry_id
        ctx = self.ctx
        request_id = ctx.send_request(
            bookie, lambda rid: ReadRequest(rid, ledger_id, entry_id),
            lambda response, at_ns: self._on_response(request_id, response, at_ns),
            timeout_ns=ctx.config.read_entry_timeout_ns, now_ns=now_ns)
        self.outstanding[request_id] = bookie
        if self.next_index < len(self.replicas):
            if self.timer_key is not None:
                ctx.cancel_timer(self.timer_key)
            self.timer_key = ctx.call_at(now_ns + ctx.config.speculative_read_timeout_ns, self._on_speculative_timeout)

    def _on_speculative_timeout(self, now_ns: int) -> None:
        self.timer_key = None
        if not self.is_done and self.next_index < len(self.replicas):
            self._ask_next(now_ns)

    def _on_response(self, request_id: int, response, now_ns: int) -> None:
        self.outstanding.pop(request_id, None)
        if self.is_done:
            return
        entry, code = _verified(self.digester, response, self.entry_id)
        if entry is not None:
            self._finish(entry, None, now_ns)
            return
        self.codes.append(code)
        if self.next_index < len(self.replicas):
            self._ask_next(now_ns)
        elif not self.outstanding:
            self._finish(None, _read_error(self.metadata.ledger_id, self.entry_id, self.codes), now_ns)



def fragment_end(metadata: LedgerMetadata, entry_id: int) -> int | None:
    """The last entry id of the fragment holding `entry_id` (the entry before the next
    ensemble's first); None when that fragment is the last one."""
    for first_entry_id, _ in metadata.ensembles:
        if first_entry_id > entry_id:
            return first_entry_id - 1
    return None


class BatchRead(_OneReplicaAtATime):
    """Entries first..last of one fragment, from one replica at a time.

    A bookie may send fewer entries than asked (its size limit, or an entry it lacks): the rest
    is asked of the same bookie, from the first entry still missing. An answer that fails
    (error code, bad digest, timeout) sends the request to the next replica at once, and no
    answer within speculative_read_timeout_ns asks the next replica as well; the first good
    answer for the entries still missing wins. Once every replica has failed for the same first
    entry, the read fails with the error EntryRead gives for that entry.

    on_done(payloads, None, now) with the payloads in order, or (None, error, now)."""

    __slots__ = ("ctx", "metadata", "digester", "on_done", "replicas", "next_entry_id", "last_entry_id",
                 "payloads", "replica_index", "asked_count", "outstanding", "codes", "is_done", "timer_key")

    def __init__(self, *, ctx: ClientContext, metadata: LedgerMetadata, digester: Digester,
                 first_entry_id: int, last_entry_id: int, on_done: PayloadsCallback) -> None:
        assert metadata.ensemble_size == metadata.write_quorum_size, "batch reads need E == Qw"
        assert first_entry_id <= last_entry_id
        self.ctx = ctx
        self.metadata = metadata
        self.digester = digester
        self.on_done = on_done
        # Every bookie of the fragment holds every entry; starting where the first entry's write
        # set starts spreads consecutive batches over the ensemble.
        self.replicas = _replicas(metadata, first_entry_id)
        self.next_entry_id = first_entry_id
        self.last_entry_id = last_entry_id
        self.payloads: list[bytes] = []
        self.replica_index = 0           # of the replica asked next
        self.asked_count = 0             # replicas asked for the entries from next_entry_id
        self.outstanding: dict[int, tuple[int, int]] = {}    # request id -> (first entry asked, replica index)
        self.codes: list[Code] = []      # failures for the entries from next_entry_id
        self.is_done = False
        self.timer_key: int | None = None

    def start(self, now_ns: int) -> None:
        self._ask(now_ns)

    def _ask(self, now_ns: int) -> None:
        ctx = self.ctx
        replica_index = self.replica_index % len(self.replicas)
        self.replica_index = replica_index + 1
        self.asked_count += 1
        ledger_id, first_entry_id = self.metadata.ledger_id, self.next_entry_id
        count = min(self.last_entry_id - first_entry_id + 1, ctx.config.read_batch_count_max)
        size_max = ctx.config.read_batch_size_max
        request_id = ctx.send_request(
            self.replicas[replica_index],
            lambda rid: ReadBatchRequest(rid, ledger_id, first_entry_id, count, size_max),
            lambda response, at_ns: self._on_response(request_id, response, at_ns),
            timeout_ns=ctx.config.read_entry_timeout_ns, now_ns=now_ns)
        self.outstanding[request_id] = (first_entry_id, replica_index)
        if self.timer_key is not None:
            ctx.cancel_timer(self.timer_key)
            self.timer_key = None
        if self.asked_count < len(self.replicas):
            self.timer_key = ctx.call_at(now_ns + ctx.config.speculative_read_timeout_ns, self._on_speculative_timeout)

    def _on_speculative_timeout(self, now_ns: int) -> None:
        self.timer_key = None
        if not self.is_done and self.asked_count < len(self.replicas):
            self._ask(now_ns)

    def _on_response(self, request_id: int, response, now_ns: int) -> None:
        asked = self.outstanding.pop(request_id, None)
        if self.is_done or asked is None or asked[0] != self.next_entry_id:
            return          # an answer about entries the read has already moved past
        good, code = self._verified(response)
        if good:
            self._advance(good, now_ns)
            if self.is_done:
                return
            self.replica_index = asked[1]       # ask the same bookie for the rest...
            if code is _OK:
                self._ask(now_ns)
                return
            self.replica_index += 1             # ...unless it sent a bad copy of the next entry
            self.asked_count = 1
        self.codes.append(code)
        if self.asked_count < len(self.replicas):
            self._ask(now_ns)
        elif not self.outstanding:
            self._finish(None, _read_error(self.metadata.ledger_id, self.next_entry_id, self.codes), now_ns)

    def _verified(self, response) -> tuple[list[bytes], Code]:
        """The payloads of the good entries an answer starts with, and OK if every entry it
        carried was good (else the code of the first failure)."""
        if response is None:
            return [], Code.TIMEOUT
        if response.code != _OK:
            return [], code_of(response.code)
        bodies = response.bodies
        if not bodies:
            return [], Code.IO_ERROR            # OK with nothing: a broken bookie
        payloads, error = self.digester.unpack_payloads(bodies[:self.last_entry_id - self.next_entry_id + 1],
                                                        self.next_entry_id)
        return payloads, _OK if error is None else Code.DIGEST_MISMATCH

    def _advance(self, payloads: list[bytes], now_ns: int) -> None:
        self.payloads.extend(payloads)
        self.next_entry_id += len(payloads)
        self.codes = []
        self.asked_count = 0
        for request_id in self.outstanding:     # asked about entries it has now
            self.ctx.forget_request(request_id)
        self.outstanding.clear()
        if self.next_entry_id > self.last_entry_id:
            self._finish(self.payloads, None, now_ns)


class _FanOutRead:
    """A read sent to several bookies at once: finishing stops waiting for all of them."""

    __slots__ = ()

    def _finish(self, result, error: BKException | None, now_ns: int) -> None:
        self.is_done = True
        for request_id in self.request_ids:
            self.ctx.forget_request(request_id)
        self.on_done(result, error, now_ns)


class RecoveryEntryRead(_FanOutRead):
    """on_done(entry, None) when found, (None, None) when proven missing, (None, error) otherwise."""

    __slots__ = ("ctx", "metadata", "digester", "entry_id", "on_done", "master_key",
                 "request_ids", "codes", "is_done")

    def __init__(self, *, ctx: ClientContext, metadata: LedgerMetadata, digester: Digester,
                 entry_id: int, master_key: bytes, on_done: EntryCallback) -> None:
        self.ctx = ctx
        self.metadata = metadata
        self.digester = digester
        self.entry_id = entry_id
        self.master_key = master_key
        self.on_done = on_done
        self.request_ids: list[int] = []
        self.codes: list[Code] = []
        self.is_done = False

    def start(self, now_ns: int) -> None:
        ledger_id, entry_id, key = self.metadata.ledger_id, self.entry_id, self.master_key
        for bookie in _replicas(self.metadata, entry_id):
            self.request_ids.append(self.ctx.send_request(
                bookie, lambda rid: ReadRequest(request_id=rid, ledger_id=ledger_id, entry_id=entry_id,
                                                master_key=key, is_fencing=True),
                self._on_response, timeout_ns=self.ctx.config.read_entry_timeout_ns, now_ns=now_ns))

    def _on_response(self, response, now_ns: int) -> None:
        if self.is_done:
            return
        entry, code = _verified(self.digester, response, self.entry_id)
        if code == Code.UNAUTHORIZED:
            self._finish(None, Unauthorized(f"ledger {self.metadata.ledger_id}: a bookie refused the master key"), now_ns)
            return
        if entry is not None:
            self._finish(entry, None, now_ns)
            return
        self.codes.append(code)
        missing_count = sum(1 for c in self.codes if c in _NO_SUCH)
        if missing_count >= missing_threshold(write_quorum_size=self.metadata.write_quorum_size,
                                              ack_quorum_size=self.metadata.ack_quorum_size):
            self._finish(None, None, now_ns)
        elif len(self.codes) == len(self.request_ids):
            self._finish(None, _read_error(self.metadata.ledger_id, self.entry_id, self.codes), now_ns)


class LacRead(_FanOutRead):
    """on_done(lac, None, now) or (None, error, now). With `is_fencing`, every bookie asked is
    fenced; with `is_forced`, answers from every reachable bookie suffice even without coverage."""

    __slots__ = ("ctx", "metadata", "digester", "on_done", "is_fencing", "is_forced", "master_key",
                 "answered", "failed", "request_ids", "lac", "is_done")

    def __init__(self, *, ctx: ClientContext, metadata: LedgerMetadata, digester: Digester,
                 on_done: Callable[[int | None, BKException | None, int], None],
                 is_fencing: bool = False, master_key: bytes = b"", is_forced: bool = False) -> None:
        self.ctx = ctx
        self.metadata = metadata
        self.digester = digester
        self.on_done = on_done
        self.is_fencing = is_fencing
        self.is_forced = is_forced
        self.master_key = master_key
        self.answered: set[int] = set()
        self.failed: dict[int, Code] = {}
        self.request_ids: list[int] = []
        self.lac = INVALID_ENTRY_ID
        self.is_done = False

    def start(self, now_ns: int) -> None:
        ledger_id, key = self.metadata.ledger_id, self.master_key
        for position, bookie in enumerate(self.metadata.last_ensemble):
            if self.is_fencing:
                def build(rid: int) -> ReadRequest:
                    return ReadRequest(request_id=rid, ledger_id=ledger_id, entry_id=LAST_ENTRY_ID,
                                       master_key=key, is_fencing=True)
            else:
                def build(rid: int) -> ReadLacRequest:
                    return ReadLacRequest(request_id=rid, ledger_id=ledger_id)
            self.request_ids.append(self.ctx.send_request(
                bookie, build, lambda response, at_ns, p=position: self._on_response(p, response, at_ns),
                timeout_ns=self.ctx.config.read_entry_timeout_ns, now_ns=now_ns))

    def _lac_of(self, response) -> int:
        """The LAC an OK answer vouches for; raises DigestMismatch for a bad copy."""
        if self.is_fencing:
            return self.digester.unpack_entry(response.body).lac
        lac = INVALID_ENTRY_ID
        if response.lac_body:
            lac = self.digester.unpack_lac(response.lac_body)
        if response.last_body:
            lac = max(lac, self.digester.unpack_entry(response.last_body).lac)
        return lac

    def _on_response(self, position: int, response, now_ns: int) -> None:
        if self.is_done:
            return
        code = Code.TIMEOUT if response is None else code_of(response.code)
        if code == Code.OK:
            try:
                self.lac = max(self.lac, self._lac_of(response))
                self.answered.add(position)
            except DigestMismatch:
                self.failed[position] = Code.DIGEST_MISMATCH
        elif code in _NO_SUCH:
            self.answered.add(position)
        elif code == Code.UNAUTHORIZED:
            self._finish(None, Unauthorized(f"ledger {self.metadata.ledger_id}: a bookie refused the master key"), now_ns)
            return
        else:
            self.failed[position] = code
        md = self.metadata
        if is_covered(self.answered, ensemble_size=md.ensemble_size, write_quorum_size=md.write_quorum_size,
                      ack_quorum_size=md.ack_quorum_size):
            self._finish(self.lac, None, now_ns)
        elif len(self.answered) + len(self.failed) == md.ensemble_size:
            if self.is_forced and self.answered:
                self._finish(self.lac, None, now_ns)
            else:
                codes = ", ".join(f"{md.last_ensemble[p]}: {c.name}" for p, c in sorted(self.failed.items()))
                self._finish(None, BookieIOError(f"ledger {md.ledger_id}: LAC answers do not cover the "
                                                 f"ensemble ({codes})"), now_ns)

