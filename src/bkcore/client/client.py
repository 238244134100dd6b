"""Client: the application's door to ledgers. One per process (or simulated process).

Application calls start operations and name them with an `op_id`; every operation ends with
exactly one `Completed(op_id, result, error)` effect. Handles returned by create/open
(LedgerWriter, LedgerReader) are sub-machines of this client and are used directly:
`writer.add(op_id, payload, now_ns=...)`, `reader.read(op_id, first, last, now_ns=...)`.

Inputs from the driver: receive() for bookie responses, on_metadata_result() for metastore
answers, on_timer() when next_deadline_ns() is due, pull_sends() for bookies a HeldSends
effect named, once their connections can write. Output: take_effects().
"""

from __future__ import annotations

from dataclasses import dataclass

from bkcore.client.config import ClientConfig
from bkcore.client.context import ClientContext
from bkcore.client.metadata_update import read_ledger_metadata
from bkcore.client.reader import LedgerReader
from bkcore.client.reads import LacRead
from bkcore.client.recovery import LedgerRecovery
from bkcore.client.rereplication import FragmentReplication
from bkcore.client.writer import LedgerWriter
from bkcore.digest import Digester, DigestType, master_key
from bkcore.errors import (
    BKException, IllegalOperation, MetadataError, NoSuchLedger, NotEnoughBookies, Unauthorized,
)
from bkcore.ledger.layout import LedgerLayout
from bkcore.ledger.metadata import LedgerMetadata, password_hash
from bkcore.metaops import Children, Create, Delete, Get, MetaCode
from bkcore.rng import Rng


@dataclass(frozen=True, slots=True)
class LedgerSpec:
    ensemble_size: int = 3
    write_quorum_size: int = 3
    ack_quorum_size: int = 2
    digest_type: DigestType = DigestType.CRC32C
    is_deferred_sync: bool = False
    custom_metadata: tuple[tuple[str, bytes], ...] = ()
    # Place the ledger on exactly these bookies (tools such as bookiesanity); () = random.
    bookies: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.ensemble_size >= self.write_quorum_size >= self.ack_quorum_size >= 1:
            raise ValueError(f"need ensemble >= write quorum >= ack quorum >= 1, got E={self.ensemble_size} "
                             f"Qw={self.write_quorum_size} Qa={self.ack_quorum_size}")
        if self.bookies and len(set(self.bookies)) != self.ensemble_size:
            raise ValueError(f"placement on {list(self.bookies)} needs {self.ensemble_size} distinct bookies")


