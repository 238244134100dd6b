"""Metrics of a process, exposed through prometheus_client at /metrics (docs/metrics.md).

Every process (bookie, stream storage server, metastore node, autorecovery daemon) has one
CollectorRegistry (new_registry): prometheus_client's process, platform and GC collectors, and
collectors of its own that publish its numbers at scrape time (publish). The hot paths never
touch prometheus_client, whose metrics take a lock per call: they bump plain ints and observe
into our Histogram (one bisect, one increment), and the collectors read those when scraped.

The families follow BookKeeper's Prometheus provider wherever a number means the same thing:
- an OpStatsLogger (OpStats here) is a summary: per `success` ("true"/"false") label, the
  quantiles 0.5 .. 1.0 and _count and _sum, in milliseconds. Count and sum run from the start;
  the quantiles are those of the last one to two minutes (Histogram.recent_counts: a rollover
  every LATENCY_ROLLOVER_S, BookKeeper's prometheusStatsLatencyRolloverSeconds), each the upper
  bound of the histogram bucket that holds it (BookKeeper's sketches are finer);
- a BookKeeper counter keeps its exact series name (bookie_WRITE_BYTES, not ..._total):
  prometheus_client would append _total to a counter family, which would break the queries of
  existing dashboards, so these are published untyped (bk_counter); counters of ours follow
  Prometheus' convention (counter: name_total).
"""

from __future__ import annotations

import bisect
import functools
import math
import time
from typing import Callable, Iterable

import trio
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector, generate_latest
from prometheus_client.core import (
    CounterMetricFamily, GaugeMetricFamily, Metric, UnknownMetricFamily,
)
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from bktransports.http_admin import AdminHttpServer, Request, Response, text_response

# What generate_latest writes: the text format 0.0.4, which every Prometheus reads.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# 50 us .. 10 s: a journal fdatasync on a fast SSD is ~0.1 ms; a stalled disk takes seconds.
DEFAULT_BOUNDS_S = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                    0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# BookKeeper's OpStatsLogger quantiles, in the order its provider writes them.
QUANTILES = (0.5, 0.75, 0.95, 0.99, 0.999, 0.9999, 1.0)
LATENCY_ROLLOVER_S = 60.0

Labels = dict[str, str]


class Histogram:
    """A count per bucket (upper bounds in seconds), their total and sum. Safe to observe from
    one thread while the loop reads it: a scrape may see one observation counted in `count`
    and not yet in `counts`, nothing worse."""

    __slots__ = ("bounds_s", "counts", "total_s", "count", "_base_counts", "_rolled_counts", "_rolled_at_s")

    def __init__(self, bounds_s: tuple[float, ...] = DEFAULT_BOUNDS_S) -> None:
        self.bounds_s = bounds_s
        self.counts = [0] * (len(bounds_s) + 1)     # last: above every bound (+Inf only)
        self.total_s = 0.0
        self.count = 0
        # The bucket counts at the last rollover and when it was (None: not asked yet), and
        # those at the rollover before it, where the window recent_counts() reports starts.
        self._rolled_counts = list(self.counts)
        self._rolled_at_s: float | None = None
        self._base_counts = list(self.counts)

    def observe(self, seconds: float, count: int = 1) -> None:
        """`count` observations of `seconds` each (a batch of entries that waited as long)."""
        self.counts[bisect.bisect_left(self.bounds_s, seconds)] += count
        self.total_s += seconds * count
        self.count += count

    def quantile(self, fraction: float, counts: list[int]) -> float | None:
        """Upper bound of the bucket holding the given quantile of `counts` (bucket counts:
        self.counts, or recent_counts()); None when there are none."""
        total = sum(counts)
        if not total:
            return None
        rank = fraction * total
        seen = 0
        for bound, n in zip(self.bounds_s + (math.inf,), counts):
            seen += n
            if seen >= rank:
                return bound
        return math.inf

    def recent_counts(self, now_s: float, rollover_s: float = LATENCY_ROLLOVER_S) -> list[int]:
        """Bucket counts of the observations since the rollover before the last one (the first
        ask counts as a rollover; before the second, everything since the start): the last
        rollover_s to 2 * rollover_s once running. A rollover happens when asked rollover_s or
        more after the previous one. Asking twice in a row gives the same window (two families
        of one histogram agree)."""
        if self._rolled_at_s is None:
            self._rolled_counts, self._rolled_at_s = list(self.counts), now_s
        elif now_s - self._rolled_at_s >= rollover_s:
            self._base_counts = self._rolled_counts
            self._rolled_counts, self._rolled_at_s = list(self.counts), now_s
        return [n - before for n, before in zip(self.counts, self._base_counts)]


class OpStats:
    """BookKeeper's OpStatsLogger: how long an operation took, successes and failures apart."""

    __slots__ = ("success", "failure")

    def __init__(self) -> None:
        self.success = Histogram()
        self.failure = Histogram()

    def observe(self, seconds: float, *, is_success: bool = True, count: int = 1) -> None:
        (self.success if is_success else self.failure).observe(seconds, count)


