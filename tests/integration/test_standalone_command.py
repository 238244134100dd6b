"""`bk standalone` as a user runs it: started, ready, stopped by SIGINT with nothing left behind."""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

from bklocal.processes import free_ports


def _two_consecutive_free_ports() -> int:
    """A port P such that P and P + 1 are free now."""
    while True:
        port = free_ports(1)[0]
        try:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue


def _start_in_background(data_dir, *, http_port: int = 0) -> tuple[subprocess.Popen, list[str]]:
    """`bk standalone` as a shell starts a background job: SIGINT ignored (then Python raises
    no KeyboardInterrupt). Its output lines gather in the list."""
    bookie_port, metastore_port = free_ports(2)
    process = subprocess.Popen(
        [sys.executable, "-m", "bkcli.main", "standalone", "--data-dir", str(data_dir),
         "--bookies", "1", "--metastore-nodes", "1", "--bookie-port", str(bookie_port),
         "--metastore-port", str(metastore_port), "--http-port", str(http_port), "--stream-storage-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True).start()
    return process, lines


def _wait_for_line(process, lines: list[str], starts_with: str) -> None:
    deadline = time.monotonic() + 90
    while not any(line.startswith(starts_with) for line in lines):
        assert process.poll() is None and time.monotonic() < deadline, "".join(lines)
        time.sleep(0.02)


def _processes_naming(text: str) -> list[str]:
    """The command lines of running processes that mention `text` (a data directory)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                command = file.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in command:
            found.append(command)
    return found


def _stop(process) -> None:
    if process.poll() is None:
        process.terminate()           # SIGTERM: it stops its children too
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()


def test_sigint_stops_the_cluster_even_when_started_with_sigint_ignored(tmp_path):
    http_port = _two_consecutive_free_ports()
    process, lines = _start_in_background(tmp_path / "standalone", http_port=http_port)
    try:
        _wait_for_line(process, lines, "ready.")
        # Where each process's metrics are: the bookie's on the first HTTP port, the node's next.
        for name, port, family in (("bookie 1", http_port, "bookie_SERVER_STATUS"),
                                   ("metastore node 1", http_port + 1, "metastore_raft_term")):
            assert any(line.startswith(f"  {name}: ") and f", metrics http://127.0.0.1:{port}/metrics" in line
                       for line in lines), "".join(lines)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
                assert f"# TYPE {family} gauge" in response.read().decode()
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0, "".join(lines)
        time.sleep(0.2)                  # (the reader thread takes the last lines)
        assert any("stopping" in line for line in lines), "".join(lines)
        assert _processes_naming(str(tmp_path)) == []
    finally:
        _stop(process)


def test_sigint_while_starting_stops_what_started_and_leaves_nothing_running(tmp_path):
    """Asked to stop before it is ready (the metastore is up, the bookie still starting), it
    stops at once: the bookie it was waiting for too."""
    process, lines = _start_in_background(tmp_path / "standalone")
    try:
        _wait_for_line(process, lines, "  metastore node 1:")
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0, "".join(lines)
        time.sleep(0.2)
        assert not any(line.startswith("ready.") for line in lines), "".join(lines)
        assert _processes_naming(str(tmp_path)) == []
    finally:
        _stop(process)


def test_without_the_grpc_extra_it_starts_without_stream_storage_and_says_so(tmp_path):
    bookie_port, metastore_port, storage_port = free_ports(3)
    hide_grpc = "import sys; sys.modules['grpc'] = None; from bkcli.main import main; sys.exit(main(sys.argv[1:]))"
    process = subprocess.Popen(
        [sys.executable, "-c", hide_grpc, "standalone", "--data-dir", str(tmp_path / "standalone"),
         "--bookies", "1", "--metastore-nodes", "1", "--bookie-port", str(bookie_port),
         "--metastore-port", str(metastore_port), "--http-port", "0", "--stream-storage-port", str(storage_port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True).start()
    try:
        _wait_for_line(process, lines, "ready.")
        assert any(line.startswith("bk standalone: starting without stream storage: stream storage needs the "
                                   "'grpc' extra") for line in lines), "".join(lines)
        assert not any("stream storage (tables, gRPC)" in line for line in lines), "".join(lines)
    finally:
        _stop(process)
