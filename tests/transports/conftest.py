import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from inprocess_cluster import InProcessCluster  # noqa: E402
from metastore.memory_store import forget_memory_servers  # noqa: E402


@pytest.fixture
async def start_cluster(nursery, tmp_path):
    """start_cluster(uri, bookie_count=3, **bookie_config) -> an InProcessCluster on a fresh
    memory:// tree; its bookies stop when the test ends."""
    clusters = []

    async def start(uri: str, bookie_count: int = 3, **overrides) -> InProcessCluster:
        forget_memory_servers()
        cluster = InProcessCluster(nursery, tmp_path, uri)
        for _ in range(bookie_count):
            await cluster.add_bookie(**overrides)
        clusters.append(cluster)
        return cluster

    yield start
    for cluster in clusters:
        for bookie in cluster.bookies:
            bookie.scope.cancel()
