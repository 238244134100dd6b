"""`bk bench all`: headline figures picked out of the benchmarks' JSON, judged against their
targets (on the figure or on its ratio to the same run's baseline), and one real run of the
two quickest benchmarks through fresh interpreters."""

import json
import subprocess
import sys

from bkbench.all_benchmarks import dig, headline_rows, render_markdown


def test_dig_follows_dicts_and_list_indexes_and_returns_only_numbers():
    report = {"journal": [{"mib": 1.5}, {"mib": 2}], "name": "x", "flag": True}
    assert dig(report, "journal.1.mib") == 2
    assert dig(report, "journal.5.mib") is None and dig(report, "name") is None and dig(report, "flag") is None


def test_targets_are_judged_on_the_figure_or_on_its_ratio_to_the_baseline():
    benchmarks = {"journal": {"raw_sequential": {"mib_per_second": 100.0},
                              "journal": [{}, {"mib_per_second": 30.0}, {"mib_per_second": 90.0}],
                              "journal_batched": [{}, {"mib_per_second": 65.0}, {}],
                              "journal_one_add_per_group": {"add_latency_p50_ms": 0.7},
                              "raw_fdatasync": {"p50_ms": 0.3}}}
    rows = {row["figure"]: row for row in headline_rows(benchmarks)}
    assert all(row["benchmark"] == "journal" for row in rows.values())     # others were not run
    one_kib = rows["journal path, 1 KiB adds in batches (MiB/s)"]
    assert (one_kib["ratio"], one_kib["met"]) == (0.65, False)
    single = rows["journal path, 1 KiB single adds (MiB/s)"]
    assert (single["ratio"], single["met"], single["target"]) == (0.3, None, "")
    assert rows["journal path, 64 KiB adds (MiB/s)"]["met"] is True
    latency = rows["journal, one add per group, p50 ms"]
    assert latency["met"] is False and latency["ratio"] == 2.33        # judged on the figure, 0.7 > 0.6
    reads = rows["entry-log reads after a checkpoint, entries/s"]
    assert reads["value"] is None and reads["met"] is None
    markdown = render_markdown(list(rows.values()), header="# test")
    assert ("| journal | journal path, 1 KiB adds in batches (MiB/s) | 65 | raw write+fdatasync MiB/s: 100 | 0.65 "
            "| ratio >= 0.7 | no |") in markdown
    assert "| n/a |" in markdown


def test_a_run_of_two_benchmarks_writes_json_and_markdown(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "bkcli.main", "bench", "all", "--sim-seeds", "1", "--seconds", "0.2",
         "--out", str(tmp_path), *[f"--skip={name}" for name in ("bookie", "ledger", "ledger_one_bookie", "table", "stream", "failover", "spark")]],
        capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    assert set(results["benchmarks"]) == {"sim", "journal"}
    assert results["benchmarks"]["sim"]["violations"] == 0
    assert results["benchmarks"]["journal"]["raw_fdatasync"]["fdatasyncs_per_second"] > 0
    markdown = (tmp_path / "results.md").read_text()
    assert "| sim | simulated events per wall second |" in markdown and "| bookie |" not in markdown
    assert "bench all: journal (2/2)" in completed.stderr
