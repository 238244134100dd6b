"""Real disk: a bookie process writing to real files (fdatasync, lmdb) is killed with SIGKILL
mid-load, several times; after each restart every acknowledged entry reads back intact.
SIGKILL keeps the kernel's page cache, so this proves recovery from a process crash on real
files; lost or misordered fsyncs are caught by the power-loss crash points in
tests/sim/test_crash_points.py, where unsynced bytes really vanish."""

import os
import random
import signal
import subprocess
import sys
import time

from bookie_worker import entry_body, open_stack

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(os.path.dirname(HERE)), "src")


def run_and_kill(root: str, ledger_id: int, acks_before_kill: int) -> list[tuple[int, int]]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, HERE, os.environ.get("PYTHONPATH", "")]))
    worker = subprocess.Popen([sys.executable, os.path.join(HERE, "bookie_worker.py"), root, str(ledger_id),
                               str(ledger_id * 1000)], stdout=subprocess.PIPE, text=True, env=env)
    acked = []
    deadline = time.monotonic() + 60
    try:
        for line in worker.stdout:
            _, ledger, entry = line.split()
            acked.append((int(ledger), int(entry)))
            if len(acked) >= acks_before_kill or time.monotonic() > deadline:
                break
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
    # Acks the worker printed after we stopped reading still count: they were acknowledged.
    for line in worker.stdout.read().splitlines():
        _, ledger, entry = line.split()
        acked.append((int(ledger), int(entry)))
    return acked


def test_sigkill_mid_load_loses_no_acknowledged_entry(tmp_path):
    root = str(tmp_path / "bookie")
    rng = random.Random(7)
    all_acked = []
    for round_index in range(1, 5):
        acked = run_and_kill(root, ledger_id=round_index, acks_before_kill=rng.randint(50, 1500))
        assert acked, "the worker acknowledged nothing"
        all_acked.extend(acked)
        stack = open_stack(root, now_ms=10**9 + round_index)
        for ledger_id, entry_id in all_acked:
            assert stack.storage.get_entry(ledger_id, entry_id) == entry_body(ledger_id, entry_id), (ledger_id, entry_id)
        stack.storage.checkpoint()   # a clean restart in between, as an operator's would be
        stack.storage.index.close()
        stack.fs.close()
