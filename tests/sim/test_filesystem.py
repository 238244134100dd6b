"""SimFileSystem's positional writes and preallocation: what a crash keeps, the armed crash point
striking in the middle of them, and the space they take on a small device."""

import random

import pytest

from bkcore.bookie.fs import DiskFullError
from bksim.filesystem import SimFileSystem, SimulatedCrash
from bksim.options import DiskOptions


def make_fs(seed: int = 0, **knobs) -> SimFileSystem:
    fs = SimFileSystem(rng=random.Random(seed), options=DiskOptions(**knobs))
    fs.makedirs("d")
    return fs


def durable_file(fs: SimFileSystem, content: bytes, preallocated_size: int) -> None:
    fs.write_at("d/f", 0, content)
    fs.preallocate("d/f", preallocated_size)
    fs.sync("d/f")
    fs.sync_dir("d")


def test_a_crash_loses_unsynced_writes_into_preallocated_space_and_keeps_the_size():
    fs = make_fs()
    durable_file(fs, b"header", 64)
    fs.write_at("d/f", 6, b"synced")
    fs.sync("d/f")
    fs.write_at("d/f", 12, b"unsynced")
    fs.crash()
    assert fs.size("d/f") == 64
    assert fs.read("d/f") == b"headersynced" + bytes(52)


def test_a_torn_crash_tears_the_positional_write_at_an_offset():
    prefixes = set()
    for seed in range(100):
        fs = make_fs(seed, torn_write_probability=1.0)
        durable_file(fs, b"header", 64)
        fs.write_at("d/f", 6, b"0123456789")
        fs.crash()
        data = fs.read("d/f")
        kept = data[6:16].rstrip(b"\0")
        assert b"0123456789".startswith(kept) and len(kept) < 10
        assert data == b"header" + kept + bytes(58 - len(kept))
        prefixes.add(len(kept))
    assert prefixes == set(range(10))


@pytest.mark.parametrize("operation", ["write_at", "preallocate"])
def test_the_armed_crash_strikes_in_the_middle_of_the_operation(operation):
    sizes = set()
    for seed in range(60):
        fs = make_fs(seed)
        durable_file(fs, b"header", 16)
        fs.crash_at_operation_index = fs.operation_count
        with pytest.raises(SimulatedCrash):
            if operation == "write_at":
                fs.write_at("d/f", 16, b"x" * 20)
            else:
                fs.preallocate("d/f", 36)
        # Before power is lost the partial operation is in the page cache; a crash drops it.
        sizes.add(fs.size("d/f"))
        fs.crash_at_operation_index = None
        fs.crash()
        assert fs.read("d/f") == b"header" + bytes(10)
    assert min(sizes) == 16 and max(sizes) == 36 and len(sizes) > 10


def test_preallocation_takes_space_and_a_full_device_refuses_it_whole():
    fs = SimFileSystem(rng=random.Random(1), options=DiskOptions.none(), capacity_size=100)
    fs.makedirs("d")
    fs.write_at("d/f", 0, b"x" * 10)
    fs.preallocate("d/f", 60)
    assert fs.usage() == (60, 100)
    fs.write_at("d/f", 10, b"y" * 50)               # inside the preallocation: no new space
    assert fs.usage() == (60, 100)
    with pytest.raises(DiskFullError):
        fs.preallocate("d/g", 41)
    with pytest.raises(DiskFullError):
        fs.write_at("d/f", 95, b"z" * 10)
    assert fs.size("d/f") == 60 and fs.usage() == (60, 100)
    fs.preallocate("d/g", 40)
    assert fs.usage() == (100, 100)
