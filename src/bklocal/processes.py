"""Starting `bk bookie` (and other bk services) as child processes on this machine.

One place for what standalone, the benchmarks, the jepsen-like harness and the real-process
tests all do: write a TOML config, start `python -m bkcli.main bookie --config ...` with its
output in a log file, wait for its "listening on" line, and stop it with SIGTERM (or SIGKILL
when a test wants a crash).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Iterable


# Ports handed to servers come from below the kernel's ephemeral range: a port inside it can be
# taken, while its server is down (a restart, a killed node), as the source port of any
# outgoing connection on the machine, and the server then cannot listen on it again (a jepsen
# run's restarted metastore node failed so: "Address already in use").
_PORT_FLOOR = 10000
_PORT_ATTEMPT_COUNT_MAX = 10_000


def _ephemeral_port_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as file:
            return int(file.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768          # Linux's default low end


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int, *, excluding: Iterable[int] = ()) -> list[int]:
    """`count` distinct ports free now, below the ephemeral range when there is room there, and
    none of `excluding` (ports chosen earlier for something that does not listen yet). Every
    probe stays bound until all are chosen (the kernel may hand a just-released port out again)."""
    low = _ephemeral_port_low()
    chooser = random.Random()           # seeded from os.urandom: nothing here is simulated
    excluded = set(excluding)
    probes: list[socket.socket] = []
    held: list[socket.socket] = []      # excluded ports the kernel picked: kept bound till the end
    try:
        for _ in range(_PORT_ATTEMPT_COUNT_MAX if low - _PORT_FLOOR >= 1000 else 0):
            if len(probes) == count:
                break
            port = chooser.randrange(_PORT_FLOOR, low)
            if port in excluded:
                continue
            probe = socket.socket()
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:             # in use, or held by a connection in TIME_WAIT
                probe.close()
                continue
            probes.append(probe)
        while len(probes) < count:      # no room below the range: any port the kernel picks
            probe = socket.socket()
            probe.bind(("127.0.0.1", 0))
            (held if probe.getsockname()[1] in excluded else probes).append(probe)
        return [probe.getsockname()[1] for probe in probes]
    finally:
        for probe in probes + held:
            probe.close()


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_toml(path: str, values: dict) -> None:
    with open(path, "w") as file:
        for key, value in values.items():
            file.write(f"{key} = {_toml_value(value)}\n")


@dataclass
class ChildProcess:
    name: str
    process: subprocess.Popen
    log_path: str
    port: int

    def is_running(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, line_count: int = 30) -> str:
        try:
            with open(self.log_path, errors="replace") as file:
                return "".join(file.readlines()[-line_count:])
        except OSError:
            return ""

    def log_since(self, offset: int) -> str:
        """What the log gained after `offset` bytes (this run's lines, when the log is reused)."""
        try:
            with open(self.log_path, "rb") as file:
                file.seek(offset)
                return file.read().decode(errors="replace")
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed."""
        if self.is_running():
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM and wait (SIGKILL if it will not stop)."""
        if self.is_running():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _stop_signals_held():
    """SIGINT and SIGTERM held while a child is started: one that arrives then (a Ctrl-C as
    `bk standalone` starts its bookies) would otherwise interrupt the start after the fork and
    before the caller has the child to stop, leaving it running. Inside, the handlers only note
    the signal; on leaving they are back; release() then sends each noted signal again, to be
    handled where the caller can stop the child. (Handlers are the main thread's: elsewhere
    nothing is held.)"""
    noted: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    previous = {number: signal.signal(number, lambda number, _frame: noted.append(number))
                for number in _STOP_SIGNALS}

    def release() -> None:
        for number in noted:
            os.kill(os.getpid(), number)
        noted.clear()
    try:
        yield release
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def spawn_bk(name: str, argv: list[str], *, log_path: str, port: int, ready_text: str,
             timeout_s: float = 60.0, env: dict | None = None) -> ChildProcess:
    """Start `bk <argv>` and wait until its log shows ready_text (written by this run: a log
    kept from an earlier run of the same process, restarted on its data, is appended to)."""
    log = open(log_path, "ab")
    run_start = log.tell()
    environment = {**os.environ, **(env or {})}
    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    environment["PYTHONPATH"] = src + (os.pathsep + environment["PYTHONPATH"] if environment.get("PYTHONPATH") else "")
    with _stop_signals_held() as release:
        try:
            process = subprocess.Popen([sys.executable, "-m", "bkcli.main", *argv], stdout=log,
                                       stderr=subprocess.STDOUT, env=environment, start_new_session=True)
        finally:
            log.close()
        child = ChildProcess(name, process, log_path, port)
    deadline = time.monotonic() + timeout_s
    try:
        release()             # a stop asked for while the child was being started: now, below
        while time.monotonic() < deadline:
            if ready_text in child.log_since(run_start):
                return child
            if not child.is_running():
                raise RuntimeError(f"{name} exited with status {process.returncode} before it was ready; "
                                   f"its log ({log_path}) ends:\n{child.log_tail()}")
            time.sleep(0.05)
    except BaseException:
        child.stop()          # (a stop asked for meanwhile, Ctrl-C: the caller never gets the child to stop)
        raise
    child.kill()
    raise RuntimeError(f"{name} was not ready after {timeout_s}s; its log ({log_path}) ends:\n{child.log_tail()}")


def spawn_bookie(*, data_dir: str, metastore_uri: str, port: int = 0, extra: dict | None = None,
                 timeout_s: float = 60.0, env: dict | None = None) -> ChildProcess:
    """A `bk bookie` child on 127.0.0.1 with its config and log in data_dir (`env`: variables
    added to its environment, e.g. BK_bookieAuthSecret, kept out of the config file)."""
    os.makedirs(data_dir, exist_ok=True)
    port = port or free_port()
    config_path = os.path.join(data_dir, "bookie.toml")
    write_toml(config_path, {"metadataServiceUri": metastore_uri, "dataDir": data_dir, "bookiePort": port,
                             **(extra or {})})
    return spawn_bk(f"bookie 127.0.0.1:{port}", ["bookie", "--config", config_path],
                    log_path=os.path.join(data_dir, "bookie.log"), port=port, ready_text="listening on",
                    timeout_s=timeout_s, env=env)
