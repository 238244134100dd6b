"""`bk bench failover`: the phase arithmetic, the plot, and one short real run (four bookie
processes, a bookie of the ensemble SIGKILLed half-way: every add still acknowledged, one
ensemble change)."""

import json
import subprocess
import sys

from bkbench.failover import LatencyRun, plot_runs


def test_the_summary_splits_latencies_at_the_kill():
    run = LatencyRun("kill", samples=[(0.1, 0.001), (0.9, 0.002), (1.0, 0.050), (1.5, 0.040), (2.5, 0.003)],
                     killed_at_s=1.0, killed_bookie="127.0.0.1:1", ensemble_change_count=1)
    summary = run.summary()
    assert summary["adds"] == 5 and summary["add_latency_max_ms"] == 50.0
    assert summary["before_kill"]["add_latency_p50_ms"] in (1.0, 2.0)
    assert summary["first_second_after_kill"]["add_latency_p50_ms"] in (40.0, 50.0)
    assert summary["after_that"]["add_latency_p50_ms"] == 3.0
    assert "before_kill" not in LatencyRun("steady", samples=[(0.0, 0.001)]).summary()


def test_the_plot_is_a_png_with_one_panel_per_run(tmp_path):
    runs = [LatencyRun("steady", samples=[(i / 100, 0.001 + i / 1e5) for i in range(100)]),
            LatencyRun("kill", samples=[(i / 100, 0.002) for i in range(100)], killed_at_s=0.5,
                       killed_bookie="127.0.0.1:1")]
    path = plot_runs(runs, str(tmp_path / "plot.png"))
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width == 1000 and height > 500          # two stacked panels


def test_a_short_real_run_loses_no_add_and_changes_the_ensemble_once(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "bkcli.main", "bench", "failover", "--seconds", "2", "--rate", "100",
         "--out", str(tmp_path), "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    report = json.loads(completed.stdout)
    steady, killed = report["runs"].values()
    assert steady["errors"] == 0 and steady["ensemble_changes"] == 0 and steady["adds"] >= 150
    assert killed["errors"] == 0 and killed["ensemble_changes"] == 1 and killed["adds"] >= 150
    assert killed["killed_bookie"] and (tmp_path / "failover.png").exists()
