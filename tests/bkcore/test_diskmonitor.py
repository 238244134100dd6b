"""Disk usage monitor: readonly above the threshold, writable again only below the low-water mark."""

import pytest

from bkcore.bookie.diskmonitor import DiskUsageConfig, DiskUsageMonitor


def test_hysteresis_between_threshold_and_low_water_mark():
    monitor = DiskUsageMonitor(config=DiskUsageConfig(disk_usage_threshold=0.9, disk_usage_lwm_threshold=0.8))
    assert monitor.observe(used_size=85, total_size=100) is None
    assert monitor.observe(used_size=90, total_size=100) is True
    assert monitor.observe(used_size=85, total_size=100) is None and monitor.is_readonly
    assert monitor.observe(used_size=79, total_size=100) is False
    assert monitor.observe(used_size=89, total_size=100) is None and not monitor.is_readonly


def test_an_unknown_size_counts_as_full():
    assert DiskUsageMonitor().observe(used_size=0, total_size=0) is True


@pytest.mark.parametrize("threshold,lwm", [(0.8, 0.9), (1.5, 0.9), (0.9, 0.0)])
def test_thresholds_are_validated(threshold, lwm):
    with pytest.raises(ValueError):
        DiskUsageConfig(disk_usage_threshold=threshold, disk_usage_lwm_threshold=lwm)
