"""Disk usage monitor: when a bookie turns readonly and when it may write again.

Above disk_usage_threshold (BookKeeper's diskUsageThreshold, 0.95) the bookie turns readonly:
it registers under available/readonly, refuses normal adds (EREADONLY), and still serves reads
and recovery adds, and still runs GC. Once usage falls below disk_usage_lwm_threshold
(diskUsageLwmThreshold, 0.90) it becomes writable again. The gap between the two keeps a bookie
near the limit from flapping.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DiskUsageConfig:
    disk_usage_threshold: float = 0.95
    disk_usage_lwm_threshold: float = 0.90

    def __post_init__(self) -> None:
        if not 0 < self.disk_usage_lwm_threshold <= self.disk_usage_threshold <= 1:
            raise ValueError(f"need 0 < disk_usage_lwm_threshold ({self.disk_usage_lwm_threshold}) <= "
                             f"disk_usage_threshold ({self.disk_usage_threshold}) <= 1")


class DiskUsageMonitor:
    def __init__(self, *, config: DiskUsageConfig = DiskUsageConfig()) -> None:
        self.config = config
        self.is_readonly = False
        self.usage = 0.0

    def on_disk_full(self) -> bool:
        """A write found the disk full before a reading did: readonly now. True if that is a change."""
        was_readonly, self.is_readonly = self.is_readonly, True
        return not was_readonly

    def observe(self, *, used_size: int, total_size: int) -> bool | None:
        """Feed a usage reading; returns the new readonly state when it changes, else None."""
        self.usage = used_size / total_size if total_size > 0 else 1.0
        if not self.is_readonly and self.usage >= self.config.disk_usage_threshold:
            self.is_readonly = True
            return True
        if self.is_readonly and self.usage < self.config.disk_usage_lwm_threshold:
            self.is_readonly = False
            return False
        return None
