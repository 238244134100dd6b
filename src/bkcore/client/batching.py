"""Runs of adds for one bookie as AddBatchRequests: the rule for what may share a batch, and
the drivers' coalescing of single AddRequests.

The writer core sends everything it has for a bookie at once: the adds pushed since effects
were last taken leave as one AddBatchRequest per run of consecutive entries (batch_may_grow
says where a run ends), and a lone entry as an AddRequest. A driver may still hold several
AddRequests for one bookie that left the core at different times (one-at-a-time adds from
many tasks); it replaces each run of them with an AddBatchRequest of its own before writing,
under a request id from DRIVER_BATCH_ID_BASE up, and turns the single answer back into the
per-entry AddResponses the core waits for. The core's own batches are answered straight to it.
"""

from __future__ import annotations

from typing import Callable

from bkcore.wire import BATCH_ENTRY_COUNT_MAX, AddBatchRequest, AddBatchResponse, AddRequest, AddResponse

# Bodies per batch, in bytes: well under the frame size limit.
BATCH_SIZE_MAX = 2 * 1024 * 1024
# Request ids of the batches drivers make: far above any the core gives (it counts from 1), so
# an answer is never taken for the other's.
DRIVER_BATCH_ID_BASE = 1 << 61


def batch_fits(count: int, size: int) -> bool:
    """Whether `count` consecutive entries of one ledger, `size` bytes of bodies, make one batch."""
    return count <= BATCH_ENTRY_COUNT_MAX and size <= BATCH_SIZE_MAX


def batch_may_grow(count: int, size: int, last_entry_id: int, entry_id: int, body_size: int) -> bool:
    """Whether a run of `count` entries (`size` bytes of bodies, the last `last_entry_id`) of
    one ledger may take entry `entry_id` of `body_size` bytes into the same batch."""
    return entry_id == last_entry_id + 1 and batch_fits(count + 1, size + body_size)


def _continues(run: list[AddRequest], message: AddRequest, run_size: int) -> bool:
    last = run[-1]
    return (message.ledger_id == last.ledger_id and message.master_key == last.master_key
            and message.is_recovery == last.is_recovery and message.is_deferred_sync == last.is_deferred_sync
            and batch_may_grow(len(run), run_size, last.entry_id, message.entry_id, len(message.body)))


def coalesce_adds(messages: list, new_batch_id: Callable[[], int],
                  batches: dict[int, list[AddRequest]]) -> list:
    """`messages` with runs of two or more AddRequests replaced by AddBatchRequests; each
    batch's requests are recorded in `batches` under its new request id."""
    out: list = []
    run: list[AddRequest] = []
    run_size = 0

    def close_run() -> None:
        if len(run) == 1:
            out.append(run[0])
        elif run:
            batch_id = new_batch_id()
            first = run[0]
            batches[batch_id] = list(run)
            out.append(AddBatchRequest(batch_id, first.ledger_id, first.entry_id, first.master_key,
                                       [r.body for r in run], first.is_recovery, first.is_deferred_sync))

    for message in messages:
        if type(message) is AddRequest:
            if run and _continues(run, message, run_size):
                run.append(message)
                run_size += len(message.body)
                continue
            close_run()
            run, run_size = [message], len(message.body)
        else:
            if run:             # (reads come in long runs of their own: no call for each)
                close_run()
                run, run_size = [], 0
            out.append(message)
    close_run()
    return out


def expand_batch_response(response: AddBatchResponse, requests: list[AddRequest]) -> list[AddResponse]:
    """The per-entry answers a batch's answer stands for (one code for all of them)."""
    return [AddResponse(r.request_id, response.code, r.ledger_id, r.entry_id) for r in requests]
