"""Event loop, network and disk models: ordering, faults only when configured, determinism."""

import random

from sim.disk import DiskFull, SimDisk
from sim.loop import EventLoop, TraceHasher
from sim.network import SimNetwork
from sim.options import DiskOptions, NetworkOptions


def test_events_run_in_time_then_insertion_order_and_cancel():
    loop = EventLoop()
    seen = []
    loop.call_at(20, seen.append, "late")
    loop.call_at(10, seen.append, "first")
    loop.call_at(10, seen.append, "second")
    handle = loop.call_at(15, seen.append, "cancelled")
    loop.cancel(handle)
    assert loop.run_until(12) == 2 and loop.now_ns == 12
    loop.run_until(100)
    assert seen == ["first", "second", "late"]


def test_trace_hash_depends_on_content_and_order():
    def digest(*records):
        trace = TraceHasher()
        for record in records:
            trace.record(*record)
        return trace.hexdigest()
    assert digest((1, "a"), (2, "b")) == digest((1, "a"), (2, "b"))
    assert digest((1, "a"), (2, "b")) != digest((2, "b"), (1, "a"))


def test_network_without_faults_delivers_everything_once():
    network = SimNetwork(rng=random.Random(1), options=NetworkOptions.none())
    delays = [network.delivery_delays_ns(source="a", destination="b", now_ns=0) for _ in range(1000)]
    assert all(len(d) == 1 and d[0] >= NetworkOptions().latency_min_ns for d in delays)


def test_network_loss_and_duplication_rates():
    options = NetworkOptions(loss_probability=0.2, duplicate_probability=0.1)
    network = SimNetwork(rng=random.Random(2), options=options)
    counts = [len(network.delivery_delays_ns(source="a", destination="b", now_ns=0)) for _ in range(10_000)]
    assert 0.17 < counts.count(0) / 10_000 < 0.23
    assert 0.06 < counts.count(2) / 10_000 < 0.11


def test_partitions_symmetric_one_way_and_expiring():
    network = SimNetwork(rng=random.Random(3), options=NetworkOptions.none())
    network.partition({"a"}, {"b"}, until_ns=100)
    assert network.is_blocked("a", "b", 0) and network.is_blocked("b", "a", 0)
    assert not network.is_blocked("a", "b", 100)
    network.partition({"a"}, {"b"}, is_one_way=True)
    assert network.is_blocked("a", "b", 0) and not network.is_blocked("b", "a", 0)
    network.heal()
    assert network.delivery_delays_ns(source="a", destination="b", now_ns=0)


def test_disk_crash_keeps_only_synced_bytes():
    disk = SimDisk(rng=random.Random(4), options=DiskOptions.none())
    disk.append(b"durable")
    disk.sync()
    disk.append(b"volatile")
    disk.crash()
    assert disk.read_all() == b"durable"


def test_torn_write_leaves_a_prefix():
    for seed in range(20):
        disk = SimDisk(rng=random.Random(seed), options=DiskOptions(torn_write_probability=1.0))
        disk.append(b"durable")
        disk.sync()
        disk.append(b"0123456789")
        disk.crash()
        data = disk.read_all()
        assert data.startswith(b"durable") and (b"durable" + b"0123456789").startswith(data)


def test_bit_flips_only_when_configured_and_only_in_the_copy():
    clean = SimDisk(rng=random.Random(5), options=DiskOptions.none())
    clean.append(b"x" * 100)
    assert all(clean.read_all() == b"x" * 100 for _ in range(100))
    flippy = SimDisk(rng=random.Random(5), options=DiskOptions(bit_flip_probability=1.0))
    flippy.append(b"x" * 100)
    assert flippy.read_all() != b"x" * 100
    assert flippy.statistics().bit_flips == 1 and flippy.size == 100


def test_full_disk_refuses_the_whole_write():
    disk = SimDisk(rng=random.Random(6), options=DiskOptions.none())
    disk.append(b"abc")
    disk.set_full(True)
    try:
        disk.append(b"def")
        raise AssertionError("expected DiskFull")
    except DiskFull:
        pass
    assert disk.read_all() == b"abc"


def test_same_seed_same_draws():
    def draws(seed):
        network = SimNetwork(rng=random.Random(seed), options=NetworkOptions.swarm(random.Random(seed)))
        return [tuple(network.delivery_delays_ns(source="a", destination="b", now_ns=i)) for i in range(200)]
    assert draws(7) == draws(7) != draws(8)
