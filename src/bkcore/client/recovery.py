"""LedgerRecovery: open a ledger whose writer may be gone, fence it, and close it correctly.

Steps (BookKeeper's LedgerRecoveryOp, with every read fencing):
1. read metadata; a closed ledger needs nothing; a wrong password is Unauthorized;
2. CAS the state to IN_RECOVERY, so the old writer's next metadata change fails;
3. fenced LAC read of the last ensemble until the answers cover it: from then on the old writer
   cannot get Qa acks for anything new. Entries before the last ensemble started are known
   acknowledged (ensembles change at LAC + 1), so the LAC is at least that start - 1;
4. read the entry at the LAC (for the ledger length), then read forward with fencing reads,
   a window at a time, until an entry is proven missing (Qw - Qa + 1 "no such entry");
5. rewrite every entry found past the LAC, byte for byte, with recovery adds (a recovery writer,
   which may itself change ensembles), then CAS IN_RECOVERY -> CLOSED at the last entry.
Concurrent recoveries converge: whoever closes first wins and the others adopt its metadata.
A recovery that loses a race in the middle (ensembles changed under it) starts over, a bounded
number of times. `is_forced` proceeds without full coverage (bookies known lost for good).
"""

from __future__ import annotations

from typing import Callable

from bkcore.client.context import ClientContext
from bkcore.client.metadata_update import read_ledger_metadata, update_ledger_metadata
from bkcore.client.reads import LacRead, RecoveryEntryRead
from bkcore.client.writer import LedgerWriter, WriterState
from bkcore.digest import Digester, master_key
from bkcore.errors import BKException, MetadataError, Unauthorized
from bkcore.ledger.metadata import LedgerMetadata, LedgerState, password_hash
from bkcore.wire import INVALID_ENTRY_ID

RECOVERY_ATTEMPT_COUNT_MAX = 10
_ADD_OP = 0
_CLOSE_OP = 1

DoneCallback = Callable[[LedgerMetadata | None, BKException | None, int], None]


