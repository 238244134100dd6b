"""Effects: what a state machine asks its driver to do, and the completions it gets back.

A state machine never performs I/O. It appends effects to its outbox; the driver drains them
with take_effects() and performs each one. Completions come back as inputs:

    Send            -> (nothing; replies arrive later as receive())
    HeldSends       -> pull_sends(destinations)       when those bookies' connections can write
                                                      (the held requests come out as Sends)
    JournalWrite    -> on_persisted(token)            once the bytes are durable (in the order
                                                      the writes were emitted)
    MetadataCall    -> on_metadata_result(token, r)   once the store answered (or failed)
    Completed       -> delivered to the application: an operation it started has finished
"""

from __future__ import annotations

from dataclasses import dataclass

from bkcore.errors import BKException


# Effects are plain slotted dataclasses, not frozen ones: they are built for nearly every event,
# and a frozen class's __setattr__ keeps CPython from storing fields straight into their slots
# (a frozen Send costs about twice as much to build). They are not shared or kept: a state
# machine builds one, its driver performs it once and drops it. Nobody changes one after
# building it; equality and repr are as before, and they are unhashable (nobody hashes them).


@dataclass(slots=True)
class Send:
    destination: str
    message: object


@dataclass(slots=True)
class HeldSends:
    """The client core holds requests for these bookies (adds, which it groups into runs while
    they wait) until the driver pulls them with pull_sends(): at once, or when a connection
    that is busy writing can write again. Each bookie is named once until it is pulled."""

    destinations: list[str]


@dataclass(slots=True)
class JournalWrite:
    """Append `data`, the group's records `chunks` one after another (`size` bytes in all), to
    the journal and make it durable (write + fdatasync), then report. entry_count: the adds'
    entries that wait on it; group_started_at_ns: when its first record was collected (for the
    driver's journal latency figures).

    The records travel as they were encoded, joined only by whoever writes them: a group of a
    pipelined load is megabytes, and joining it on the core's thread held a real bookie's loop
    2-7 ms (bytes.join lets other threads run while it copies a megabyte or more, so in the
    journal thread it holds nobody up)."""

    token: int
    chunks: list[bytes]
    size: int
    entry_count: int = 0
    group_started_at_ns: int = 0

    @property
    def data(self) -> bytes:
        return b"".join(self.chunks)


@dataclass(slots=True)
class MetadataCall:
    token: int
    op: object


@dataclass(slots=True)
class Completed:
    """An application operation finished: `error` is None on success, else the typed error."""

    op_id: int
    result: object = None
    error: BKException | None = None


Effect = Send | HeldSends | JournalWrite | MetadataCall | Completed
