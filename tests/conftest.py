"""Fixtures shared across test folders, and the hypothesis profile for CI."""

import os
import random
import sys

import pytest
from hypothesis import settings

# CI runs the same examples every time (what passed here passes there); new examples are
# explored locally and by `bk sim explore`, which print the command that replays a failure.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI") == "true":
    settings.load_profile("ci")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from inprocess_cluster import InProcessCluster  # noqa: E402
from bkmetastore.memory_store import forget_memory_servers  # noqa: E402
from bksim.filesystem import SimFileSystem
from bksim.options import DiskOptions
from bktransports.filesystem import OsFileSystem


@pytest.fixture(params=["sim", "os"])
def fs(request, tmp_path):
    """The same storage test on the simulator's file system and on real files."""
    if request.param == "sim":
        yield SimFileSystem(rng=random.Random(1), options=DiskOptions.none())
        return
    filesystem = OsFileSystem(str(tmp_path))
    yield filesystem
    filesystem.close()




@pytest.fixture(scope="module")
def stream_storage_cluster(tmp_path_factory):
    """A real cluster for a test module: one raft-lite node, three bookies and a stream storage
    server, each its own process."""
    from bklocal.standalone import StandaloneCluster
    cluster = StandaloneCluster.on_free_ports(str(tmp_path_factory.mktemp("cluster")), bookie_count=3,
                                              metastore_count=1, with_stream_storage=True)
    try:
        cluster.start(log=lambda line: None)
        yield cluster
    finally:
        cluster.stop()

@pytest.fixture(autouse=True)
def root_logging_restored():
    """A test that runs `bk`'s main() sets up the root logger for the process (bkcli.logs); put
    it back afterwards, so that records of in-process bookies in later tests do not land on
    their stderr."""
    import logging
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)

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
