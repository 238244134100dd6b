"""Effects: what a state machine asks its driver to do, and the completions it gets back.

A state machine never performs I/O. It appends effects to its outbox; the driver drains them
with take_effects() and performs each one. Completions come back as inputs:

    Send            -> (nothing; replies arrive later as receive())
    JournalWrite    -> on_persisted(token)            once the bytes are durable
    MetadataCall    -> on_metadata_result(token, r)   once the store answered (or failed)
    Completed       -> delivered to the application: an operation it started has finished
"""

from __future__ import annotations

from dataclasses import dataclass

from bkcore.errors import BKException
from bkcore.wire import store_fields_directly


# Every effect stores its fields through the slot descriptors (store_fields_directly): effects
# are built for nearly every event, and the frozen dataclass __init__ costs half as much again.


@store_fields_directly
@dataclass(frozen=True, slots=True)
class Send:
    destination: str
    message: object


@store_fields_directly
@dataclass(frozen=True, slots=True)
class JournalWrite:
    """Append `data` to the journal and make it durable (write + fdatasync), then report."""

    token: int
    data: bytes


@store_fields_directly
@dataclass(frozen=True, slots=True)
class MetadataCall:
    token: int
    op: object


@store_fields_directly
@dataclass(frozen=True, slots=True)
class Completed:
    """An application operation finished: `error` is None on success, else the typed error."""

    op_id: int
    result: object = None
    error: BKException | None = None


Effect = Send | JournalWrite | MetadataCall | Completed
