"""bktransports.stall_recorder: the loop pauses, garbage collections and timed phases a process
keeps, and a real bookie's /api/v1/bookie/stalls over HTTP."""

import gc
import threading
import time

import trio

import bkclient
from inprocess_cluster import free_port
from bktransports import stall_recorder
from bktransports.metrics import read_samples, sample_value
from bktransports.stall_recorder import StallRecorder

from test_http_admin import URI, call


async def test_a_task_step_that_holds_the_loop_is_recorded_with_the_task_and_its_length():
    recorder = stall_recorder.for_current_run()
    assert stall_recorder.for_current_run() is recorder        # one per run, however many ask
    before = time.time()

    async def hog():
        time.sleep(0.03)        # holds the loop: nothing else runs meanwhile

    async with trio.open_nursery() as nursery:
        nursery.start_soon(hog, name="the-hog")
    loops = [event for event in recorder.events if event.kind == "loop" and event.at_s >= before]
    assert [event.detail for event in loops] == ["the-hog"]
    assert 30 <= loops[0].duration_ms < 1000
    assert recorder.longest_since(before)["loop"] >= 30
    later = time.time()
    await trio.sleep(0.01)
    # From `later` on nothing long happened: a longest loop pause, if any, is a short one.
    assert recorder.longest_since(later).get("loop", 0.0) < 30


async def test_garbage_collections_are_recorded_until_the_run_ends():
    recorder = stall_recorder.for_current_run()
    before = time.time() - 1        # a whole second back: short passes count from whole seconds
    gc.collect()
    assert recorder.longest_since(before)["gc"] > 0
    assert recorder._on_gc in gc.callbacks


def test_the_gc_callback_goes_with_its_run():
    recorder = trio.run(_recorder_of_a_run)
    assert recorder._on_gc not in gc.callbacks


async def _recorder_of_a_run():
    return stall_recorder.for_current_run()


def test_phases_timed_in_other_threads_and_events_kept_whatever_their_length():
    recorder = StallRecorder(threshold_ms=5.0)
    before = time.time()

    def journal_thread():
        with recorder.timed("journal_sync"):
            time.sleep(0.02)
        with recorder.timed("journal_write"):
            pass                                # short: counted in its second, not an event
        with recorder.timed("checkpoint", "12 entries", always=True):
            pass                                # short, but always an event

    worker = threading.Thread(target=journal_thread)
    worker.start()
    worker.join()
    kinds = [(event.kind, event.detail) for event in recorder.events]
    assert kinds == [("journal_sync", ""), ("checkpoint", "12 entries")]
    answer = recorder.since(before)
    assert answer["longest_ms"]["journal_sync"] >= 20 and answer["threshold_ms"] == 5.0
    assert [event["kind"] for event in answer["events"]] == ["journal_sync", "checkpoint"]
    assert recorder.since(time.time() + 1)["events"] == []


async def test_a_bookie_answers_its_journal_checkpoint_and_loop_stalls_over_http(start_cluster):
    cluster = await start_cluster(URI, 0)
    await cluster.add_bookie(http_port=free_port(), gc_wait_time_s=3600.0)
    server = cluster.bookies[0].server
    before = time.time() - 1        # a whole second back: short phases count from whole seconds
    async with bkclient.connect(URI) as bk:
        ledger = await bk.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, password=b"pw")
        for _ in range(20):
            await ledger.add(b"x" * 100)
        await ledger.close()
        assert bk.stalls is stall_recorder.for_current_run()    # client and bookie share this loop
    await server.checkpoint()
    status, answer = await call(server.http_port, "GET", f"/api/v1/bookie/stalls?since={before}")
    assert status == 200
    assert answer["longest_ms"]["journal_sync"] > 0 and "journal_write" in answer["longest_ms"]
    checkpoints = [event for event in answer["events"] if event["kind"] == "checkpoint"]
    assert sum(int(event["detail"].split()[0]) for event in checkpoints) == 20    # "N entries" each
    phases = {event["kind"] for event in answer["events"]}
    assert {"entry_log_write", "index_commit"} <= phases
    status, text = await call(server.http_port, "GET", "/metrics")
    samples = read_samples(text)
    assert sample_value(samples, "bookie_stall_longest_ms", kind="journal_sync") > 0
    assert sample_value(samples, "bookie_stall_longest_ms", kind="checkpoint") > 0
    assert "# HELP bookie_stall_longest_ms" in text and "# HELP bookie_stalls_total" in text
    status, refusal = await call(server.http_port, "GET", "/api/v1/bookie/stalls?since=yesterday")
    assert status == 400 and "since must be wall-clock seconds" in str(refusal)
