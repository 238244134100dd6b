"""`bk bench journal`'s preallocation comparison: the journal run honours the preallocation size
it is given, and the summary takes medians per setting and on/off ratios over alternating rounds."""

from bkbench.journal import compare_preallocation, journal_run, preallocation_rounds, summarize_preallocation


def test_a_journal_run_with_and_without_preallocation(tmp_path):
    for prealloc_size in (0, 1 << 20):
        run = journal_run(str(tmp_path), 1024, 0.1, 1, prealloc_size=prealloc_size)
        assert run["entries_per_second"] > 0 and run["add_latency_p50_ms"] > 0


def test_rounds_alternate_which_setting_goes_first():
    rounds = preallocation_rounds()
    assert len(rounds) >= 2 and rounds[0] == ("off", "on") and rounds[1] == ("on", "off")


def test_the_summary_is_medians_and_on_to_off_ratios():
    def figures(p50_ms, per_second):
        return {"add_latency_p50_ms": p50_ms, "add_latency_p99_ms": 2 * p50_ms, "entries_per_second": per_second}

    summary = summarize_preallocation({"off": [figures(4.0, 100), figures(1.0, 300), figures(2.0, 200)],
                                       "on": [figures(1.0, 400), figures(9.0, 100), figures(0.5, 500)]})
    assert summary["off"] == figures(2.0, 200) and summary["on"] == figures(1.0, 400)
    assert summary["add_latency_p50_ms_ratio_on_to_off"] == 0.5 and summary["entries_per_second_ratio_on_to_off"] == 2.0
    assert summary["rounds"] == 3


def test_the_comparison_measures_each_setting_every_round():
    sizes = []
    summary = compare_preallocation(lambda size: sizes.append(size) or {
        "add_latency_p50_ms": 1.0 if size else 2.0, "add_latency_p99_ms": 1.0, "entries_per_second": 10}, 4096)
    assert sorted(sizes) == [0] * len(preallocation_rounds()) + [4096] * len(preallocation_rounds())
    assert summary["add_latency_p50_ms_ratio_on_to_off"] == 0.5
