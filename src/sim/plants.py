"""Planted bugs: each one a deliberate, named mistake in the code under test, which a workload's
checker must catch. A checker that no planted bug can fail proves nothing.

A plant is applied for one run (`with planted(name):`) by swapping one function of the product
for a wrong variant, and restored afterwards; the product's code keeps no trace of it (no flag,
no "sim mode" branch). `bk sim plants` lists them as `NAME WORKLOAD SEEDS`: the workload whose
checker catches it, and the number of seeds, from any start, within which some seed does, in
liveness mode (--liveness: the healed cluster must also finish, so a bug that leaves it stuck
counts too). tests/sim/test_plants.py checks that claim from two starts; the stated counts are
about twice the longest run of uncaught seeds measured from three starts over 60 seeds each.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Callable, Iterator


@dataclass(frozen=True, slots=True)
class Plant:
    name: str
    workload: str
    seeds: int                      # caught within this many consecutive seeds, from any start
    description: str
    install: Callable[[], Callable[[], None]]     # swaps the bug in; returns what undoes it


def _swap(owner: object, attribute: str, make_variant: Callable[[object], object]) -> Callable[[], None]:
    """Replace owner.attribute by make_variant(original); returns the undo."""
    original = getattr(owner, attribute)
    setattr(owner, attribute, make_variant(original))
    return lambda: setattr(owner, attribute, original)


def _recovery_reads_without_fencing() -> Callable[[], None]:
    import bkcore.client.reads as reads

    def unfenced(original):
        def read_request(*args, **kwargs):
            kwargs["is_fencing"] = False
            return original(*args, **kwargs)
        return read_request
    return _swap(reads, "ReadRequest", unfenced)


def _add_acked_before_ack_quorum() -> Callable[[], None]:
    from bkcore.client.writer import LedgerWriter

    def one_ack_short(original):
        def complete_ready(self, now_ns):
            real = self.metadata
            if real.ack_quorum_size == 1:
                return original(self, now_ns)
            short = self.metadata = dataclasses.replace(real, ack_quorum_size=real.ack_quorum_size - 1)
            try:
                original(self, now_ns)
            finally:
                if self.metadata is short:      # (unless an ensemble change replaced it meanwhile)
                    self.metadata = real
        return complete_ready
    return _swap(LedgerWriter, "_complete_ready", one_ack_short)


def _stream_ack_before_durable() -> Callable[[], None]:
    from bkcore.client.handles import WriteHandle

    def acks_at_once(original):
        def start_add(self, payload, on_done, **options):
            entry_id = self._writer.last_add_pushed + 1
            original(self, payload, lambda result, error: None, **options)
            on_done(entry_id, None)
        return start_add
    return _swap(WriteHandle, "start_add", acks_at_once)


def _owner_skips_fencing() -> Callable[[], None]:
    import bkcore.stream.writer as writer

    def unfenced(original):
        async def open_without_recovery(bk, segment):
            # Reads the segment as far as its LAC and takes that for its end, leaving its
            # writer (a table range's previous owner) free to go on adding.
            handle = await bk.open_ledger(segment.ledger_id, password=writer.STREAM_LEDGER_PASSWORD, recovery=False)
            metadata = dataclasses.replace(handle.metadata, last_entry_id=handle.last_add_confirmed)
            handle._reader.metadata = metadata
            return handle
        return open_without_recovery
    return _swap(writer, "fence_segment_ledger", unfenced)


def _restore_without_journal_replay() -> Callable[[], None]:
    from bkcore.table.range import TableRange

    def checkpoint_only(original):
        async def replay(self, state, start):
            if start is None:            # no checkpoint to start from: the whole journal
                await original(self, state, start)
        return replay
    return _swap(TableRange, "_replay", checkpoint_only)


def _watch_drops_an_event() -> Callable[[], None]:
    from bkcore.table.range import TableRange

    def lossy(original):
        def publish(self, events):
            # Every fifth change of a range reaches its history but none of its live watchers.
            kept = [e for e in events if e.revision % 5 != 0]
            self._history.extend(e for e in events if e.revision % 5 == 0)
            original(self, kept)
        return publish
    return _swap(TableRange, "_publish", lossy)


PLANTS: dict[str, Plant] = {plant.name: plant for plant in [
    Plant("recovery-reads-without-fencing", "ledger", 45,
          "ledger recovery reads (the LAC read and the forward reads) do not fence the bookies",
          _recovery_reads_without_fencing),
    Plant("add-acked-before-ack-quorum", "ledger", 20,
          "a writer acknowledges an add one bookie short of the ack quorum",
          _add_acked_before_ack_quorum),
    Plant("stream-ack-before-durable", "stream", 15,
          "a stream writer acknowledges a record as soon as its entry is sent, before it is durable",
          _stream_ack_before_durable),
    Plant("owner-skips-fencing", "table", 10,
          "a new range owner (any new stream writer) seals the last journal segment at its LAC "
          "without recovering its ledger, so the old owner is not fenced",
          _owner_skips_fencing),
    Plant("restore-without-journal-replay", "table", 30,
          "a range restored from a checkpoint does not replay the journal after it",
          _restore_without_journal_replay),
    Plant("watch-drops-an-event", "table", 30,
          "a range does not send every fifth change to its live watchers",
          _watch_drops_an_event),
]}


def plant_names() -> list[str]:
    return sorted(PLANTS)


@contextlib.contextmanager
def planted(name: str | None) -> Iterator[None]:
    """The code with the named bug swapped in (nothing, for None)."""
    if name is None:
        yield
        return
    if name not in PLANTS:
        raise ValueError(f"unknown plant {name!r}; `bk sim plants` lists them")
    undo = PLANTS[name].install()
    try:
        yield
    finally:
        undo()
