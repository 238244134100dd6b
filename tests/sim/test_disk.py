"""SimDisk: what survives a crash (synced bytes, sometimes a torn prefix), positional writes and
preallocated zeros, read errors only when configured and never stored, disk full leaves the file
unchanged, fsync latency, determinism."""

import random

import pytest

from bksim.disk import DiskFull, SimDisk, draw_sync_latency_ns
from bksim.options import MS, US, DiskOptions


def make_disk(seed: int = 0, **knobs) -> SimDisk:
    return SimDisk(rng=random.Random(seed), options=DiskOptions(**knobs))


def test_append_returns_the_write_latency_and_grows_the_file():
    disk = make_disk(write_latency_ns=7 * US)
    assert disk.append(b"abc") == 7 * US
    assert disk.append(b"") == 7 * US
    assert (disk.size, disk.durable_size, disk.read_all()) == (3, 0, b"abc")


def test_crash_loses_unsynced_bytes_and_keeps_synced_ones():
    disk = make_disk()
    disk.append(b"durable")
    disk.sync()
    disk.append(b"volatile")
    assert disk.read_all() == b"durablevolatile"      # readable while up
    disk.crash()
    assert disk.read_all() == b"durable" and disk.durable_size == disk.size == 7
    statistics = disk.statistics()
    assert statistics.crashes == 1 and statistics.bytes_lost == 8 and statistics.torn_writes == 0


def test_crash_without_unsynced_bytes_changes_nothing():
    disk = make_disk(torn_write_probability=1.0)
    disk.append(b"all synced")
    disk.sync()
    disk.crash()
    assert disk.read_all() == b"all synced" and disk.statistics().torn_writes == 0


def test_torn_write_leaves_a_strict_prefix_of_the_unsynced_bytes():
    kept_sizes = set()
    for seed in range(200):
        disk = make_disk(seed, torn_write_probability=1.0)
        disk.append(b"durable")
        disk.sync()
        disk.append(b"0123456789")
        disk.crash()
        data = disk.read_all()
        assert data.startswith(b"durable") and b"durable0123456789".startswith(data)
        assert len(data) < len(b"durable0123456789")
        assert disk.durable_size == len(data)           # what survived is on the platter
        kept_sizes.add(len(data) - 7)
        disk.invariants()
    assert kept_sizes == set(range(10))


def test_torn_writes_happen_at_about_their_probability():
    torn = 0
    for seed in range(1_000):
        disk = make_disk(seed, torn_write_probability=0.3)
        disk.append(b"x" * 100)
        disk.crash()
        torn += disk.statistics().torn_writes
    assert 250 < torn < 350


def test_bit_flips_only_when_configured_and_only_in_the_copy():
    clean = make_disk(5)
    clean.append(b"x" * 100)
    assert all(clean.read_all() == b"x" * 100 for _ in range(100))
    assert clean.statistics().bit_flips == 0
    flippy = make_disk(5, bit_flip_probability=1.0)
    flippy.append(b"x" * 100)
    for _ in range(50):
        data = flippy.read_all()
        differing = [i for i in range(100) if data[i] != ord("x")]
        assert len(differing) == 1
        assert bin(data[differing[0]] ^ ord("x")).count("1") == 1     # exactly one bit
    assert flippy.statistics().bit_flips == 50 and flippy.size == 100
    flippy.set_full(False)
    assert bytes(flippy._data) == b"x" * 100                          # stored bytes untouched
    empty = make_disk(5, bit_flip_probability=1.0)
    assert empty.read_all() == b""


def test_full_disk_refuses_the_whole_write():
    disk = make_disk(6)
    disk.append(b"abc")
    disk.set_full(True)
    assert disk.is_full
    with pytest.raises(DiskFull):
        disk.append(b"def")
    assert disk.read_all() == b"abc" and disk.size == 3
    disk.set_full(False)
    disk.append(b"def")
    assert disk.read_all() == b"abcdef"
    assert disk.statistics().full_refusals == 1


