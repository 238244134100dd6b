"""CpuMeter against work whose CPU is known: a child process that spins, and one that sleeps."""

import os
import subprocess
import sys
import time

from bkbench.cpu_usage import CpuMeter, machine_cpu_ticks, process_cpu_s


def spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_meter_charges_each_process_what_it_used():
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.5)         # both started (imports done)
        meter = CpuMeter({"spinner": [spinner.pid], "sleeper": [sleeper.pid]})
        spin(0.3)
        time.sleep(0.7)
        report = meter.per_operation(1000, "add")
    finally:
        spinner.kill()
        sleeper.kill()
        spinner.wait()
        sleeper.wait()
    # This process spun 0.3 s: 300 us for each of 1000 adds (and a little for the meter).
    assert 290 <= report["client_cpu_us_per_add"] < 400
    # The spinner had a CPU for most of the second (two CPUs here, three busy at times).
    assert report["spinner_cpu_us_per_add"] > 400
    assert report["sleeper_cpu_us_per_add"] < 50
    assert 0 < report["machine_cpu_busy_fraction"] <= 1


def test_a_process_that_is_gone_is_left_out_not_guessed():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    meter = CpuMeter({"gone": [child.pid]})
    report = meter.per_operation(0, "op")
    assert "gone_cpu_us_per_op" not in report and "client_cpu_us_per_op" in report


def test_machine_ticks_and_process_seconds_only_grow():
    busy, total = machine_cpu_ticks()
    spin(0.05)
    later_busy, later_total = machine_cpu_ticks()
    assert 0 <= busy <= total and later_busy >= busy and later_total >= total
    assert process_cpu_s(os.getpid()) > 0