class Client:
    def __init__(self, *, client_id: str, rng: Rng, config: ClientConfig = ClientConfig(),
                 layout: LedgerLayout = LedgerLayout()) -> None:
        self.ctx = ClientContext(client_id=client_id, config=config, rng=rng, layout=layout)
        # A driver asks these two after every input: bound straight to the context, they cost one
        # call instead of two (the methods below say the same and document them).
        self.take_effects = self.ctx.take_effects
        self.next_deadline_ns = self.ctx.next_deadline_ns

    # -- driver inputs --------------------------------------------------------------------

    def receive(self, message: object, *, source: str, now_ns: int) -> None:
        ctx = self.ctx
        ctx.now_ns = now_ns
        ctx.on_response(message, source, now_ns)

    def on_send_failed(self, message: object, *, destination: str, now_ns: int) -> None:
        """The driver could not deliver a request (connection refused or broken)."""
        self.ctx.now_ns = now_ns
        request_id = getattr(message, "request_id", None)
        if type(request_id) is int:
            self.ctx.on_send_failed(request_id, destination=destination, now_ns=now_ns)

    def on_connection_lost(self, destination: str, *, now_ns: int) -> None:
        """The driver's connection to a bookie broke: requests it carried will not be answered."""
        self.ctx.now_ns = now_ns
        self.ctx.on_connection_lost(destination, now_ns)

    def on_bookies_lost(self, bookie_ids, *, now_ns: int) -> None:
        """Bookies whose registration vanished: open writers using them change ensembles."""
        self.ctx.now_ns = now_ns
        for writer in list(self.ctx.open_writers.values()):
            for bookie in bookie_ids:
                writer.on_bookie_lost(bookie, now_ns)

    def on_metadata_result(self, token: int, result: object, *, now_ns: int) -> None:
        self.ctx.now_ns = now_ns
        self.ctx.on_metadata_result(token, result, now_ns)

    def on_timer(self, now_ns: int) -> None:
        self.ctx.now_ns = now_ns
        self.ctx.on_timer(now_ns)

    def pull_sends(self, destinations, *, now_ns: int) -> None:
        """The driver can write to these bookies (named in a HeldSends effect): the requests
        held for them leave now, as Sends (adds in one request per run)."""
        self.ctx.now_ns = now_ns
        self.ctx.pull_sends(destinations, now_ns)

    def take_effects(self) -> list:
        return self.ctx.take_effects()

    def next_deadline_ns(self) -> int | None:
        return self.ctx.next_deadline_ns()

    # -- operations -----------------------------------------------------------------------

    def create_ledger(self, op_id: int, *, password: bytes, spec: LedgerSpec = LedgerSpec(),
                      now_ns: int) -> None:
        """Completed result: a LedgerWriter for the new, open ledger."""
        self.ctx.now_ns = now_ns
        _CreateLedger(self.ctx, op_id, spec, password).start(now_ns)

    def open_ledger(self, op_id: int, ledger_id: int, *, password: bytes | None, is_recovery: bool = True,
                    is_forced: bool = False, now_ns: int) -> None:
        """Completed result: a LedgerReader. With recovery the ledger is fenced and closed first.
        password None: an administrator's open without the password (BookKeeperAdmin's
        openLedgerNoRecovery), for reading only, of a ledger whose digests need no password."""
        self.ctx.now_ns = now_ns
        ctx = self.ctx
        if password is None and is_recovery:
            ctx.complete(op_id, error=IllegalOperation(
                f"ledger {ledger_id}: recovery fences with the ledger's password; an open without it cannot recover"))
            return

        def reader_for(metadata: LedgerMetadata, lac: int) -> LedgerReader:
            return LedgerReader(ctx=ctx, metadata=metadata, password=password or b"", last_add_confirmed=lac)

        if is_recovery:
            def on_recovered(metadata, error, at_ns: int) -> None:
                ctx.complete(op_id, result=None if error else reader_for(metadata, metadata.last_entry_id), error=error)

            LedgerRecovery(ctx=ctx, ledger_id=ledger_id, password=password, is_forced=is_forced,
                           on_done=on_recovered).start(now_ns)
            return

        def on_metadata(metadata, error, at_ns: int) -> None:
            if error is None:
                error = _password_refusal(metadata, password)
            if error is not None:
                ctx.complete(op_id, error=error)
            elif metadata.is_closed:
                ctx.complete(op_id, result=reader_for(metadata, metadata.last_entry_id))
            else:
                digester = Digester(ledger_id=ledger_id, digest_type=metadata.digest_type, password=password or b"")
                LacRead(ctx=ctx, metadata=metadata, digester=digester,
                        on_done=lambda lac, lac_error, t: ctx.complete(
                            op_id, result=None if lac_error else reader_for(metadata, lac), error=lac_error)
                        ).start(at_ns)

        read_ledger_metadata(ctx, ledger_id, on_metadata, now_ns=now_ns)

    def replicate_fragment(self, op_id: int, metadata: LedgerMetadata, fragment, target: str, *,
                           now_ns: int) -> None:
        """Copy a lost bookie's fragment to `target` and swap it in (see rereplication.py).
        Completed result: the updated metadata."""
        self.ctx.now_ns = now_ns
        ctx = self.ctx
        FragmentReplication(ctx=ctx, metadata=metadata, fragment=fragment, target=target,
                            on_done=lambda updated, error, at_ns: ctx.complete(op_id, result=updated, error=error)
                            ).start(now_ns)

    def delete_ledger(self, op_id: int, ledger_id: int, *, now_ns: int) -> None:
        """Remove the ledger's metadata; bookies reclaim its entries in garbage collection."""
        self.ctx.now_ns = now_ns
        ctx = self.ctx
        path = ctx.layout.ledger_path(ledger_id)

        def on_result(result, at_ns: int, attempt_index: int = 0) -> None:
            if result.code is MetaCode.OK:
                ctx.complete(op_id, result=ledger_id)
            elif result.code is MetaCode.NO_NODE:
                # After a lost connection the first try may have deleted it already.
                error = None if attempt_index else NoSuchLedger(f"ledger {ledger_id} does not exist")
                ctx.complete(op_id, result=ledger_id if error is None else None, error=error)
            elif attempt_index + 1 < ctx.config.metadata_retry_count_max:
                ctx.retry_later(at_ns, lambda t: ctx.call_metadata(
                    Delete(path), lambda r, t2: on_result(r, t2, attempt_index + 1)))
            else:
                ctx.complete(op_id, error=MetadataError(f"ledger {ledger_id}: delete failed: {result.code.name}"))

        ctx.call_metadata(Delete(path), on_result)


def _password_refusal(metadata: LedgerMetadata, password: bytes | None) -> BKException | None:
    """Why `password` cannot open the ledger for reading, or None. None as the password is an
    administrator's open: it needs none where the digests need none (CRC32C); HMAC digests are
    keyed by the password, which the metadata does not hold (only a hash of it)."""
    if password is None:
        if metadata.digest_type is DigestType.CRC32C:
            return None
        return Unauthorized(f"ledger {metadata.ledger_id}: its {metadata.digest_type.value} digests are checked "
                            f"with its password, so it cannot be read without it")
    if metadata.password_hash != password_hash(password):
        return Unauthorized(f"ledger {metadata.ledger_id}: wrong password")
    return None


