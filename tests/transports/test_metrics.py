"""bktransports.metrics: the histogram's quantiles and rollover window, and the families it builds
as prometheus_client writes and parses them (BookKeeper's shapes and names)."""

import math

from prometheus_client.parser import text_string_to_metric_families

from bktransports.metrics import (
    QUANTILES, Histogram, OpStats, bk_counter, counter, exposition, gauge, new_registry, op_stats, publish,
)


def test_quantiles_are_bucket_upper_bounds_over_a_window_that_rolls_every_minute():
    histogram = Histogram(bounds_s=(0.001, 0.01, 0.1))
    for seconds in (0.0005, 0.0005, 0.005, 0.05):
        histogram.observe(seconds)
    histogram.observe(5.0, count=2)                          # above every bound: +Inf
    assert (histogram.count, histogram.counts) == (6, [2, 1, 1, 2])
    assert math.isclose(histogram.total_s, 0.0005 * 2 + 0.005 + 0.05 + 10.0)
    recent = histogram.recent_counts(now_s=0.0)
    assert [histogram.quantile(q, recent) for q in (0.25, 0.5, 0.6, 1.0)] == [0.001, 0.01, 0.1, math.inf]
    assert histogram.quantile(0.5, [0, 0, 0, 0]) is None
    histogram.observe(0.05)
    assert histogram.recent_counts(now_s=30.0) == [2, 1, 2, 2]      # no rollover yet: everything
    assert histogram.recent_counts(now_s=60.0) == [0, 0, 1, 0]      # rolled: since the first ask, at 0 s
    assert histogram.recent_counts(now_s=60.5) == [0, 0, 1, 0]      # asked again: the same window
    assert histogram.recent_counts(now_s=120.0) == [0, 0, 0, 0]     # since the rollover at 60 s


def scrape(families) -> dict:
    registry = new_registry()
    publish(registry, lambda: families)
    return {family.name: family for family in text_string_to_metric_families(exposition(registry).decode())}


def test_families_are_written_in_bookkeepers_shapes_with_help():
    stats = OpStats()
    stats.observe(0.002, count=3)
    stats.observe(0.2, is_success=False)
    parsed = scrape([
        op_stats("bookie_journal_JOURNAL_SYNC", "syncs", [({"journalIndex": "0"}, stats)]),
        bk_counter("bookie_WRITE_BYTES", "bytes written", 123),
        counter("bookie_fences", "fencing reads", [({"kind": "a"}, 1), ({"kind": "b"}, 2)]),
        gauge("bookie_SERVER_STATUS", "status", 1),
    ])
    assert all(family.documentation for family in parsed.values())
    assert "process_cpu_seconds" in parsed and "python_info" in parsed
    summary = parsed["bookie_journal_JOURNAL_SYNC"]
    assert summary.type == "summary" and summary.documentation == "syncs"
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in summary.samples}
    assert len(samples) == 2 * (len(QUANTILES) + 2)
    label = (("journalIndex", "0"), ("success", "true"))
    assert samples[("bookie_journal_JOURNAL_SYNC_count", label)] == 3
    assert math.isclose(samples[("bookie_journal_JOURNAL_SYNC_sum", label)], 6.0)          # ms
    assert samples[("bookie_journal_JOURNAL_SYNC", (("journalIndex", "0"), ("quantile", "0.99"),
                                                    ("success", "true")))] == 2.5          # its bucket's bound, ms
    assert samples[("bookie_journal_JOURNAL_SYNC_count", (("journalIndex", "0"), ("success", "false")))] == 1
    # A BookKeeper counter keeps its series name; ours end in _total.
    assert [(s.name, s.value) for s in parsed["bookie_WRITE_BYTES"].samples] == [("bookie_WRITE_BYTES", 123)]
    assert [(s.name, s.labels) for s in parsed["bookie_fences"].samples] == [
        ("bookie_fences_total", {"kind": "a"}), ("bookie_fences_total", {"kind": "b"})]
    assert parsed["bookie_SERVER_STATUS"].type == "gauge"


def test_two_families_of_one_histogram_agree_across_a_rollover():
    stats = OpStats()
    stats.observe(0.002)
    first = op_stats("A", "a", stats, now_s=0.0)
    stats.observe(0.002)
    both = [op_stats(name, name, stats, now_s=100.0) for name in ("A", "B")]
    quantile = [[s.value for s in family.samples if s.labels == {"success": "true", "quantile": "0.5"}]
                for family in (first, *both)]
    assert quantile == [[2.5], [2.5], [2.5]]
