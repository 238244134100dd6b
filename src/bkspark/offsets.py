"""Offsets of the Spark source: where a read starts or ends in a stream, as JSON Spark can keep.

A streaming offset is the position of the next record to read and the id of the ledger that
holds it:

    {"position": "3:10:0", "ledger": 17}

Carrying the ledger id makes data loss exact: if the segment of `position` is truncated or no
longer holds ledger 17 when the next batch is planned, the records in between are gone, and
the planner can name the lost ledgers. `ledger` is -1 when the position is the start of a
segment that did not exist yet when the offset was taken.

Users write startingOffsets / endingOffsets as one of:

    earliest | latest                      the stream's first / end position at planning time
    {"position": "3:10:0"}                 a position (DLSN; "ledger" optional)
    {"txid": 1200}                         the first record with txid >= 1200
    {"timestamp": 1700000000000}           epoch millis: from the newest segment created at or
                                           before that time (segments know their creation time,
                                           records do not, so a few earlier records may come too)
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from bkcore.stream.records import DLSN

UNKNOWN_LEDGER = -1


class OffsetError(ValueError):
    """An offset option or checkpointed offset that cannot be understood."""


@dataclass(frozen=True, slots=True)
class StreamOffset:
    position: DLSN
    ledger_id: int = UNKNOWN_LEDGER

    def to_json_dict(self) -> dict:
        return {"position": str(self.position), "ledger": self.ledger_id}

    @classmethod
    def from_json_dict(cls, value: object) -> StreamOffset:
        if not isinstance(value, dict) or "position" not in value:
            raise OffsetError(f"offset {value!r} is not {{\"position\": \"SEGMENT:ENTRY:SLOT\", \"ledger\": ID}}")
        try:
            position = DLSN.parse(str(value["position"]))
        except ValueError as exc:
            raise OffsetError(f"offset {value!r}: {exc}") from None
        ledger_id = value.get("ledger", UNKNOWN_LEDGER)
        if type(ledger_id) is not int:
            raise OffsetError(f"offset {value!r}: \"ledger\" must be an integer ledger id")
        return cls(position, ledger_id)


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """A user's startingOffsets/endingOffsets, before it is resolved against the stream."""

    kind: str                      # "earliest", "latest", "position", "txid" or "timestamp"
    position: DLSN | None = None
    ledger_id: int = UNKNOWN_LEDGER
    value: int = 0                 # the txid or the epoch millis

    def as_offset(self) -> StreamOffset:
        assert self.kind == "position"
        return StreamOffset(self.position, self.ledger_id)


def parse_offset_spec(text: str | None, *, option: str, default: str) -> OffsetSpec:
    """Parse the text of option `option` (startingOffsets or endingOffsets)."""
    text = (text if text is not None else default).strip()
    if text.lower() in ("earliest", "latest"):
        return OffsetSpec(text.lower())
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OffsetError(f"option {option}={text!r} is neither earliest, latest nor JSON ({exc.msg}); "
                          f"examples: {{\"position\": \"3:10:0\"}}, {{\"txid\": 1200}}, "
                          f"{{\"timestamp\": 1700000000000}}") from None
    if isinstance(value, dict) and "position" in value:
        offset = StreamOffset.from_json_dict(value)
        return OffsetSpec("position", position=offset.position, ledger_id=offset.ledger_id)
    for kind in ("txid", "timestamp"):
        if isinstance(value, dict) and kind in value:
            if type(value[kind]) is not int or value[kind] < 0:
                raise OffsetError(f"option {option}: {kind} must be a non-negative integer, not {value[kind]!r}")
            return OffsetSpec(kind, value=value[kind])
    raise OffsetError(f"option {option}={text!r}: a JSON offset has one of the keys position, txid, timestamp")


def encode(offset: StreamOffset) -> dict:
    return offset.to_json_dict()


def decode(value: dict | str) -> StreamOffset:
    """A checkpointed offset (Spark hands back what encode() produced, maybe as JSON text)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise OffsetError(f"checkpointed offset {value!r} is not JSON: {exc.msg}") from None
    return StreamOffset.from_json_dict(value)
