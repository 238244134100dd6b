"""Fixtures shared across test folders."""

import random

import pytest

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
