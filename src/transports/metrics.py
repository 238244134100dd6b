"""Latency histograms and the Prometheus text exposition of a bookie's numbers.

A Histogram keeps cumulative counts per upper bound (seconds), as Prometheus histograms do, so
observing costs one bisect and one increment. render_prometheus() turns counters, gauges and
histograms into the text format (version 0.0.4) served at /metrics.
"""

from __future__ import annotations

import bisect

# 50 us .. 10 s: a journal fsync on a fast SSD is ~0.1 ms; a stalled disk takes seconds.
DEFAULT_BOUNDS_S = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                    0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Histogram:
    def __init__(self, bounds_s: tuple[float, ...] = DEFAULT_BOUNDS_S) -> None:
        self.bounds_s = bounds_s
        self.counts = [0] * (len(bounds_s) + 1)     # last: above every bound (+Inf only)
        self.total_s = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.bounds_s, seconds)] += 1
        self.total_s += seconds
        self.count += 1

    def quantile(self, fraction: float) -> float | None:
        """Upper bound of the bucket holding the given quantile (None when empty)."""
        if not self.count:
            return None
        rank = fraction * self.count
        seen = 0
        for bound, n in zip(self.bounds_s + (float("inf"),), self.counts):
            seen += n
            if seen >= rank:
                return bound
        return float("inf")


def _name(name: str) -> str:
    return "bookie_" + name


def render_prometheus(*, counters: dict[str, int], gauges: dict[str, float],
                      histograms: dict[str, Histogram]) -> str:
    lines = []
    for name, value in sorted(counters.items()):
        lines += [f"# TYPE {_name(name)} counter", f"{_name(name)} {value}"]
    for name, value in sorted(gauges.items()):
        lines += [f"# TYPE {_name(name)} gauge", f"{_name(name)} {value}"]
    for name, histogram in sorted(histograms.items()):
        full = _name(name)
        lines.append(f"# TYPE {full} histogram")
        cumulative = 0
        for bound, n in zip(histogram.bounds_s, histogram.counts):
            cumulative += n
            lines.append(f'{full}_bucket{{le="{bound}"}} {cumulative}')
        lines.append(f'{full}_bucket{{le="+Inf"}} {histogram.count}')
        lines += [f"{full}_sum {histogram.total_s}", f"{full}_count {histogram.count}"]
    return "\n".join(lines) + "\n"
