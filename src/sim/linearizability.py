"""A Wing-Gong linearizability search over the history of one object, for any sequential model.

Used by the simulator's raft-lite register check (bksim.raftlite_world) and by the jepsen-like
harness's per-key table check (bkjepsen.checkers). The caller gives the operations (anything
with `invoked_ns`, `completed_ns` and `result`; `result is None` means the outcome is unknown,
as for a timed-out call) and a model: `step(state, op)` returns the state after `op` when `op`
with its recorded result is legal in `state`, else None.

Is there an order of the operations, each placed between its invocation and its completion
(unanswered ones: any time after invocation, or never), that the model explains? Two prunings
keep unknown outcomes cheap: an unanswered operation that would not change the state is never
placed, since leaving it out is the same history; and, given `effect_of`, of the unanswered
operations already invoked that do the same thing (equal effect_of(op): the same increment of
the same key, say) only the earliest is tried, since any other of them is bound by nothing the
earliest is not (neither has a completion to respect) and leads to the same states. Without it,
a burst of timed-out increments made the search try every subset of them. Failed
(remaining, state) pairs are memoized.
The search is iterative (no recursion limit) and bounded by `step_budget` model steps: past it,
SearchBudgetExceeded says the history was too hard to judge, never that it was right or wrong.
"""

from __future__ import annotations

from typing import Callable, Hashable, Sequence


class SearchBudgetExceeded(Exception):
    """The search took more than its step budget; the history is not judged."""


def check_linearizable(ops: Sequence, initial: Hashable, step: Callable[[Hashable, object], Hashable | None], *,
                       step_budget: int = 2_000_000,
                       effect_of: Callable[[object], Hashable] | None = None) -> bool:
    assert step_budget > 0
    order = sorted(range(len(ops)), key=lambda i: (ops[i].invoked_ns, i))
    # The answered operations by completion time: the first still remaining sets the horizon.
    by_completion = sorted((i for i in range(len(ops)) if ops[i].result is not None),
                           key=lambda i: (ops[i].completed_ns, i))
    failed: set = set()          # (remaining, state) pairs known to lead nowhere
    steps = 0
    start = frozenset(range(len(ops)))
    if not by_completion:
        return True
    # Each frame: (remaining, state, how many answered ones remain, candidates still to try).
    stack = [(start, initial, len(by_completion), iter(_candidates(ops, order, by_completion, start, effect_of)))]
    while stack:
        remaining, state, answered_left, candidates = stack[-1]
        pushed = False
        for i in candidates:
            steps += 1
            if steps > step_budget:
                raise SearchBudgetExceeded(f"more than {step_budget} steps over {len(ops)} operations")
            op = ops[i]
            after = step(state, op)
            is_answered = op.result is not None
            if after is None or (not is_answered and after == state):
                continue
            left = answered_left - 1 if is_answered else answered_left
            if not left:
                return True
            rest = remaining - {i}
            if (rest, after) in failed:
                continue
            stack.append((rest, after, left, iter(_candidates(ops, order, by_completion, rest, effect_of))))
            pushed = True
            break
        if not pushed:
            failed.add((remaining, state))
            stack.pop()
    return False


def kind_and_args(op) -> Hashable:
    """An effect_of for operations that say what they do in `kind` and `args`."""
    return op.kind, repr(op.args)


def _candidates(ops: Sequence, order: list[int], by_completion: list[int], remaining: frozenset,
                effect_of: Callable[[object], Hashable] | None) -> list[int]:
    """The operations that may come next: invoked before the earliest completion of an answered
    one. Answered ones are tried first: an unanswered one is placed only when the answers need it,
    which keeps histories with many unknown writes from exploring every placement of them. Of
    unanswered ones with the same effect, only the earliest invoked (see the module's doc)."""
    horizon_ns = next(ops[i].completed_ns for i in by_completion if i in remaining)
    answered, unanswered = [], []
    effects_seen: set = set()
    for i in order:
        if i not in remaining:
            continue
        op = ops[i]
        if op.invoked_ns > horizon_ns:
            break
        if op.result is not None:
            answered.append(i)
        elif effect_of is None:
            unanswered.append(i)
        else:
            effect = effect_of(op)
            if effect not in effects_seen:
                effects_seen.add(effect)
                unanswered.append(i)
    return answered + unanswered