class CallStats:
    """The calls of one gRPC method, as BookKeeper's MonitoringServerInterceptor counts them:
    started, completed (whatever their status), and their latency (OK is success)."""

    __slots__ = ("started_count", "completed_count", "latency")

    def __init__(self) -> None:
        self.started_count = 0
        self.completed_count = 0
        self.latency = OpStats()


# -- registries and collectors ------------------------------------------------------------------

def new_registry() -> CollectorRegistry:
    """A process's registry, with prometheus_client's process (process_cpu_seconds_total,
    process_resident_memory_bytes, ...), platform (python_info) and GC collectors."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


class Published:
    """A collector that builds its families when scraped, from a function that reads the
    process's plain counters."""

    def __init__(self, families: Callable[[], Iterable[Metric]]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return list(self._families())


def publish(registry: CollectorRegistry, families: Callable[[], Iterable[Metric]]) -> Published:
    """Register `families` (called at every scrape) in `registry`; returns the collector, for
    registry.unregister."""
    collector = Published(families)
    registry.register(collector)
    return collector


def exposition(registry: CollectorRegistry) -> bytes:
    """The text a scrape of `registry` gets (prometheus_client's generate_latest)."""
    return generate_latest(registry)


# -- families -------------------------------------------------------------------------------------

Samples = float | Iterable[tuple[Labels, float]]


def _samples(samples: Samples) -> list[tuple[Labels, float]]:
    """A plain number is one sample without labels."""
    return [({}, samples)] if isinstance(samples, (int, float)) else list(samples)


def _family(family_class, name: str, help: str, samples: Samples) -> Metric:
    items = _samples(samples)
    label_names = sorted({label for labels, _ in items for label in labels})
    family = family_class(name, help, labels=label_names)
    for labels, value in items:
        family.add_metric([labels.get(label, "") for label in label_names], value)
    return family


def counter(name: str, help: str, samples: Samples) -> Metric:
    """A counter of ours: its series is name_total (give the name without _total)."""
    return _family(CounterMetricFamily, name, help, samples)


def bk_counter(name: str, help: str, samples: Samples) -> Metric:
    """A BookKeeper counter, under its exact series name (untyped: see the module's docstring)."""
    return _family(UnknownMetricFamily, name, help, samples)


def gauge(name: str, help: str, samples: Samples) -> Metric:
    return _family(GaugeMetricFamily, name, help, samples)


def op_stats(name: str, help: str, stats: OpStats | Iterable[tuple[Labels, OpStats]], *,
             now_s: float | None = None) -> Metric:
    """A BookKeeper OpStatsLogger summary, in milliseconds (see the module's docstring)."""
    now_s = time.monotonic() if now_s is None else now_s
    family = Metric(name, help, "summary")
    for labels, op in ([({}, stats)] if isinstance(stats, OpStats) else stats):
        for success, histogram in (("false", op.failure), ("true", op.success)):
            recent = histogram.recent_counts(now_s)
            for fraction in QUANTILES:
                bound_s = histogram.quantile(fraction, recent)
                family.add_sample(name, {"success": success, "quantile": str(fraction), **labels},
                                  math.nan if bound_s is None else bound_s * 1000.0)
            family.add_sample(f"{name}_count", {"success": success, **labels}, histogram.count)
            family.add_sample(f"{name}_sum", {"success": success, **labels}, histogram.total_s * 1000.0)
    return family


# -- reading a scrape ------------------------------------------------------------------------------

def read_samples(text: str) -> list[Sample]:
    """Every sample of a scrape's text (prometheus_client's parser), for those that read /metrics
    (benchmarks, tests)."""
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def sample_value(samples: list[Sample], name: str, **labels: str) -> float | None:
    """The value of the sample `name` whose labels include `labels` (None if there is none)."""
    for sample in samples:
        if sample.name == name and labels.items() <= sample.labels.items():
            return sample.value
    return None


# -- serving --------------------------------------------------------------------------------------

def metrics_handler(registry: CollectorRegistry):
    """The GET /metrics handler of an AdminHttpServer: a scrape of `registry`."""
    async def scrape(request: Request) -> Response:
        return Response(200, exposition(registry), CONTENT_TYPE)
    return scrape


async def serve_metrics(registry: CollectorRegistry, *, host: str, port: int,
                        task_status=trio.TASK_STATUS_IGNORED) -> None:
    """/metrics (and /heartbeat) on host:port over HTTP until cancelled, for the processes that
    have no admin API (stream storage, metastore nodes, autorecovery); task_status.started()
    gets the port (port 0: a free one)."""
    async def heartbeat(request: Request) -> Response:
        return text_response("OK\n")

    server = AdminHttpServer({"/metrics": {"GET": metrics_handler(registry)}, "/heartbeat": {"GET": heartbeat}})
    await server.serve(port, host, task_status=task_status)


async def start_metrics_port(nursery: trio.Nursery, registry: CollectorRegistry, *, host: str,
                             port: int) -> str:
    """serve_metrics in `nursery` when port is not 0 (a command's --http-port); the address it
    serves at, to print, or "" when off."""
    if not port:
        return ""
    served = await nursery.start(functools.partial(serve_metrics, registry, host=host, port=port))
    return f"http://{host}:{served}/metrics"