def test_random_full_faults_leave_the_file_unchanged():
    disk = make_disk(7, full_probability_per_write=0.2)
    expected = bytearray()
    refused = 0
    for index in range(2_000):
        chunk = index.to_bytes(2, "big")
        try:
            disk.append(chunk)
            expected += chunk
        except DiskFull:
            refused += 1
    assert disk.read_all() == bytes(expected)
    assert 300 < refused < 500 and disk.statistics().full_refusals == refused


def test_size_max_is_a_full_disk():
    disk = SimDisk(rng=random.Random(8), options=DiskOptions.none(), size_max=5)
    disk.append(b"abcd")
    with pytest.raises(DiskFull):
        disk.append(b"ef")
    disk.append(b"e")
    assert disk.read_all() == b"abcde"


def test_write_at_overwrites_inside_the_file_and_grows_it_past_the_end():
    disk = make_disk()
    disk.append(b"abcdef")
    disk.write_at(2, b"XY")
    assert (disk.read_all(), disk.size) == (b"abXYef", 6)
    disk.write_at(5, b"123")
    assert (disk.read_all(), disk.size) == (b"abXYe123", 8)
    disk.write_at(10, b"!")                       # past the end: a hole of zeros
    assert disk.read_all() == b"abXYe123\0\0!"


def test_preallocated_space_reads_as_zeros_and_writes_land_inside_it():
    disk = make_disk()
    disk.append(b"head")
    disk.preallocate(64)
    assert disk.size == 64 and disk.read_all() == b"head" + bytes(60)
    disk.preallocate(10)                          # never shrinks
    disk.write_at(4, b"rec1")
    assert disk.size == 64 and disk.read_range(0, 10) == b"headrec1\0\0"
    assert disk.read_range(60) == bytes(4) and disk.read_range(62, 10) == bytes(2)
    disk.invariants()


def test_crash_undoes_unsynced_positional_writes_and_preallocation():
    disk = make_disk()
    disk.append(b"head")
    disk.preallocate(32)
    disk.write_at(4, b"synced")
    disk.sync()
    disk.write_at(10, b"lost")                    # inside the synced preallocation
    disk.write_at(0, b"HEAD")                     # over synced bytes
    disk.preallocate(48)                          # growth never synced
    assert disk.durable_size == 32
    disk.crash()
    assert disk.read_all() == b"headsynced" + bytes(22) and disk.size == 32
    assert disk.statistics().bytes_lost == 4 + 4 + 16
    disk.invariants()


def test_unsynced_preallocation_of_an_unsynced_file_is_lost_whole():
    disk = make_disk()
    disk.append(b"header")
    disk.preallocate(100)
    disk.write_at(6, b"record")
    disk.crash()
    assert (disk.size, disk.read_all()) == (0, b"")


def test_torn_crash_keeps_the_unsynced_writes_in_order_and_tears_one_at_an_offset():
    # Synced: 8 bytes, then 16 preallocated zeros. Unsynced, in order: "AAAA" at 8, "BBBB" at 2
    # (over synced bytes), "CCCC" at 12. A crash keeps the first k of those 12 bytes, k < 12.
    assert _after_keeping(6) == b"01BB4567AAAA" + bytes(12)
    assert _after_keeping(9) == b"01BBBB67AAAAC" + bytes(11)
    seen = set()
    for seed in range(300):
        disk = make_disk(seed, torn_write_probability=1.0)
        disk.append(b"01234567")
        disk.preallocate(24)
        disk.sync()
        disk.write_at(8, b"AAAA")
        disk.write_at(2, b"BBBB")
        disk.write_at(12, b"CCCC")
        disk.crash()
        data = disk.read_all()
        assert disk.size == 24 and disk.durable_size == 24
        kept_sizes = [k for k in range(12) if _after_keeping(k) == data]
        assert len(kept_sizes) == 1, data
        seen.add(kept_sizes[0])
        disk.invariants()
    assert seen == set(range(12))


