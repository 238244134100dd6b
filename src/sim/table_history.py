"""TableHistory: what the table workload's clients saw, and the checker that judges it.

The workload only records; check_table_history() decides. Each op has its invocation and
completion in virtual time and its result, None when the outcome is unknown (a timeout, or an
error of a write); failed reads and requests refused before they reached a server are left out.

Rules, each a kind of violation:

- not-linearizable: per key, a Wing-Gong search (bksim.linearizability) finds no order of its ops
  that a register (value, version) or a counter explains. Every op is checked as what it does to
  that one key: a range read is a get of each key it covers (absent: missing), a deleteRange
  clears each key it covers, a txn compares and writes one key (the workload keeps txns to one
  key), and a put with a TTL brings a possible expiry of its value, from the earliest moment the
  TTL can have passed (clock skew included) on. Unknown outcomes may have happened or not.
- counter-total: a counter's final value is not the sum of the increments acknowledged before
  the final read plus a subset of the unknown ones.
- watch-order / watch-twice / watch-start: a watch saw changes out of revision order, one change
  twice, or a change at or below the revision it started after.
- watch-invented: a watch saw a put of a value nobody wrote to that key, or a delete of a key
  nobody deleted (deletes, deleteRanges, txns, TTLs), or a change before it was asked for.
- two-changes: one key was put at one revision with two values (acknowledged results and watch
  events together). (A put may share its revision with a delete of the same key: a TTL that
  expired just before it, carried out by the same command.)
- watch-gap: a watch missed a change of its keys that others know of (acknowledged writes and
  every watch's events), above the revision it started after and at or below the newest
  revision it saw; and a watch resumed after another started later than where that one stopped.
- ttl-expired: a read returned a value after its TTL had passed: later than its put's completion
  plus the TTL plus twice the largest clock skew (the writer's and the reader's clocks) plus 1 ms
  (times are stamped in whole ms).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bksim.linearizability import SearchBudgetExceeded, check_linearizable, kind_and_args
from bksim.stream_history import StreamViolation as TableViolation     # (kind, detail), as there

MS = 1_000_000
MISSING = (None, 0)                  # a register's (value, version) when the key is absent
SEARCH_STEP_BUDGET = 200_000
VIOLATIONS_PER_RULE_MAX = 5


@dataclass(slots=True)
class TableOp:
    """kind, args and result:
    put (value, ttl_ms) -> (prev_value, prev_version, revision)
    get () -> (value, version), MISSING when absent; on a counter: its number (0 when absent)
    delete () -> (deleted_count, revision)
    txn (target "version"|"value", expected, new_value; None deletes) -> (succeeded, value
        and version read in the failure branch or None, revision)
    range () over `lkeys` -> ((lkey, value, version), ...) for the keys present; on counters
        ((lkey, number), ...)
    delete-range () over `lkeys` -> (deleted_count, revision)
    incr (amount,) -> total"""

    process: str
    kind: str
    pkey: bytes
    lkeys: tuple[bytes, ...]
    args: tuple
    invoked_ns: int
    completed_ns: int | None = None
    result: object = None


@dataclass(slots=True)
class WatchLog:
    name: str
    pkey: bytes
    lkeys: tuple[bytes, ...]                  # the workload's keys the watch covers
    start_after: int                          # every change above this revision must come
    opened_at_ns: int
    resumes: str | None = None                # the watch this one continues, if any
    # (revision, lkey, "put" | "delete", value (None for a delete), seen at ns)
    events: list[tuple[int, bytes, str, bytes | None, int]] = field(default_factory=list)


@dataclass(slots=True)
class TableHistory:
    counter_pkeys: frozenset[bytes] = frozenset()
    # The largest difference between two processes' wall clocks (twice the scenario's skew).
    clock_spread_ns: int = 0
    ops: list[TableOp] = field(default_factory=list)
    watches: list[WatchLog] = field(default_factory=list)
    final_read_at_ns: int | None = None       # when the verifier began its reads
    errors: dict[str, int] = field(default_factory=dict)
    unchecked_keys: list[str] = field(default_factory=list)

    def invoke(self, process: str, kind: str, pkey: bytes, lkeys: tuple[bytes, ...], args: tuple,
               now_ns: int) -> TableOp:
        op = TableOp(process, kind, pkey, lkeys, args, now_ns)
        self.ops.append(op)
        return op

    @staticmethod
    def complete(op: TableOp, result: object, now_ns: int) -> None:
        assert result is not None
        op.result, op.completed_ns = result, now_ns

    def drop(self, op: TableOp) -> None:
        """The op certainly did nothing (a failed read, a refused request). Found by identity
        from the newest (ops are dropped soon after they are invoked): list.remove() compares
        every older op field by field (6% of a profiled mixed run)."""
        ops = self.ops
        for index in range(len(ops) - 1, -1, -1):
            if ops[index] is op:
                del ops[index]
                return
        raise ValueError("dropped an op this history does not hold")

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1


def check_table_history(history: TableHistory) -> list[TableViolation]:
    violations = _linearizable(history)
    violations += _counter_totals(history)
    violations += _watches(history)
    violations += _ttls(history)
    return violations


# -- per-key linearizability ----------------------------------------------------------------------

class _KeyOp:
    """One op as the search sees it: what it does to one key."""

    __slots__ = ("kind", "args", "result", "invoked_ns", "completed_ns")

    def __init__(self, kind: str, args: object, result: object, invoked_ns: int, completed_ns: int | None) -> None:
        self.kind, self.args, self.result = kind, args, result
        self.invoked_ns, self.completed_ns = invoked_ns, completed_ns


def register_step(state: tuple, op: _KeyOp) -> tuple | None:
    value, version = state
    kind = op.kind
    if kind == "get":
        return state if op.result == state else None
    if kind == "put":
        return (op.args, version + 1) if op.result is None or op.result == state else None
    if kind == "delete":
        return MISSING if op.result is None or op.result == (0 if value is None else 1) else None
    if kind == "clear":
        return MISSING
    if kind == "expire":
        return MISSING if value is not None and value == op.args else None
    assert kind == "txn", kind
    target, expected, new_value = op.args
    succeeded = (version if target == "version" else value) == expected
    if op.result is not None and (op.result[0] != succeeded or (not succeeded and op.result[1] != state)):
        return None
    if not succeeded:
        return state
    return MISSING if new_value is None else (new_value, version + 1)


def counter_step(state: int, op: _KeyOp) -> int | None:
    if op.kind == "get":
        return state if op.result == state else None
    assert op.kind == "incr", op.kind
    after = state + op.args
    return after if op.result is None or op.result == after else None


def _key_ops(history: TableHistory) -> dict[tuple[bytes, bytes], list[_KeyOp]]:
    """Every op projected onto each key it touches."""
    by_key: dict[tuple[bytes, bytes], list[_KeyOp]] = {}
    spread_ns = history.clock_spread_ns

    def add(lkey: bytes, op: TableOp, kind: str, args: object, result: object) -> None:
        by_key.setdefault((op.pkey, lkey), []).append(_KeyOp(kind, args, result, op.invoked_ns, op.completed_ns))

    for op in history.ops:
        result = op.result
        if result is None and op.kind in ("get", "range"):
            continue                    # a read still unanswered when the run ended
        if op.kind == "range":
            found = {item[0]: item[1:] for item in result}
            is_counter = op.pkey in history.counter_pkeys
            for lkey in op.lkeys:
                add(lkey, op, "get", None, found[lkey][0] if is_counter and lkey in found
                    else 0 if is_counter else found.get(lkey, MISSING))
        elif op.kind == "delete-range":
            for lkey in op.lkeys:
                add(lkey, op, "clear", None, None if result is None else True)
        elif op.kind == "put":
            value, ttl_ms = op.args
            add(op.lkeys[0], op, "put", value, None if result is None else result[:2])
            if ttl_ms:
                earliest_ns = op.invoked_ns + ttl_ms * MS - spread_ns - MS
                by_key[(op.pkey, op.lkeys[0])].append(_KeyOp("expire", value, None, earliest_ns, None))
        elif op.kind == "delete":
            add(op.lkeys[0], op, "delete", None, None if result is None else result[0])
        elif op.kind == "txn":
            add(op.lkeys[0], op, "txn", op.args, None if result is None else result[:2])
        elif op.kind == "incr":
            add(op.lkeys[0], op, "incr", op.args[0], result)
        else:
            assert op.kind == "get", op.kind
            add(op.lkeys[0], op, "get", None, result)
    return by_key


def _linearizable(history: TableHistory) -> list[TableViolation]:
    found = []
    history.unchecked_keys.clear()
    for (pkey, lkey), ops in sorted(_key_ops(history).items()):
        model, initial = (counter_step, 0) if pkey in history.counter_pkeys else (register_step, MISSING)
        name = f"{pkey.decode()}/{lkey.decode()}"
        try:
            if not check_linearizable(ops, initial, model, step_budget=SEARCH_STEP_BUDGET, effect_of=kind_and_args):
                found.append(TableViolation("not-linearizable", f"key {name} ({len(ops)} operations)"))
        except SearchBudgetExceeded:
            history.unchecked_keys.append(name)
    return found[:VIOLATIONS_PER_RULE_MAX]


# -- counters -------------------------------------------------------------------------------------

def _counter_totals(history: TableHistory) -> list[TableViolation]:
    if history.final_read_at_ns is None:
        return []
    found = []
    finals: dict[tuple[bytes, bytes], int] = {}
    acked: dict[tuple[bytes, bytes], int] = {}
    unknown: dict[tuple[bytes, bytes], list[int]] = {}
    for op in history.ops:
        if op.pkey not in history.counter_pkeys:
            continue
        key = (op.pkey, op.lkeys[0])
        if op.kind == "get" and op.process == "verifier":
            finals[key] = op.result
        elif op.kind == "incr":
            amount = op.args[0]
            if op.result is not None and op.completed_ns < history.final_read_at_ns:
                acked[key] = acked.get(key, 0) + amount
            else:
                unknown.setdefault(key, []).append(amount)
    for key, final in sorted(finals.items()):
        extra = final - acked.get(key, 0)
        if not _is_subset_sum(unknown.get(key, []), extra):
            found.append(TableViolation("counter-total", f"{key[0].decode()}/{key[1].decode()} is {final}, but the "
                                                         f"acknowledged increments sum to {acked.get(key, 0)} and "
                                                         f"no subset of the unknown ones {sorted(unknown.get(key, []))} "
                                                         f"makes up the difference"))
    return found[:VIOLATIONS_PER_RULE_MAX]


def _is_subset_sum(amounts: list[int], target: int) -> bool:
    """Whether some of the (positive) amounts add up to target."""
    if target < 0:
        return False
    reachable = 1                       # bit i: some subset sums to i
    for amount in amounts:
        reachable |= reachable << amount
    return bool(reachable >> target & 1)


# -- watches --------------------------------------------------------------------------------------

def _known_changes(history: TableHistory) -> tuple[dict, list[TableViolation]]:
    """(pkey, lkey, revision, kind) -> value: from acknowledged writes and every watch event;
    with a two-changes violation for each disagreement."""
    changes: dict[tuple[bytes, bytes, int, str], bytes | None] = {}
    found = []

    def note(key: tuple[bytes, bytes, int], change: tuple[str, bytes | None], who: str) -> None:
        kind, value = change
        before = changes.setdefault((*key, kind), value)
        if before != value:
            found.append(TableViolation("two-changes", f"{key[0].decode()}/{key[1].decode()} at revision {key[2]}: "
                                                       f"{kind} {before!r} and, by {who}, {value!r}"))

    for op in history.ops:
        if op.result is None or op.pkey in history.counter_pkeys:
            continue
        if op.kind == "put":
            note((op.pkey, op.lkeys[0], op.result[2]), ("put", op.args[0]), op.process)
        elif op.kind == "delete" and op.result[0]:
            note((op.pkey, op.lkeys[0], op.result[1]), ("delete", None), op.process)
        elif op.kind == "txn" and op.result[2] is not None:
            new_value = op.args[2]
            note((op.pkey, op.lkeys[0], op.result[2]), ("delete", None) if new_value is None else ("put", new_value),
                 op.process)
    for watch in history.watches:
        for revision, lkey, kind, value, _ in watch.events:
            note((watch.pkey, lkey, revision), (kind, value), watch.name)
    return changes, found[:VIOLATIONS_PER_RULE_MAX]


def _watches(history: TableHistory) -> list[TableViolation]:
    """Each watch and the ones that resumed it make one logical watch (the user's view): its
    changes are judged together (sim's watchers resume as the library does: from the revision
    of the last change delivered, skipping what was delivered of it, bkcore.table.watch_resume)."""
    changes, found = _known_changes(history)
    writers = _writers(history)
    by_name = {watch.name: watch for watch in history.watches}
    for watch in history.watches:
        previous = by_name.get(watch.resumes) if watch.resumes else None
        if previous is not None:
            stopped_at = previous.events[-1][0] if previous.events else previous.start_after + 1
            if watch.start_after >= stopped_at:
                found.append(TableViolation("watch-gap", f"{watch.name} resumed {previous.name}, which stopped at "
                                                         f"revision {stopped_at}, from above {watch.start_after}"))
    for chain in _resumed_chains(history.watches, by_name):
        found += _watch_alone(chain, writers)
        found += _watch_complete(chain, changes)
    kinds: dict[str, list[TableViolation]] = {}
    for violation in found:
        kinds.setdefault(violation.kind, []).append(violation)
    return [v for kind in sorted(kinds) for v in kinds[kind][:VIOLATIONS_PER_RULE_MAX]]


def _writers(history: TableHistory) -> dict[tuple[bytes, bytes, str, bytes | None], int]:
    """(pkey, lkey, kind, value) -> the earliest invocation of an op that may have made that
    change (a delete's value is None)."""
    writers: dict[tuple[bytes, bytes, str, bytes | None], int] = {}

    def note(pkey: bytes, lkey: bytes, kind: str, value: bytes | None, at_ns: int) -> None:
        key = (pkey, lkey, kind, value)
        writers[key] = min(writers.get(key, at_ns), at_ns)

    for op in history.ops:
        if op.kind == "put":
            note(op.pkey, op.lkeys[0], "put", op.args[0], op.invoked_ns)
            if op.args[1]:
                note(op.pkey, op.lkeys[0], "delete", None, op.invoked_ns)
        elif op.kind in ("delete", "delete-range"):
            for lkey in op.lkeys:
                note(op.pkey, lkey, "delete", None, op.invoked_ns)
        elif op.kind == "txn":
            new_value = op.args[2]
            note(op.pkey, op.lkeys[0], "delete" if new_value is None else "put", new_value, op.invoked_ns)
    return writers


def _watch_alone(watch: WatchLog, writers: dict) -> list[TableViolation]:
    found = []
    newest = watch.start_after
    seen = set()
    for revision, lkey, kind, value, seen_ns in watch.events:
        change = (revision, lkey, kind)
        if change in seen:
            found.append(TableViolation("watch-twice", f"{watch.name} saw {lkey.decode()} at revision {revision} twice"))
        elif revision <= watch.start_after:
            found.append(TableViolation("watch-start", f"{watch.name} started after revision {watch.start_after} but "
                                                       f"saw revision {revision}"))
        elif revision < newest:
            # (One revision may change several keys, in any order: a deleteRange, or expiries
            # carried out before a command.)
            found.append(TableViolation("watch-order", f"{watch.name} saw revision {revision} after {newest}"))
        seen.add(change)
        newest = max(newest, revision)
        written_ns = writers.get((watch.pkey, lkey, kind, value))
        if lkey not in watch.lkeys or written_ns is None or written_ns > seen_ns:
            found.append(TableViolation("watch-invented", f"{watch.name} saw a {kind} of {lkey.decode()} "
                                                          f"({value!r}) at revision {revision} that no op "
                                                          f"invoked before made"))
    return found


def _resumed_chains(watches: list[WatchLog], by_name: dict[str, WatchLog]) -> list[WatchLog]:
    """Every logical watch: a watch nobody resumed, merged with the watches it resumed, back to
    the first (the name lists them all)."""
    resumed = {watch.resumes for watch in watches if watch.resumes}
    chains = []
    for last in watches:
        if last.name in resumed:
            continue
        links = [last]
        while links[0].resumes and links[0].resumes in by_name:
            links.insert(0, by_name[links[0].resumes])
        first = links[0]
        chains.append(WatchLog(" + ".join(link.name for link in links), first.pkey, first.lkeys, first.start_after,
                               first.opened_at_ns, events=[e for link in links for e in link.events]))
    return chains


def _watch_complete(watch: WatchLog, changes: dict) -> list[TableViolation]:
    """Every change of the watched keys from the start up to the newest revision seen; of the
    newest, only what came (the watch may have ended between two changes of one revision)."""
    if not watch.events:
        return []
    newest = max(revision for revision, *_ in watch.events)
    seen = {(revision, lkey, kind) for revision, lkey, kind, *_ in watch.events}
    watched = set(watch.lkeys)
    missed = sorted((revision, lkey, kind) for (pkey, lkey, revision, kind) in changes
                    if pkey == watch.pkey and lkey in watched and watch.start_after < revision < newest
                    and (revision, lkey, kind) not in seen)
    if missed:
        revision, lkey, kind = missed[0]
        return [TableViolation("watch-gap", f"{watch.name} (revisions {watch.start_after + 1}..{newest}) missed "
                                            f"the {kind} of {lkey.decode()} at revision {revision} "
                                            f"and {len(missed) - 1} more")]
    return []


# -- TTLs -----------------------------------------------------------------------------------------

def _ttls(history: TableHistory) -> list[TableViolation]:
    expiries: dict[tuple[bytes, bytes, bytes], tuple[int, int]] = {}    # value's key -> (expired by, ttl)
    for op in history.ops:
        if op.kind == "put" and op.args[1] and op.result is not None:
            value, ttl_ms = op.args
            expiries[(op.pkey, op.lkeys[0], value)] = (
                op.completed_ns + ttl_ms * MS + history.clock_spread_ns + MS, ttl_ms)
    found = []
    for op in history.ops:
        if op.result is None or op.kind not in ("get", "range", "txn") or op.pkey in history.counter_pkeys:
            continue
        for lkey, value in _values_read(op):
            expiry = expiries.get((op.pkey, lkey, value))
            if expiry is not None and op.invoked_ns >= expiry[0]:
                found.append(TableViolation("ttl-expired", f"{op.process} read {lkey.decode()} = {value!r} at "
                                                           f"{op.invoked_ns / 1e9:.3f}s, but its TTL of {expiry[1]} ms "
                                                           f"had passed by {expiry[0] / 1e9:.3f}s"))
    return found[:VIOLATIONS_PER_RULE_MAX]


def _values_read(op: TableOp) -> list[tuple[bytes, bytes]]:
    if op.kind == "get":
        return [(op.lkeys[0], op.result[0])] if op.result[0] is not None else []
    if op.kind == "range":
        return [(lkey, value) for lkey, value, _ in op.result]
    read = op.result[1]
    return [(op.lkeys[0], read[0])] if read is not None and read[0] is not None else []
