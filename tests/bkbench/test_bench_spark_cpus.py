"""`bk bench spark --split-cpus` pins processes to CPUs thread by thread (bkbench.spark.pin_threads):
a thread that ends between the listing and its pinning is skipped, not a crash (it was one: a
run failed with ProcessLookupError)."""

import os
import subprocess
import sys

import pytest

from bkbench import spark

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux CPU affinity")


def test_every_thread_of_the_process_is_pinned_and_a_thread_gone_meanwhile_is_skipped(monkeypatch):
    child = subprocess.Popen([sys.executable, "-c", "import threading, time\n"
                              "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
                              "print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        listed = os.listdir(f"/proc/{child.pid}/task")
        assert len(listed) == 2
        gone = str(2 ** 22 + 7)                  # above any pid this kernel hands out: no such thread
        listing = os.listdir
        monkeypatch.setattr(spark.os, "listdir", lambda path: [*listing(path), gone])
        cpu = min(os.sched_getaffinity(0))
        spark.pin_threads(child.pid, {cpu})
        assert all(os.sched_getaffinity(int(thread)) == {cpu} for thread in listed)
    finally:
        child.kill()
        child.wait()