def _after_keeping(kept_size: int) -> bytes:
    """The file of the test above when the first kept_size unsynced bytes survive."""
    content = bytearray(b"01234567" + bytes(16))
    for offset, data in ((8, b"AAAA"), (2, b"BBBB"), (12, b"CCCC")):
        part = data[:max(0, min(len(data), kept_size))]
        content[offset:offset + len(part)] = part
        kept_size -= len(data)
    return bytes(content)


def test_torn_crash_inside_an_unsynced_preallocation_grows_the_file_partly():
    sizes = set()
    for seed in range(100):
        disk = make_disk(seed, torn_write_probability=1.0)
        disk.append(b"head")
        disk.sync()
        disk.preallocate(20)
        disk.crash()
        assert disk.read_all() == b"head" + bytes(disk.size - 4)
        sizes.add(disk.size)
    assert sizes == set(range(4, 20))


def test_a_full_disk_refuses_preallocation_and_positional_writes_whole():
    disk = SimDisk(rng=random.Random(8), options=DiskOptions.none(), size_max=16)
    disk.append(b"abcd")
    with pytest.raises(DiskFull):
        disk.preallocate(17)
    with pytest.raises(DiskFull):
        disk.write_at(14, b"xyz")
    assert disk.read_all() == b"abcd"
    disk.preallocate(16)
    disk.write_at(13, b"xyz")
    assert disk.read_all() == b"abcd" + bytes(9) + b"xyz"
    disk.set_full(True)
    with pytest.raises(DiskFull):
        disk.write_at(0, b"q")
    assert disk.statistics().full_refusals == 3


def test_sync_latency_has_a_minimum_a_tail_and_slow_outliers():
    disk = make_disk(10, fsync_latency_min_ns=100 * US, fsync_latency_mean_ns=1 * MS)
    latencies = [disk.sync_latency_ns() for _ in range(5_000)]
    assert min(latencies) >= 100 * US
    assert 0.8 * MS < sum(latencies) / len(latencies) < 1.2 * MS
    slow = make_disk(10, slow_fsync_probability=0.1, slow_fsync_latency_ns=500 * MS)
    slow_count = sum(slow.sync_latency_ns() == 500 * MS for _ in range(5_000))
    assert 400 < slow_count < 600
    fixed = DiskOptions(fsync_latency_min_ns=3, fsync_latency_mean_ns=3)
    assert draw_sync_latency_ns(random.Random(1), fixed) == 3


def history(seed: int) -> tuple:
    options = DiskOptions.swarm(random.Random(seed))
    disk = SimDisk(rng=random.Random(seed), options=options)
    events = []
    for index in range(300):
        try:
            events.append(disk.append(bytes([index % 256]) * (index % 7)))
        except DiskFull:
            events.append("full")
        events.append(disk.sync_latency_ns())
        if index % 11 == 0:
            disk.sync()
        if index % 37 == 0:
            disk.crash()
        if index % 13 == 0:
            events.append(disk.read_all())
    return tuple(events), disk.read_all(), disk.statistics()


def test_same_seed_same_history():
    assert history(3) == history(3)
    assert history(3) != history(4)


def test_swarm_options_vary_and_sometimes_turn_faults_off():
    drawn = [DiskOptions.swarm(random.Random(seed)) for seed in range(200)]
    for field in ("slow_fsync_probability", "torn_write_probability", "bit_flip_probability",
                  "full_probability_per_write"):
        values = {getattr(options, field) for options in drawn}
        assert 0.0 in values and len(values) > 1, field
    assert all(o.fsync_latency_mean_ns >= o.fsync_latency_min_ns for o in drawn)
    none = DiskOptions.none()
    assert (none.slow_fsync_probability, none.torn_write_probability, none.bit_flip_probability,
            none.full_probability_per_write) == (0.0, 0.0, 0.0, 0.0)


def test_options_are_validated():
    with pytest.raises(ValueError):
        DiskOptions(bit_flip_probability=-0.1)
    with pytest.raises(ValueError):
        DiskOptions(fsync_latency_min_ns=2 * MS, fsync_latency_mean_ns=1 * MS)
