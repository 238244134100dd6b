"""LedgerReader: reads of an opened ledger, its LAC, and tailing with long polls.

A reader never returns an entry past what it knows is confirmed: the LAC it has learnt (from
metadata when the ledger is closed, else from LAC reads and long polls), unless the caller
explicitly asks for unconfirmed entries. Its LAC only moves forward.
"""

from __future__ import annotations

from itertools import chain

from bkcore.client.context import ClientContext
from bkcore.client.metadata_update import read_ledger_metadata
from bkcore.client.reads import BatchRead, EntryRead, LacRead, _replicas, fragment_end
from bkcore.digest import Digester
from bkcore.errors import Code, DigestMismatch, IllegalOperation, exception_for
from bkcore.ledger.metadata import LedgerMetadata
from bkcore.wire import ReadRequest

READ_RANGE_COUNT_MAX = 10_000


class LedgerReader:
    def __init__(self, *, ctx: ClientContext, metadata: LedgerMetadata, password: bytes,
                 last_add_confirmed: int) -> None:
        self.ctx = ctx
        self.metadata = metadata
        self.digester = Digester(ledger_id=metadata.ledger_id, digest_type=metadata.digest_type,
                                 password=password)
        self.last_add_confirmed = last_add_confirmed
        # (entry id, payload) of the entry the last long poll brought back, checked: a tailing
        # reader takes it (take_polled_entry) rather than reading it again.
        self._polled: tuple[int, bytes] | None = None

    @property
    def ledger_id(self) -> int:
        return self.metadata.ledger_id

    @property
    def is_closed(self) -> bool:
        return self.metadata.is_closed

    def _learn_lac(self, lac: int) -> None:
        if lac > self.last_add_confirmed:
            self.last_add_confirmed = lac

    def read(self, op_id: int, first_entry_id: int, last_entry_id: int, *, now_ns: int,
             is_unconfirmed_allowed: bool = False) -> None:
        """Completed result: list of payloads, first..last inclusive, in order."""
        limit = self.last_add_confirmed
        if self.metadata.is_closed:
            limit = self.metadata.last_entry_id
        elif is_unconfirmed_allowed:
            limit = last_entry_id
        if not 0 <= first_entry_id <= last_entry_id or last_entry_id > limit \
                or last_entry_id - first_entry_id >= READ_RANGE_COUNT_MAX:
            self.ctx.complete(op_id, error=IllegalOperation(
                f"ledger {self.ledger_id}: cannot read {first_entry_id}..{last_entry_id}; readable "
                f"entries are 0..{limit}, at most {READ_RANGE_COUNT_MAX} per read"))
            return
        ctx, metadata, digester = self.ctx, self.metadata, self.digester
        if ctx.config.read_batch_count_max > 0 and metadata.ensemble_size == metadata.write_quorum_size:
            ranges = self._batch_ranges(first_entry_id, last_entry_id)

            def make_read(first: int, on_done) -> BatchRead:
                return BatchRead(ctx=ctx, metadata=metadata, digester=digester, first_entry_id=first,
                                 last_entry_id=ranges[first], on_done=on_done)
            starts = list(ranges)
        else:
            # One request per entry (the only way to read a striped ledger).
            def make_read(entry_id: int, on_done) -> EntryRead:
                return EntryRead(ctx=ctx, metadata=metadata, digester=digester, entry_id=entry_id,
                                 on_done=lambda entry, error, at_ns: on_done(
                                     None if entry is None else [entry.payload], error, at_ns))
            starts = list(range(first_entry_id, last_entry_id + 1))
        self._gather(op_id, starts, make_read, last_entry_id - first_entry_id + 1, now_ns)

    def _batch_ranges(self, first_entry_id: int, last_entry_id: int) -> dict[int, int]:
        """first -> last of batch reads of up to read_batch_count_max entries covering the range,
        none across fragments (each fragment has its own bookies)."""
        count_max = self.ctx.config.read_batch_count_max
        ranges: dict[int, int] = {}
        first = first_entry_id
        while first <= last_entry_id:
            last = min(last_entry_id, first + count_max - 1)
            end = fragment_end(self.metadata, first)
            if end is not None:
                last = min(last, end)
            ranges[first] = last
            first = last + 1
        return ranges

    def _gather(self, op_id: int, starts: list[int], make_read, count: int, now_ns: int) -> None:
        """Run one read per start, all at once (make_read(start, on_done) builds it; on_done
        gets its payloads, or an error): the operation completes with every payload in order,
        or with the first error, which stops the others."""
        results: dict[int, list[bytes]] = {}
        reads: list = []
        state = {"failed": False, "count": 0}

        def on_part(start: int, payloads, error, at_ns: int) -> None:
            if state["failed"]:
                return
            if error is not None:
                state["failed"] = True
                for other in reads:
                    other.cancel()
                self.ctx.complete(op_id, error=error)
                return
            results[start] = payloads
            state["count"] += len(payloads)
            if state["count"] == count:
                self.ctx.complete(op_id, result=list(chain.from_iterable(map(results.__getitem__, starts))))

        for start in starts:
            reads.append(make_read(start, lambda payloads, error, at_ns, start=start: on_part(start, payloads, error,
                                                                                            at_ns)))
        for read in reads:
            if not state["failed"]:
                read.start(now_ns)

    def read_lac(self, op_id: int, *, now_ns: int) -> None:
        """Ask the ensemble for the LAC. Completed result: the reader's LAC afterwards."""
        if self.metadata.is_closed:
            self.ctx.complete(op_id, result=self.metadata.last_entry_id)
            return

        def on_done(lac, error, at_ns: int) -> None:
            if error is None:
                self._learn_lac(lac)
            self.ctx.complete(op_id, result=self.last_add_confirmed if error is None else None, error=error)

        LacRead(ctx=self.ctx, metadata=self.metadata, digester=self.digester, on_done=on_done).start(now_ns)

    def long_poll_lac(self, op_id: int, *, now_ns: int, timeout_ns: int | None = None) -> None:
        """Wait at a bookie until the LAC passes the reader's, or the wait times out.
        Completed result: the reader's LAC afterwards (unchanged after a timeout)."""
        if self.metadata.is_closed:
            self.ctx.complete(op_id, result=self.metadata.last_entry_id)
            return
        wait_ns = self.ctx.config.long_poll_timeout_ns if timeout_ns is None else timeout_ns
        previous_lac = self.last_add_confirmed
        entry_id = previous_lac + 1
        replicas = _replicas(self.metadata, entry_id)
        bookie = replicas[self.ctx.rng.randrange(len(replicas))]
        ledger_id = self.ledger_id

        def on_response(response, at_ns: int) -> None:
            if response is None or response.code not in (Code.OK, Code.NO_SUCH_ENTRY, Code.NO_SUCH_LEDGER):
                code = Code.TIMEOUT if response is None else Code(response.code)
                self.ctx.complete(op_id, error=exception_for(code, f"ledger {ledger_id}: long poll on {bookie} failed"))
                return
            self._learn_lac(response.lac)
            if response.code == Code.OK:
                try:
                    entry = self.digester.unpack_entry(response.body, expected_entry_id=entry_id)
                except DigestMismatch:
                    pass  # a bad copy only means we learn nothing from it
                else:
                    self._learn_lac(entry.lac)
                    self._polled = (entry_id, entry.payload)
            self.ctx.complete(op_id, result=self.last_add_confirmed)

        self.ctx.send_request(
            bookie, lambda rid: ReadRequest(request_id=rid, ledger_id=ledger_id, entry_id=entry_id,
                                            previous_lac=previous_lac, long_poll_timeout_ns=wait_ns),
            on_response, timeout_ns=wait_ns + self.ctx.config.read_entry_timeout_ns, now_ns=now_ns)

    def take_polled_entry(self, entry_id: int) -> bytes | None:
        """The payload of `entry_id` if the last long poll brought it back and it is confirmed
        now (a long poll that timed out may bring an entry past the LAC); then forgotten."""
        polled, self._polled = self._polled, None
        if polled is not None and polled[0] == entry_id and entry_id <= self.last_add_confirmed:
            return polled[1]
        return None

    def refresh_metadata(self, op_id: int, *, now_ns: int) -> None:
        """Re-read the ledger's metadata (to learn that it was closed). Completed result: it."""
        def on_done(metadata, error, at_ns: int) -> None:
            if error is None:
                self.metadata = metadata
                if metadata.is_closed:
                    self._learn_lac(metadata.last_entry_id)
            self.ctx.complete(op_id, result=metadata, error=error)

        read_ledger_metadata(self.ctx, self.ledger_id, on_done, now_ns=now_ns)
