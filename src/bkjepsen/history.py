"""The run's history: every client operation (invoked, then ok / fail / unknown) and every
nemesis action, timed from the run's start, kept by the harness from outside the system.

Outcomes: `ok` (the system answered and the result is recorded), `fail` (the system said it did
not happen, e.g. a read error or a txn whose compare failed is still `ok`), `unknown` (an error
or timeout after which the operation may or may not have taken effect). Checkers judge only
this record (bkjepsen.checkers); it is written to history.jsonl, one JSON object per line.

Operation shapes by workload (key / value / result):
  ledger  add    (ledger_id, entry_id) / payload / entry_id
          read   (ledger_id, entry_id) / - / payload, or None for "no such entry"
          lac    ledger_id / - / lac;  close  ledger_id / - / [last_entry_id, length]
  stream  write  stream / payload / position [segment, entry, slot]
          read   stream / - / [position, payload]
  table   put    key / value / [prev value, prev version];  get  key / - / [value, version]
          cas    key / [expected version, value] / succeeded;  incr  key / amount / total
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field


@dataclass
class Op:
    index: int
    process: str
    kind: str
    key: object
    value: object
    invoked_s: float
    completed_s: float | None = None
    outcome: str = "pending"          # pending | ok | fail | unknown
    result: object = None
    error: str = ""

    @property
    def latency_s(self) -> float | None:
        return None if self.completed_s is None else self.completed_s - self.invoked_s


@dataclass
class NemesisEvent:
    kind: str
    targets: list[str]
    start_s: float
    end_s: float | None = None
    detail: str = ""


@dataclass
class History:
    started_at: float = field(default_factory=time.monotonic)
    ops: list[Op] = field(default_factory=list)
    nemesis: list[NemesisEvent] = field(default_factory=list)

    def now_s(self) -> float:
        return time.monotonic() - self.started_at

    def invoke(self, process: str, kind: str, key: object = None, value: object = None) -> Op:
        op = Op(len(self.ops), process, kind, key, value, self.now_s())
        self.ops.append(op)
        return op

    def ok(self, op: Op, result: object = None) -> Op:
        return self._complete(op, "ok", result, "")

    def fail(self, op: Op, error: BaseException | str) -> Op:
        return self._complete(op, "fail", None, _describe(error))

    def unknown(self, op: Op, error: BaseException | str) -> Op:
        return self._complete(op, "unknown", None, _describe(error))

    def _complete(self, op: Op, outcome: str, result: object, error: str) -> Op:
        assert op.outcome == "pending", op
        op.completed_s, op.outcome, op.result, op.error = self.now_s(), outcome, result, error
        return op

    def observe(self, process: str, kind: str, key: object, result: object) -> Op:
        """An observation with no duration of its own (a LAC learnt, a close seen)."""
        return self.ok(self.invoke(process, kind, key), result)

    def nemesis_start(self, kind: str, targets: list[str], detail: str = "") -> NemesisEvent:
        event = NemesisEvent(kind, list(targets), self.now_s(), None, detail)
        self.nemesis.append(event)
        return event

    def nemesis_end(self, event: NemesisEvent) -> None:
        event.end_s = self.now_s()

    def unfinished_to_unknown(self) -> None:
        """At the end, operations still pending (cancelled by the deadline) have unknown outcomes."""
        for op in self.ops:
            if op.outcome == "pending":
                self.unknown(op, "still pending at the end of the run")

    def write_jsonl(self, path: str) -> None:
        with open(path, "w") as file:
            for op in self.ops:
                file.write(json.dumps({"type": "op", **asdict(op)}, default=_jsonable) + "\n")
            for event in self.nemesis:
                file.write(json.dumps({"type": "nemesis", **asdict(event)}, default=_jsonable) + "\n")


def _describe(error: BaseException | str) -> str:
    return error if isinstance(error, str) else f"{type(error).__name__}: {error}"[:200]


def _jsonable(value: object) -> object:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "backslashreplace")
    if isinstance(value, tuple):
        return list(value)
    return str(value)


def read_jsonl(path: str) -> History:
    """A history written by write_jsonl (keys and results come back as JSON lists)."""
    history = History(started_at=0.0)
    with open(path) as file:
        for line in file:
            record = json.loads(line)
            kind = record.pop("type")
            if kind == "op":
                history.ops.append(Op(**record))
            else:
                history.nemesis.append(NemesisEvent(**record))
    return history
