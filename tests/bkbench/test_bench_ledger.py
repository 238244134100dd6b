"""`bk bench ledger` for a second per measurement on a real 3-bookie cluster: every figure is
there, no add failed, the paced runs kept close to a quarter and half of the pipelined rate, each
phase says what held the client and every bookie up and what a raw disk loop beside it saw, and
the timeline is drawn."""

import json
import subprocess
import sys


def test_bench_ledger_reports_every_measurement(tmp_path):
    timeline = tmp_path / "timeline.png"
    completed = subprocess.run([sys.executable, "-m", "bkcli.main", "bench", "ledger", "--seconds", "1",
                                "--in-flight", "500", "--dir", str(tmp_path), "--timeline", str(timeline)],
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
    quarter = report["quarter_peak_load"]
    assert quarter["target_adds_per_second"] == round(pipelined["adds_per_second"] / 4) and quarter["errors"] == []
    for phase in ("one_at_a_time", "pipelined", "quarter_peak_load", "half_peak_load", "tail_visibility"):
        run = report[phase]
        assert run["client_loop_pause_max_ms"] >= 0 and run["bookies_loop_pause_max_ms"] >= 0, phase
        assert len(run["each_bookie_loop_pause_max_ms"]) == 3 and "bookies_stalls_unreadable" not in run, phase
        assert max(run["each_bookie_loop_pause_max_ms"]) == run["bookies_loop_pause_max_ms"], phase
        assert run["disk_probe_fdatasyncs"] > 0, phase                   # the raw disk loop beside it
        assert run["disk_probe_fdatasync_max_ms"] >= run["disk_probe_fdatasync_p50_ms"] > 0, phase
        assert "disk_probe_stalls" not in run, phase                     # (those go to the timeline)
    assert report["pipelined"]["bookies_journal_sync_max_ms"] > 0         # every bookie syncs its journal
    assert report["timeline"] == str(timeline) and timeline.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    floor = report["disk_quorum_fdatasync"]
    assert (floor["files"], floor["quorum"]) == (3, 2) and floor["rounds_per_second"] > 0
    assert floor["p99_ms"] >= floor["p50_ms"] > 0


def test_disk_ceiling_scales_the_rate_to_the_whole_raw_bandwidth():
    from bkbench.journal import disk_ceiling

    pipelined = {"adds_per_second": 50_000, "device_write_mib_per_second": 250.0}
    assert disk_ceiling(pipelined, 300.0, "adds_per_second") == {"device_write_fraction_of_raw": 0.833,
                                              "disk_bound_adds_per_second": 60_000}
    assert disk_ceiling({"adds_per_second": 50_000}, 300.0, "adds_per_second") == {}     # no device counters here


def test_the_disk_probe_times_syncs_until_stopped_and_counts_the_stalls(tmp_path):
    import time
    from bkbench.disk_probe import STALL_MS, DiskProbe, summarize

    with DiskProbe(str(tmp_path)) as probe:
        time.sleep(0.2)
    assert probe.report["fdatasyncs"] >= 5
    assert probe.report["fdatasync_max_ms"] >= probe.report["fdatasync_p99_ms"] >= probe.report["fdatasync_p50_ms"] > 0
    assert list(tmp_path.iterdir()) == []                  # its file is gone
    summary = summarize([0.001] * 98 + [0.030, 0.500])
    assert (summary["fdatasync_p50_ms"], summary["fdatasync_max_ms"]) == (1.0, 500.0)
    assert summary[f"fdatasyncs_over_{STALL_MS:.0f}_ms"] == 2 and summarize([]) == {"fdatasyncs": 0}
    timed = summarize([0.001, 0.5, 0.001, 0.03], [10.0, 11.0, 12.0, 13.0])
    assert timed["stalls"] == [{"at_s": 11.0, "duration_ms": 500.0}, {"at_s": 13.0, "duration_ms": 30.0}]
    assert "stalls" not in summary and probe.report["stalls"] == [
        stall for stall in probe.report["stalls"] if stall["duration_ms"] >= STALL_MS]