class _CreateLedger:
    """List writable bookies, pick E at random, take an id, create the metadata node."""

    def __init__(self, ctx: ClientContext, op_id: int, spec: LedgerSpec, password: bytes) -> None:
        self.ctx = ctx
        self.op_id = op_id
        self.spec = spec
        self.password = password
        self.attempt_count = 0
        self.ensemble: tuple[str, ...] = ()

    def start(self, now_ns: int) -> None:
        self.ctx.call_metadata(Children(self.ctx.layout.available_path), self._on_bookies)

    def _retry_or_fail(self, what: str, code: MetaCode, now_ns: int, again) -> None:
        self.attempt_count += 1
        if self.attempt_count >= self.ctx.config.metadata_retry_count_max:
            self._fail(MetadataError(f"create ledger: {what} failed: {code.name}"))
        else:
            self.ctx.retry_later(now_ns, again)

    def _fail(self, error: BKException) -> None:
        self.ctx.complete(self.op_id, error=error)

    def _on_bookies(self, result, now_ns: int) -> None:
        if result.code is not MetaCode.OK:
            self._retry_or_fail("listing bookies", result.code, now_ns, self.start)
            return
        bookies = sorted(b for b in result.children if b != "readonly")
        if len(bookies) < self.spec.ensemble_size:
            self._fail(NotEnoughBookies(f"create ledger: ensemble of {self.spec.ensemble_size} needs that many "
                                        f"writable bookies, {len(bookies)} registered"))
            return
        if self.spec.bookies:
            missing = sorted(set(self.spec.bookies) - set(bookies))
            if missing:
                self._fail(NotEnoughBookies(f"create ledger: bookies {missing} are not registered as writable"))
                return
            self.ensemble = self.spec.bookies
        else:
            self.ensemble = tuple(self.ctx.rng.sample(bookies, self.spec.ensemble_size))
        self._take_id(now_ns)

    def _take_id(self, now_ns: int) -> None:
        self.ctx.call_metadata(Create(self.ctx.layout.idgen_prefix, is_sequential=True), self._on_id)

    def _on_id(self, result, now_ns: int) -> None:
        if result.code is not MetaCode.OK:
            self._retry_or_fail("ledger id generation", result.code, now_ns, self._take_id)
            return
        ledger_id = self.ctx.layout.ledger_id_from_sequential(result.path)
        spec = self.spec
        metadata = LedgerMetadata(
            ledger_id=ledger_id, ensemble_size=spec.ensemble_size, write_quorum_size=spec.write_quorum_size,
            ack_quorum_size=spec.ack_quorum_size, ensembles=((0, self.ensemble),),
            digest_type=spec.digest_type, password_hash=password_hash(self.password), ctime_ns=now_ns,
            is_deferred_sync=spec.is_deferred_sync, custom_metadata=spec.custom_metadata,
            master_key=master_key(self.password))
        self._create_node(metadata, now_ns)

    def _create_node(self, metadata: LedgerMetadata, now_ns: int) -> None:
        data = metadata.to_bytes()
        path = self.ctx.layout.ledger_path(metadata.ledger_id)

        def on_created(result, at_ns: int) -> None:
            if result.code is MetaCode.OK:
                self._done(metadata.with_version(result.version if result.version >= 0 else 0))
            elif result.code is MetaCode.NODE_EXISTS:
                self._take_id(at_ns)   # the id is taken (should not happen with sequential ids)
            else:                      # unknown outcome: did our create land?
                self.ctx.retry_later(at_ns, lambda t: self.ctx.call_metadata(Get(path), on_reread))

        def on_reread(result, at_ns: int) -> None:
            if result.code is MetaCode.OK and result.data == data:
                self._done(metadata.with_version(result.version))
            elif result.code is MetaCode.NO_NODE:
                self._retry_or_fail("creating ledger metadata", MetaCode.CONNECTION_LOSS, at_ns,
                                    lambda t: self._create_node(metadata, t))
            elif result.code is MetaCode.OK:
                self._take_id(at_ns)
            else:
                self._retry_or_fail("re-reading ledger metadata", result.code, at_ns,
                                    lambda t: self.ctx.call_metadata(Get(path), on_reread))

        self.ctx.call_metadata(Create(path, data), on_created)

    def _done(self, metadata: LedgerMetadata) -> None:
        self.ctx.complete(self.op_id, result=LedgerWriter(ctx=self.ctx, metadata=metadata, password=self.password))
