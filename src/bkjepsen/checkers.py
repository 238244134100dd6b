"""Checkers: each judges a bkjepsen.history.History alone and returns a list of violations
(strings, "rule: detail"); an empty list means valid.

ledger  The simulator's ledger checker (bksim.checker: lost-ack, changed, phantom, divergent,
        lac-backwards, close-changed, read-past-close) run on the real history, plus
        gap-before-lac: no reader is told "no such entry" for an entry at or below a LAC anyone
        has seen. Positions agree across readers because every read of one (ledger, entry) must
        return the same bytes (divergent).
stream  lost-ack (an acknowledged record is missing from the final full read, or sits at another
        position than its acknowledgement said), divergent (one position, two payloads), moved
        (one payload at two positions), phantom (a payload nobody wrote), gap (a reader from the
        start skipped or reordered records: its sequence must be a prefix of the final one).
table   per key, a Wing-Gong linearizability search (bksim.linearizability) of registers
        (put/get/cas) and counters (incr/get), unknown outcomes may or may not have happened;
        counter totals: the final value lies between the sum of acknowledged increments and that
        sum plus every unknown increment.
"""

from __future__ import annotations

from collections import defaultdict

from bkjepsen.history import History, Op
from bksim.checker import check as check_ledger_history
from bksim.history import History as SimHistory
from bksim.linearizability import SearchBudgetExceeded, check_linearizable, kind_and_args

MISSING = None


# -- ledgers ----------------------------------------------------------------------------------------

def check_ledgers(history: History) -> list[str]:
    sim = SimHistory()
    to_ns = _ns
    for op in history.ops:
        if op.kind == "add":
            ledger_id, entry_id = op.key
            index = sim.add_invoked(process=op.process, ledger_id=ledger_id, entry_id=entry_id,
                                    payload=_bytes(op.value), now_ns=to_ns(op.invoked_s))
            if op.outcome == "ok":
                sim.add_ok(index, now_ns=to_ns(op.completed_s))
            elif op.outcome == "unknown":
                sim.add_unknown(index, now_ns=to_ns(op.completed_s))
        elif op.kind == "read" and op.outcome == "ok":
            ledger_id, entry_id = op.key
            if op.result is MISSING:
                sim.read_missing(process=op.process, ledger_id=ledger_id, entry_id=entry_id,
                                 now_ns=to_ns(op.completed_s))
            else:
                sim.read_ok(process=op.process, ledger_id=ledger_id, entry_id=entry_id,
                            payload=_bytes(op.result), now_ns=to_ns(op.completed_s))
        elif op.kind == "lac" and op.outcome == "ok":
            sim.lac_seen(process=op.process, ledger_id=op.key, lac=op.result, now_ns=to_ns(op.completed_s))
        elif op.kind == "close" and op.outcome == "ok":
            last_entry_id, length = op.result
            sim.closed_seen(process=op.process, ledger_id=op.key, last_entry_id=last_entry_id, length=length,
                            now_ns=to_ns(op.completed_s))
    found = [str(violation) for violation in check_ledger_history(sim)]
    found += [f"final-read: ledger {op.key} could not be recovered and read after healing ({op.error})"
              for op in history.ops if op.kind == "final-read" and op.outcome != "ok"]
    found += _gaps_before_lac(sim)
    found += [f"entry-id: {op.process} predicted entry {op.key} but the add returned {op.result}"
              for op in history.ops if op.kind == "add" and op.outcome == "ok" and op.result != op.key[1]]
    return found


def _gaps_before_lac(sim: SimHistory) -> list[str]:
    highest_lac: dict[int, int] = {}
    for record in sim.lacs:
        highest_lac[record.ledger_id] = max(record.lac, highest_lac.get(record.ledger_id, -1))
    return [f"gap-before-lac: ledger {read.ledger_id}: {read.process} read entry {read.entry_id} as missing "
            f"below LAC {highest_lac[read.ledger_id]}"
            for read in sim.reads
            if read.payload is None and read.entry_id <= highest_lac.get(read.ledger_id, -1)]


# -- streams ----------------------------------------------------------------------------------------

def check_streams(history: History) -> list[str]:
    found: list[str] = []
    written = {op.value for op in history.ops if op.kind == "write"}
    acked = {op.value: tuple(op.result) for op in history.ops if op.kind == "write" and op.outcome == "ok"}
    reads = [op for op in history.ops if op.kind == "read" and op.outcome == "ok"]
    at_position: dict[tuple, str] = {}
    position_of: dict[str, tuple] = {}
    for op in reads:
        position, payload = tuple(op.result[0]), op.result[1]
        if payload not in written:
            found.append(f"phantom: {op.process} read {payload!r} at {position}, never written")
        if at_position.setdefault(position, payload) != payload:
            found.append(f"divergent: position {position} read as {at_position[position]!r} and {payload!r}")
        if position_of.setdefault(payload, position) != position:
            found.append(f"moved: {payload!r} read at {position_of[payload]} and at {position}")
    finals = [op.result for op in history.ops if op.kind == "final-read" and op.outcome == "ok"]
    final_payloads = [op.result[1] for op in reads if finals and op.process == finals[-1]]
    if not finals:
        found.append("final-read: the stream could not be read to its end after healing; acknowledged "
                     "records are unverified")
    else:
        present = set(final_payloads)
        for payload, position in sorted(acked.items(), key=lambda item: item[1]):
            if payload not in present:
                found.append(f"lost-ack: acknowledged record {payload!r} at {position} missing from the final read")
            elif position_of.get(payload) != position:
                found.append(f"lost-ack: {payload!r} acknowledged at {position} but read at {position_of[payload]}")
        found += _reader_gaps(reads, final_payloads)
    return found