class LedgerRecovery:
    def __init__(self, *, ctx: ClientContext, ledger_id: int, password: bytes, is_forced: bool,
                 on_done: DoneCallback) -> None:
        self.ctx = ctx
        self.ledger_id = ledger_id
        self.password = password
        self.master_key = master_key(password)
        self.is_forced = is_forced
        self.on_done = on_done
        self.attempt_count = 0
        self.is_done = False
        self._reset()

    def _reset(self) -> None:
        self.metadata: LedgerMetadata | None = None
        self.digester: Digester | None = None
        self.writer: LedgerWriter | None = None
        self.next_read_entry_id = 0           # next entry to ask for
        self.next_add_entry_id = 0            # next entry to hand to the writer, in order
        self.found: dict[int, object] = {}    # entry id -> UnpackedEntry, or None when missing
        self.reads_in_flight = 0
        self.is_reading_stopped = False
        self.adds_in_flight = 0
        self.is_closing = False

    def start(self, now_ns: int) -> None:
        self.attempt_count += 1
        read_ledger_metadata(self.ctx, self.ledger_id, self._on_metadata, now_ns=now_ns)

    # -- phases ---------------------------------------------------------------------------

    def _on_metadata(self, metadata: LedgerMetadata | None, error: BKException | None, now_ns: int) -> None:
        if error is not None:
            self._finish(None, error, now_ns)
        elif metadata.password_hash != password_hash(self.password):
            self._finish(None, Unauthorized(f"ledger {self.ledger_id}: wrong password"), now_ns)
        elif metadata.is_closed:
            self._finish(metadata, None, now_ns)
        else:
            def mark(current: LedgerMetadata) -> LedgerMetadata | None:
                return None if current.state is not LedgerState.OPEN else current.in_recovery()

            update_ledger_metadata(self.ctx, metadata, mark, self._on_marked, now_ns=now_ns)

    def _on_marked(self, metadata: LedgerMetadata | None, error: BKException | None, now_ns: int) -> None:
        if error is not None:
            self._finish(None, error, now_ns)
            return
        if metadata.is_closed:
            self._finish(metadata, None, now_ns)
            return
        self.metadata = metadata
        self.digester = Digester(ledger_id=self.ledger_id, digest_type=metadata.digest_type,
                                 password=self.password)
        LacRead(ctx=self.ctx, metadata=metadata, digester=self.digester, on_done=self._on_fenced,
                is_fencing=True, master_key=self.master_key, is_forced=self.is_forced).start(now_ns)

    def _on_fenced(self, lac: int | None, error: BKException | None, now_ns: int) -> None:
        if error is not None:
            self._finish(None, error, now_ns)
            return
        lac = max(lac, self.metadata.last_ensemble_start - 1)
        if lac == INVALID_ENTRY_ID:
            self._start_forward(lac, 0, now_ns)
            return

        def on_lac_entry(entry, read_error, at_ns: int) -> None:
            if read_error is not None or entry is None:
                self._finish(None, read_error or MetadataError(
                    f"ledger {self.ledger_id}: confirmed entry {lac} is missing from its bookies"), at_ns)
            else:
                self._start_forward(lac, entry.length, at_ns)

        RecoveryEntryRead(ctx=self.ctx, metadata=self.metadata, digester=self.digester, entry_id=lac,
                          master_key=self.master_key, on_done=on_lac_entry).start(now_ns)

    def _start_forward(self, lac: int, length: int, now_ns: int) -> None:
        attempt = self.attempt_count
        self.writer = LedgerWriter(
            ctx=self.ctx, metadata=self.metadata, password=self.password, is_recovery=True,
            last_add_confirmed=lac, length=length,
            complete=lambda op_id, result=None, error=None: self._on_writer_op(attempt, op_id, result, error))
        self.next_read_entry_id = lac + 1
        self.next_add_entry_id = lac + 1
        self._fill_read_window(now_ns)

    def _fill_read_window(self, now_ns: int) -> None:
        attempt = self.attempt_count
        while not self.is_reading_stopped and self.reads_in_flight < self.ctx.config.recovery_read_batch_count:
            entry_id = self.next_read_entry_id
            self.next_read_entry_id += 1
            self.reads_in_flight += 1
            RecoveryEntryRead(
                ctx=self.ctx, metadata=self.metadata, digester=self.digester, entry_id=entry_id,
                master_key=self.master_key,
                on_done=lambda entry, error, at_ns, e=entry_id: self._on_read(attempt, e, entry, error, at_ns)
            ).start(now_ns)

    def _on_read(self, attempt: int, entry_id: int, entry, error: BKException | None, now_ns: int) -> None:
        if self.is_done or attempt != self.attempt_count:
            return
        self.reads_in_flight -= 1
        if error is not None and not self.is_forced:
            self._finish(None, error, now_ns)
            return
        self.found[entry_id] = entry   # None: missing (or unreadable, when forced)
        while self.next_add_entry_id in self.found and not self.is_reading_stopped:
            found = self.found.pop(self.next_add_entry_id)
            if found is None:
                self.is_reading_stopped = True
                self.found.clear()
                break
            self.adds_in_flight += 1
            body = self.digester.pack_entry(entry_id=found.entry_id, lac=found.lac, length=found.length,
                                            payload=found.payload)
            self.writer.add_recovered(_ADD_OP, entry_id=found.entry_id, body=body, length=found.length,
                                      now_ns=now_ns)
            self.next_add_entry_id += 1
        self._fill_read_window(now_ns)
        self._maybe_close(now_ns)

    def _on_writer_op(self, attempt: int, op_id: int, result: object, error: BKException | None) -> None:
        """Completions of this attempt's recovery writer: recovery adds and the close."""
        if self.is_done or attempt != self.attempt_count:
            return
        now_ns = self.ctx.now_ns
        if op_id == _CLOSE_OP:
            if error is None:
                self._finish(result, None, now_ns)
            else:
                self._look_again(error, now_ns)
            return
        self.adds_in_flight -= 1
        if error is not None:
            self._look_again(error, now_ns)
        else:
            self._maybe_close(now_ns)

    def _maybe_close(self, now_ns: int) -> None:
        if self.is_reading_stopped and self.adds_in_flight == 0 and not self.is_closing \
                and self.writer.state is WriterState.OPEN:
            self.is_closing = True
            self.writer.close(_CLOSE_OP, now_ns=now_ns)

    def _look_again(self, error: BKException, now_ns: int) -> None:
        """Another recovery may have closed the ledger or changed its ensembles: re-read, adopt a
        closed ledger, or start over (a bounded number of times)."""
        self.attempt_count += 1   # everything still in flight from this attempt is now ignored
        attempt = self.attempt_count

        def on_fresh(metadata, read_error, at_ns: int) -> None:
            if self.is_done or attempt != self.attempt_count:
                return
            if read_error is not None:
                self._finish(None, read_error, at_ns)
            elif metadata.is_closed:
                self._finish(metadata, None, at_ns)
            elif self.attempt_count >= RECOVERY_ATTEMPT_COUNT_MAX:
                self._finish(None, error, at_ns)
            else:
                self._reset()
                self._on_metadata(metadata, None, at_ns)

        read_ledger_metadata(self.ctx, self.ledger_id, on_fresh, now_ns=now_ns)

    def _finish(self, metadata: LedgerMetadata | None, error: BKException | None, now_ns: int) -> None:
        if self.is_done:
            return
        self.is_done = True
        self.on_done(metadata, error, now_ns)
