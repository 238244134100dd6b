"""`bk bench bookie` for half a second per measurement: every figure is there, and the overload
phase (four times maxAddsInProgressLimit in flight) is answered with TOO_MANY_REQUESTS while the
bookie's memory stays bounded."""

import json
import subprocess
import sys


def test_bench_bookie_pushes_back_under_overload_with_bounded_memory(tmp_path):
    completed = subprocess.run([sys.executable, "-m", "bkcli.main", "bench", "bookie", "--seconds", "0.5",
                                "--dir", str(tmp_path)], capture_output=True, text=True, timeout=180)
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    assert [run["entry_size"] for run in report["pipelined"]] == [100, 1024, 65536]
    assert all(run["entries_per_second"] > 0 and run["errors"] == {} for run in report["pipelined"])
    overload = report["overload"]
    assert overload["window"] == 40_000 and overload["entries_per_second"] > 0
    assert overload["errors"].get("TOO_MANY_REQUESTS", 0) > 0
    before, after = overload["bookie_memory_before"]["rss_peak_mib"], overload["bookie_memory"]["rss_peak_mib"]
    assert after < before + 150, (before, after)      # 40 MiB in flight: refused, not queued
