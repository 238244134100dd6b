"""How a benchmark reports one measurement of adds: the count, the rate and the latency
percentiles in milliseconds, under the same keys in every report that uses them.

What it owns: the JSON shape shared by `bk bench ledger` (bkbench.ledger), its peers
(bkbench.peers) and `bk bench failover` (bkbench.failover). Latencies come in as seconds; a
percentile of no latencies is None.
"""

from __future__ import annotations

from bkbench.journal import percentile


def percentile_ms(values: list[float], fraction: float) -> float | None:
    """The fraction-th percentile of values (seconds) in milliseconds; None when there are none."""
    return round(percentile(values, fraction) * 1e3, 3) if values else None


def latency_summary(latencies: list[float]) -> dict:
    """Percentiles of per-add latencies in seconds, as milliseconds."""
    return {"add_latency_p50_ms": percentile_ms(latencies, 0.5), "add_latency_p99_ms": percentile_ms(latencies, 0.99),
            "add_latency_p999_ms": percentile_ms(latencies, 0.999)}


def adds_summary(latencies: list[float], elapsed_s: float) -> dict:
    """One measurement's count, rate and latency percentiles."""
    return {"adds": len(latencies), "adds_per_second": round(len(latencies) / elapsed_s), **latency_summary(latencies)}
