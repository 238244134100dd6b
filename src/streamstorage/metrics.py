"""What a stream storage server publishes at /metrics (docs/metrics.md).

BookKeeper's stream storage counts and times the calls of every gRPC method with its
MonitoringServerInterceptor, under the scope grpc_services_<Method>: grpc_started,
grpc_completed (counters) and grpc_latency_micros (an OpStatsLogger; its summary is in
milliseconds whatever the name says, as BookKeeper's Prometheus provider writes every
OpStatsLogger). Ours are the same families, counted by bktransports.grpc_trio. The numbers of our
own: the table ranges this server owns and serves, and the table calls exchanged with the
other servers (streamstorage.peer_calls).

The calls are counted across the server's sessions (a lost metastore session starts a new
gateway: StreamStorageMetrics.calls outlives it); the ranges and peer calls are the current
gateway's.
"""

from __future__ import annotations

from prometheus_client.core import Metric

from bktransports.metrics import CallStats, bk_counter, counter, gauge, op_stats


class StreamStorageMetrics:
    def __init__(self) -> None:
        self.calls: dict[str, CallStats] = {}       # by gRPC method path (GrpcServer.call_stats)
        self.gateway = None                         # the GrpcGateway serving now

    def families(self) -> list[Metric]:
        return [*self._call_families(), *self._own_families()]

    def _call_families(self) -> list[Metric]:
        families = []
        for path, stats in sorted(self.calls.items()):
            method = path.rsplit("/", 1)[-1]
            scope = f"grpc_services_{method}"
            families += [
                bk_counter(f"{scope}_grpc_started", f"{method} calls started ({path})", stats.started_count),
                bk_counter(f"{scope}_grpc_completed", f"{method} calls completed, whatever their status ({path})",
                           stats.completed_count),
                op_stats(f"{scope}_grpc_latency_micros", f"latency of {method} calls (ms, as every BookKeeper "
                         f"OpStatsLogger; success: status OK)", stats.latency),
            ]
        return families

    def _own_families(self) -> list[Metric]:
        gateway = self.gateway
        if gateway is None or gateway.tables is None:
            return []
        families = [gauge("stream_storage_ranges_owned", "table ranges this server owns and serves now",
                          len(gateway.tables.ranges_here()))]
        if gateway.peer_server is not None:
            served = gateway.peer_server.statistics()
            families += [
                counter("stream_storage_peer_calls_served", "table calls other servers sent this one",
                        served.call_count),
                counter("stream_storage_peer_calls_refused", "table calls from other servers refused (too many "
                        "in flight)", served.refused_call_count),
            ]
        if gateway.peers is not None:
            sent = gateway.peers.statistics()
            families += [
                counter("stream_storage_peer_calls_sent", "table calls this server sent to a range's owner",
                        sent.call_count),
                counter("stream_storage_peer_call_timeouts", "table calls to other servers that timed out",
                        sent.timeout_count),
                counter("stream_storage_peer_connection_failures", "connections to other servers that could "
                        "not be opened, or broke", sent.connection_failure_count),
            ]
        return families
