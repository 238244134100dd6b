"""`bk bench ledger` for a second per measurement on a real 3-bookie cluster: every figure is
there, no add failed, and the paced run kept close to half of the pipelined rate."""

import json
import subprocess
import sys


def test_bench_ledger_reports_every_measurement(tmp_path):
    completed = subprocess.run([sys.executable, "-m", "bkcli.main", "bench", "ledger", "--seconds", "1",
                                "--in-flight", "500", "--dir", str(tmp_path)],
                               capture_output=True, text=True, timeout=180)
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    assert report["one_at_a_time"]["adds"] > 0 and report["one_at_a_time"]["add_latency_p50_ms"] > 0
    pipelined, paced = report["pipelined"], report["half_peak_load"]
    assert pipelined["errors"] == [] and paced["errors"] == []
    for run in (pipelined, paced):
        assert run["client_cpu_us_per_add"] > 0 and run["bookies_cpu_us_per_add"] > 0
        assert 0 < run["machine_cpu_busy_fraction"] <= 1
    assert paced["target_adds_per_second"] == round(pipelined["adds_per_second"] / 2)
    assert paced["adds"] >= 0.5 * paced["target_adds_per_second"]          # one second at the target rate
    assert paced["add_latency_p99_ms"] >= paced["add_latency_p50_ms"] > 0
    assert report["tail_visibility"]["entries"] > 0
    floor = report["disk_quorum_fdatasync"]
    assert (floor["files"], floor["quorum"]) == (3, 2) and floor["rounds_per_second"] > 0
    assert floor["p99_ms"] >= floor["p50_ms"] > 0


def test_disk_ceiling_scales_the_rate_to_the_whole_raw_bandwidth():
    from bkbench.journal import disk_ceiling

    pipelined = {"adds_per_second": 50_000, "device_write_mib_per_second": 250.0}
    assert disk_ceiling(pipelined, 300.0, "adds_per_second") == {"device_write_fraction_of_raw": 0.833,
                                              "disk_bound_adds_per_second": 60_000}
    assert disk_ceiling({"adds_per_second": 50_000}, 300.0, "adds_per_second") == {}     # no device counters here