def _reader_gaps(reads: list[Op], final_payloads: list[str]) -> list[str]:
    """Each reader that started at the beginning saw a prefix of the final sequence."""
    by_reader: dict[str, list[str]] = defaultdict(list)
    for op in reads:
        if not op.process.startswith("final") and op.key == "from-start":
            by_reader[op.process].append(op.result[1])
    found = []
    for reader, seen in sorted(by_reader.items()):
        if seen != final_payloads[:len(seen)]:
            at = next(i for i, (a, b) in enumerate(zip(seen, final_payloads + [None] * len(seen))) if a != b)
            found.append(f"gap: {reader}'s record {at} is {seen[at]!r}, the final read has "
                         f"{final_payloads[at] if at < len(final_payloads) else 'nothing'!r} there")
    return found


# -- tables -----------------------------------------------------------------------------------------

class _KeyOp:
    """One table operation as the linearizability search sees it (times in ns)."""
    __slots__ = ("kind", "args", "result", "invoked_ns", "completed_ns")

    def __init__(self, op: Op) -> None:
        self.kind, self.args = op.kind, op.value
        self.result = _tuple(op.result) if op.outcome == "ok" else None
        self.invoked_ns = _ns(op.invoked_s)
        self.completed_ns = _ns(op.completed_s) if op.completed_s is not None else None


def register_step(state: tuple, op: _KeyOp) -> tuple | None:
    """A register with etcd-style versions: state (value or None, version)."""
    value, version = state
    if op.kind == "get":
        return state if op.result is None or op.result == state else None
    if op.kind == "put":
        return (op.args, version + 1) if op.result is None or op.result == state else None
    assert op.kind == "cas", op.kind
    expected, new_value = op.args
    succeeds = expected == version
    if op.result is not None and op.result != succeeds:
        return None
    return (new_value, version + 1) if succeeds else state


def counter_step(state: int, op: _KeyOp) -> int | None:
    if op.kind == "get":
        return state if op.result is None or op.result == state else None
    assert op.kind == "incr", op.kind
    after = state + op.args
    return after if op.result is None or op.result == after else None


def register_effects(ops: list[_KeyOp]):
    """effect_of for a register's operations: kind_and_args, except that the writes of a value
    no answer ever showed (a put, or a cas from the same version) are one effect. In the
    register model a value is only ever compared by what answers show (a get's value, a put's
    previous value; a cas compares versions), so such a write is overwritten before anything
    shows it, or never shown: which of several such writes took place makes no difference, only
    how many did (each bumps the version). Without this, a burst of timed-out writes (a server
    killed with many calls in flight) made the search try every subset of them."""
    observed = {op.result[0] for op in ops if op.kind in ("get", "put") and op.result is not None}

    def effect_of(op: _KeyOp):
        if op.kind == "put" and op.args not in observed:
            return "put", "an unread value"
        if op.kind == "cas" and op.args[1] not in observed:
            return "cas", op.args[0], "an unread value"
        return kind_and_args(op)
    return effect_of


def check_tables(history: History, *, step_budget: int = 2_000_000) -> list[str]:
    by_key: dict[str, list[Op]] = defaultdict(list)
    for op in history.ops:
        if op.kind in ("put", "get", "cas", "incr") and op.outcome in ("ok", "unknown"):
            by_key[op.key].append(op)
    found = []
    for key, ops in sorted(by_key.items()):
        is_counter = any(op.kind == "incr" for op in ops)
        model, initial = (counter_step, 0) if is_counter else (register_step, (None, 0))
        key_ops = [_KeyOp(op) for op in ops]
        try:
            if not check_linearizable(key_ops, initial, model, step_budget=step_budget,
                                      effect_of=kind_and_args if is_counter else register_effects(key_ops)):
                found.append(f"not-linearizable: key {key!r} ({len(ops)} operations)")
        except SearchBudgetExceeded as exc:
            found.append(f"unchecked: key {key!r}: {exc}")
        if is_counter:
            found += _counter_total(key, ops)
    return found


def _counter_total(key: str, ops: list[Op]) -> list[str]:
    finals = [op.result for op in ops if op.kind == "get" and op.process == "final" and op.outcome == "ok"]
    if not finals:
        return [f"counter-total: key {key!r}: no final read after healing"]
    acked = sum(op.value for op in ops if op.kind == "incr" and op.outcome == "ok")
    unknown = sum(op.value for op in ops if op.kind == "incr" and op.outcome == "unknown")
    total = finals[-1]
    if not acked <= total <= acked + unknown:
        return [f"counter-total: key {key!r}: final value {total}, but acknowledged increments sum to {acked} "
                f"(+ up to {unknown} of unknown outcome)"]
    return []


# -- helpers ----------------------------------------------------------------------------------------

def _ns(seconds: float) -> int:
    return int(round(seconds * 1e9))


def _bytes(text) -> bytes:
    return text if isinstance(text, bytes) else str(text).encode()


def _tuple(value):
    return tuple(_tuple(v) for v in value) if isinstance(value, list) else value


CHECKERS = {"ledger": check_ledgers, "stream": check_streams, "table": check_tables}
