"""A Wing-Gong linearizability search over the history of one object, for any sequential model.

Used by the simulator's raft-lite register check (sim.raftlite_world) and by the jepsen-like
harness's per-key table check (bkjepsen.checkers). The caller gives the operations (anything
with `invoked_ns`, `completed_ns` and `result`; `result is None` means the outcome is unknown,
as for a timed-out call) and a model: `step(state, op)` returns the state after `op` when `op`
with its recorded result is legal in `state`, else None.

Is there an order of the operations, each placed between its invocation and its completion
(unanswered ones: any time after invocation, or never), that the model explains? One pruning
keeps unknown outcomes cheap: an unanswered operation that would not change the state is never
placed, since leaving it out is the same history. Failed (remaining, state) pairs are memoized.
The search is iterative (no recursion limit) and bounded by `step_budget` model steps: past it,
SearchBudgetExceeded says the history was too hard to judge, never that it was right or wrong.
"""

from __future__ import annotations

from typing import Callable, Hashable, Sequence


class SearchBudgetExceeded(Exception):
    """The search took more than its step budget; the history is not judged."""


def check_linearizable(ops: Sequence, initial: Hashable, step: Callable[[Hashable, object], Hashable | None], *,
                       step_budget: int = 2_000_000) -> bool:
    assert step_budget > 0
    order = sorted(range(len(ops)), key=lambda i: (ops[i].invoked_ns, i))
    failed: set = set()          # (remaining, state) pairs known to lead nowhere
    steps = 0
    # Each frame: (remaining, state, candidates still to try from this frame).
    start = frozenset(range(len(ops)))
    if not _has_answered(ops, start):
        return True
    stack = [(start, initial, iter(_candidates(ops, order, start)))]
    while stack:
        remaining, state, candidates = stack[-1]
        pushed = False
        for i in candidates:
            steps += 1
            if steps > step_budget:
                raise SearchBudgetExceeded(f"more than {step_budget} steps over {len(ops)} operations")
            op = ops[i]
            after = step(state, op)
            if after is None or (op.result is None and after == state):
                continue
            rest = remaining - {i}
            if not _has_answered(ops, rest):
                return True
            if (rest, after) in failed:
                continue
            stack.append((rest, after, iter(_candidates(ops, order, rest))))
            pushed = True
            break
        if not pushed:
            failed.add((remaining, state))
            stack.pop()
    return False


def _has_answered(ops: Sequence, remaining: frozenset) -> bool:
    return any(ops[i].result is not None for i in remaining)


def _candidates(ops: Sequence, order: list[int], remaining: frozenset) -> list[int]:
    """The operations that may come next: invoked before the earliest completion of an answered
    one. Answered ones are tried first: an unanswered one is placed only when the answers need it,
    which keeps histories with many unknown writes from exploring every placement of them."""
    horizon_ns = min(ops[i].completed_ns for i in remaining if ops[i].result is not None)
    answered, unanswered = [], []
    for i in order:
        if i not in remaining:
            continue
        if ops[i].invoked_ns > horizon_ns:
            break
        (answered if ops[i].result is not None else unanswered).append(i)
    return answered + unanswered
