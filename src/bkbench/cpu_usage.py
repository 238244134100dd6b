"""CPU a benchmark's measurement used: this process, named groups of other processes (a
cluster's bookies), and the whole machine, read from Linux's /proc. Where /proc cannot be read
the figures that need it are left out of the report, never guessed.

    meter = CpuMeter({"bookies": [pid, ...]})
    ... the measured work ...
    report.update(meter.per_operation(adds, "add"))
    # {"client_cpu_us_per_add": ..., "bookies_cpu_us_per_add": ..., "machine_cpu_busy_fraction": ...,
    #  "bookies_system_cpu_us_per_add": ...}

Each group's CPU is also given as its system (kernel) share: what its syscalls cost (fdatasync,
socket reads and writes, epoll), which no change to the program's own code takes away, only
fewer syscalls.

The machine's busy fraction is of all its CPUs together (0.5 on two CPUs: one CPU's worth),
counting whatever else ran meanwhile.
"""

from __future__ import annotations

import os
import resource
from typing import Callable


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux)."""
    user_s, system_s = process_user_system_s(pid)
    return user_s + system_s


def process_user_system_s(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds a process has used so far (Linux)."""
    with open(f"/proc/{pid}/stat") as file:
        fields = file.read().rsplit(")", 1)[1].split()
    ticks_per_s = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks_per_s, int(fields[12]) / ticks_per_s


def _user_system_s_or_zero(pid: int) -> tuple[float, float]:
    try:
        return process_user_system_s(pid)
    except (OSError, IndexError, ValueError):
        return 0.0, 0.0


def _summed(readings) -> tuple[float, float]:
    user_s = system_s = 0.0
    for user, system in readings:
        user_s += user
        system_s += system
    return user_s, system_s


def machine_cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) clock ticks of all CPUs since boot, or None where /proc/stat is missing.
    Idle and iowait count as not busy; guest time is inside user time already."""
    try:
        with open("/proc/stat") as file:
            fields = [int(value) for value in file.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    if len(fields) < 5:
        return None
    total = sum(fields)
    return total - fields[3] - fields[4], total


def descendant_pids(root: int, *, excluding: set[int] = frozenset()) -> list[int]:
    """The processes below `root` (children, their children...), leaving out `excluding` and
    everything below those (Linux; [] where /proc cannot be read)."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as file:
                parent = int(file.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(name))
    found, waiting = [], [root]
    while waiting:
        for child in children.get(waiting.pop(), []):
            if child not in excluding:
                found.append(child)
                waiting.append(child)
    return found


class CpuMeter:
    """CPU used from its creation (or its last restart()) to per_operation(): of this process
    ("client"), of each named group of processes, and the machine's busy fraction. A group is a
    list of pids, or a function that lists them when read (processes that come and go, such as
    Spark's Python workers: the CPU of one that ended before the reading is not counted)."""

    def __init__(self, processes: dict[str, list[int] | Callable[[], list[int]]] | None = None) -> None:
        self._processes = processes or {}
        self.restart()

    def restart(self) -> None:
        """Measure from now on (what ran before, setting up, is left out)."""
        self._started = self._read_processes()
        self._machine_started = machine_cpu_ticks()

    def _read_processes(self) -> dict[str, tuple[float, float] | None]:
        """(user, system) CPU seconds so far of this process ("client") and of each group (None
        if unreadable)."""
        usage = resource.getrusage(resource.RUSAGE_SELF)    # (to the microsecond; os.times() ticks)
        readings: dict[str, tuple[float, float] | None] = {"client": (usage.ru_utime, usage.ru_stime)}
        for name, pids in self._processes.items():
            if callable(pids):
                readings[name] = _summed(map(_user_system_s_or_zero, pids()))
                continue
            try:
                readings[name] = _summed(map(process_user_system_s, pids))
            except (OSError, IndexError, ValueError):   # gone, or no /proc
                readings[name] = None
        return readings

    def per_operation(self, count: int, unit: str) -> dict:
        """{"<name>_cpu_us_per_<unit>": ..., "<name>_system_cpu_us_per_<unit>": ...} for this
        process and every group, and "machine_cpu_busy_fraction", over `count` operations done
        since the meter started."""
        now = self._read_processes()
        count = max(count, 1)
        report = {}
        for name, started in self._started.items():
            ended = now[name]
            if started is not None and ended is not None:
                user_s, system_s = ended[0] - started[0], ended[1] - started[1]
                report[f"{name}_cpu_us_per_{unit}"] = round((user_s + system_s) / count * 1e6, 2)
                report[f"{name}_system_cpu_us_per_{unit}"] = round(system_s / count * 1e6, 2)
        machine_now = machine_cpu_ticks()
        if self._machine_started is not None and machine_now is not None and machine_now[1] > self._machine_started[1]:
            busy_ticks = machine_now[0] - self._machine_started[0]
            report["machine_cpu_busy_fraction"] = round(busy_ticks / (machine_now[1] - self._machine_started[1]), 3)
        return report
