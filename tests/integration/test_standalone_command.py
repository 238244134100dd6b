"""`bk standalone` as a user runs it: started, ready, stopped by SIGINT with nothing left behind."""

import signal
import subprocess
import sys
import threading
import time

from bklocal.processes import free_ports


def test_sigint_stops_the_cluster_even_when_started_with_sigint_ignored(tmp_path):
    """A shell starts background jobs with SIGINT ignored (then Python raises no
    KeyboardInterrupt); `bk standalone` still stops cleanly on it."""
    bookie_port, metastore_port = free_ports(2)
    process = subprocess.Popen(
        [sys.executable, "-m", "bkcli.main", "standalone", "--data-dir", str(tmp_path / "standalone"),
         "--bookies", "1", "--metastore-nodes", "1", "--bookie-port", str(bookie_port),
         "--metastore-port", str(metastore_port), "--http-port", "0", "--stream-storage-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 90
        while not any(line.startswith("ready.") for line in lines):
            assert process.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0, "".join(lines)
        reader.join(timeout=10)
        assert any("stopping" in line for line in lines), "".join(lines)
    finally:
        if process.poll() is None:
            process.terminate()           # SIGTERM: it stops its children too
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
