"""tune_gc() freezes what exists and spaces young collections out (in a process of its own:
the collector's settings are the whole process's)."""

import subprocess
import sys


def test_tune_gc_freezes_startup_objects_and_raises_the_young_threshold():
    script = ("import gc; from bktransports.gc_tuning import tune_gc, YOUNG_THRESHOLD; "
              "before = gc.get_threshold(); tune_gc(); "
              "print(before[0], gc.get_threshold()[0], YOUNG_THRESHOLD, gc.get_freeze_count())")
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    before, after, expected, frozen = map(int, completed.stdout.split())
    assert before == 700 and after == expected
    assert frozen > 1000       # the modules and classes imported so far
