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


def test_the_system_share_is_what_the_kernel_spent():
    """A process that only spins spends next to nothing in the kernel; one that copies 1 MiB into
    a pipe's other end, over and over, spends most of its CPU there."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    writer = subprocess.Popen([sys.executable, "-c", "import os\nfd = os.open('/dev/zero', os.O_RDONLY)\n"
                               "while True: os.read(fd, 1 << 20)"])
    try:
        time.sleep(0.5)         # both started (imports done)
        meter = CpuMeter({"spinner": [spinner.pid], "reader": [writer.pid]})
        time.sleep(1.0)
        report = meter.per_operation(1000, "op")
    finally:
        for child in (spinner, writer):
            child.kill()
            child.wait()
    assert report["spinner_system_cpu_us_per_op"] < 0.2 * report["spinner_cpu_us_per_op"]
    assert report["reader_system_cpu_us_per_op"] > 0.5 * report["reader_cpu_us_per_op"]
    assert report["reader_cpu_us_per_op"] > 200
    assert 0 <= report["client_system_cpu_us_per_op"] <= report["client_cpu_us_per_op"]


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


def test_a_group_listed_when_read_charges_the_descendants_found_then():
    """Spark's JVM and Python workers are found below the driver when the meter reads: a spinning
    grandchild is charged to the group; a child left out (a bookie, say) is not, nor what it starts."""
    from bkbench.cpu_usage import descendant_pids
    spin_forever = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'while True: pass']).wait()"
    parent = subprocess.Popen([sys.executable, "-c", spin_forever])
    excluded = subprocess.Popen([sys.executable, "-c", spin_forever])
    try:
        deadline = time.monotonic() + 30
        while not (descendant_pids(parent.pid) and descendant_pids(excluded.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)          # (until both grandchildren run)
        grandchild, = descendant_pids(parent.pid)
        found = descendant_pids(os.getpid(), excluding={excluded.pid})
        assert parent.pid in found and grandchild in found and excluded.pid not in found
        assert not set(descendant_pids(excluded.pid)) & set(found)
        meter = CpuMeter({"below": lambda: descendant_pids(os.getpid(), excluding={excluded.pid})})
        time.sleep(0.6)
        report = meter.per_operation(1000, "row")
    finally:
        for child in (parent, excluded):
            for pid in descendant_pids(child.pid):
                os.kill(pid, 9)
            child.kill()
            child.wait()
    # The grandchild spun: a share of the second (two CPUs, shared with the other spinner and
    # whatever else runs here).
    assert report["below_cpu_us_per_row"] > 50
