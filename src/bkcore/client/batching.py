"""Coalescing pending adds for one bookie into AddBatchRequests, and expanding the answers.

The writer core sends one AddRequest per entry and bookie. A driver that has several queued
for the same bookie replaces each run of consecutive entries of one ledger (same key and
flags, entry ids rising by one) with one AddBatchRequest before writing, and turns the single
AddBatchResponse back into the per-entry AddResponses the core waits for. The core never sees
a batch, so the same writer runs in the simulator and over TCP.
"""

from __future__ import annotations

from typing import Callable

from bkcore.wire import BATCH_ENTRY_COUNT_MAX, AddBatchRequest, AddBatchResponse, AddRequest, AddResponse

# Bodies per batch, in bytes: well under the frame size limit.
BATCH_SIZE_MAX = 2 * 1024 * 1024


def _continues(run: list[AddRequest], message: AddRequest, run_size: int) -> bool:
    last = run[-1]
    return (message.ledger_id == last.ledger_id and message.entry_id == last.entry_id + 1
            and message.master_key == last.master_key and message.is_recovery == last.is_recovery
            and message.is_deferred_sync == last.is_deferred_sync
            and len(run) < BATCH_ENTRY_COUNT_MAX and run_size + len(message.body) <= BATCH_SIZE_MAX)


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
