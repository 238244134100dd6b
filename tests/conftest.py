"""Fixtures shared across test folders, and the hypothesis profile for CI."""

import os
import random

import pytest
from hypothesis import settings

# CI runs the same examples every time (what passed here passes there); new examples are
# explored locally and by `bk sim explore`, which print the command that replays a failure.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI") == "true":
    settings.load_profile("ci")

from sim.filesystem import SimFileSystem
from sim.options import DiskOptions
from transports.filesystem import OsFileSystem


@pytest.fixture(params=["sim", "os"])
def fs(request, tmp_path):
    """The same storage test on the simulator's file system and on real files."""
    if request.param == "sim":
        yield SimFileSystem(rng=random.Random(1), options=DiskOptions.none())
        return
    filesystem = OsFileSystem(str(tmp_path))
    yield filesystem
    filesystem.close()
