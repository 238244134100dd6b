"""SimNetwork: latency, loss, duplication, reordering and partitions only when configured, at
about the configured rates, and the same draws for the same seed."""

import random

import pytest

from bksim.network import SimNetwork, TooManyPartitions
from bksim.options import MS, S, NetworkOptions


def send_many(network, count=10_000, *, source="a", destination="b", now_ns=0):
    return [network.delivery_delays_ns(source=source, destination=destination, now_ns=now_ns)
            for _ in range(count)]


def test_without_faults_every_message_arrives_once_after_the_minimum():
    options = NetworkOptions.none()
    network = SimNetwork(rng=random.Random(1), options=options)
    delays = send_many(network, 5_000)
    assert all(len(d) == 1 and d[0] >= options.latency_min_ns for d in delays)
    statistics = network.statistics()
    assert (statistics.delivered, statistics.lost, statistics.duplicated, statistics.blocked,
            statistics.reordered) == (5_000, 0, 0, 0, 0)


def test_latency_has_a_minimum_and_an_exponential_tail():
    options = NetworkOptions(latency_min_ns=100_000, latency_mean_ns=300_000)
    network = SimNetwork(rng=random.Random(2), options=options)
    delays = [d[0] for d in send_many(network, 20_000)]
    assert min(delays) >= 100_000
    assert len(set(delays)) > 1000         # spread out, not a constant
    fixed = SimNetwork(rng=random.Random(2), options=NetworkOptions(latency_min_ns=7, latency_mean_ns=7))
    assert {d[0] for d in send_many(fixed, 100)} == {7}


def test_loss_and_duplication_rates():
    options = NetworkOptions(loss_probability=0.2, duplicate_probability=0.1)
    network = SimNetwork(rng=random.Random(3), options=options)
    counts = [len(d) for d in send_many(network)]
    assert 0.17 < counts.count(0) / 10_000 < 0.23
    assert 0.06 < counts.count(2) / 10_000 < 0.11
    statistics = network.statistics()
    assert statistics.lost == counts.count(0) and statistics.duplicated == counts.count(2)


def test_reordering_adds_a_bounded_extra_delay():
    base = NetworkOptions(latency_min_ns=1_000, latency_mean_ns=1_000, reorder_delay_max_ns=5 * MS)
    plain = SimNetwork(rng=random.Random(4), options=base)
    assert {d[0] for d in send_many(plain, 1_000)} == {1_000}
    options = NetworkOptions(latency_min_ns=1_000, latency_mean_ns=1_000, reorder_probability=0.5,
                             reorder_delay_max_ns=5 * MS)
    network = SimNetwork(rng=random.Random(4), options=options)
    delays = [d[0] for d in send_many(network, 4_000)]
    delayed = [d for d in delays if d > 1_000]
    assert 0.4 < len(delayed) / 4_000 < 0.6
    assert max(delays) <= 1_000 + 5 * MS
    # An extra delay may be drawn as 0, so a few reordered copies are not visibly late.
    assert len(delayed) <= network.statistics().reordered <= len(delayed) + 5


def test_symmetric_partition_blocks_both_ways_until_it_expires():
    network = SimNetwork(rng=random.Random(5), options=NetworkOptions.none())
    network.partition({"a"}, {"b", "c"}, until_ns=100)
    assert network.is_blocked("a", "b", 0) and network.is_blocked("c", "a", 99)
    assert not network.is_blocked("b", "c", 0)
    assert network.delivery_delays_ns(source="a", destination="b", now_ns=50) == []
    assert network.statistics().blocked == 1
    assert not network.is_blocked("a", "b", 100)
    assert network.partitions_in_force(100) == []


def test_one_way_partition_blocks_one_direction():
    network = SimNetwork(rng=random.Random(6), options=NetworkOptions.none())
    network.partition({"a"}, {"b"}, is_one_way=True)
    assert network.is_blocked("a", "b", 0) and not network.is_blocked("b", "a", 0)
    assert network.is_blocked("a", "b", 10**15)        # no until_ns: until healed


def test_heal_ends_partitions_and_optionally_random_faults():
    options = NetworkOptions(loss_probability=1.0, partition_probability_per_second=1.0,
                             partition_duration_mean_ns=1 * S)
    network = SimNetwork(rng=random.Random(7), options=options)
    network.partition({"a"}, {"b"})
    network.heal()
    assert not network.is_blocked("a", "b", 0)
    assert network.delivery_delays_ns(source="a", destination="b", now_ns=0) == []   # still lossy
    network.heal(end_random_faults=True)
    assert network.delivery_delays_ns(source="a", destination="b", now_ns=0)
    assert not network.maybe_start_random_partition(nodes=["a", "b"], now_ns=0, interval_ns=S)


def test_overlapping_sides_are_a_bug():
    network = SimNetwork(rng=random.Random(8), options=NetworkOptions.none())
    with pytest.raises(AssertionError):
        network.partition({"a", "b"}, {"b"})


def test_random_partitions_split_the_nodes_and_expire():
    options = NetworkOptions(partition_probability_per_second=10.0, partition_duration_mean_ns=100 * MS,
                             one_way_partition_probability=0.5)
    network = SimNetwork(rng=random.Random(9), options=options)
    nodes = ["c", "a", "d", "b"]
    started = 0
    kinds = set()
    for tick in range(200):
        now_ns = tick * 10 * MS
        if network.maybe_start_random_partition(nodes=nodes, now_ns=now_ns, interval_ns=10 * MS):
            started += 1
            partition = network.partitions_in_force(now_ns)[-1]
            assert partition.side_a and partition.side_b
            assert partition.side_a | partition.side_b == set(nodes)
            assert partition.until_ns > now_ns
            kinds.add(partition.is_one_way)
    assert 0.07 < started / 200 < 0.14
    assert kinds == {True, False}
    assert network.partitions_in_force(10**15) == []


def test_no_random_partitions_unless_configured():
    network = SimNetwork(rng=random.Random(10), options=NetworkOptions.none())
    assert not any(network.maybe_start_random_partition(nodes=["a", "b"], now_ns=0, interval_ns=S)
                   for _ in range(100))
    lone = SimNetwork(rng=random.Random(10), options=NetworkOptions(partition_probability_per_second=100.0))
    assert not lone.maybe_start_random_partition(nodes=["a"], now_ns=0, interval_ns=S)


def test_partition_limit():
    network = SimNetwork(rng=random.Random(11), options=NetworkOptions.none(), partition_count_max=2)
    network.partition({"a"}, {"b"}, until_ns=10)
    network.partition({"a"}, {"c"})
    with pytest.raises(TooManyPartitions):
        network.partition({"b"}, {"c"})
    assert network.is_blocked("a", "b", 5)
    assert not network.is_blocked("a", "b", 10)          # the first expired, freeing a place
    network.partition({"b"}, {"c"})
    random_options = NetworkOptions(partition_probability_per_second=1e6, partition_duration_mean_ns=S)
    full = SimNetwork(rng=random.Random(12), options=random_options, partition_count_max=1)
    assert full.maybe_start_random_partition(nodes=["a", "b"], now_ns=0, interval_ns=S)
    assert not full.maybe_start_random_partition(nodes=["a", "b"], now_ns=0, interval_ns=S)
    statistics = full.statistics()
    assert statistics.partitions_refused == 1 and statistics.partitions_active_peak == 1


def draws(seed: int) -> list:
    options = NetworkOptions.swarm(random.Random(seed))
    network = SimNetwork(rng=random.Random(seed), options=options)
    out = []
    nodes = [f"node-{i}" for i in range(5)]
    for i in range(500):
        network.maybe_start_random_partition(nodes=nodes, now_ns=i * MS, interval_ns=MS)
        source, destination = nodes[i % 5], nodes[(i * 3 + 1) % 5]
        out.append(tuple(network.delivery_delays_ns(source=source, destination=destination, now_ns=i * MS)))
    return out


def test_same_seed_same_draws():
    assert draws(7) == draws(7)
    assert draws(7) != draws(8)


def test_swarm_options_vary_and_sometimes_turn_faults_off():
    drawn = [NetworkOptions.swarm(random.Random(seed)) for seed in range(200)]
    for field in ("loss_probability", "duplicate_probability", "reorder_probability",
                  "partition_probability_per_second", "one_way_partition_probability"):
        values = {getattr(options, field) for options in drawn}
        assert 0.0 in values and len(values) > 1, field
    assert all(o.loss_probability <= 0.3 and o.duplicate_probability <= 0.1 for o in drawn)
    assert all(o.latency_mean_ns >= o.latency_min_ns for o in drawn)


def test_options_are_validated():
    with pytest.raises(ValueError):
        NetworkOptions(loss_probability=1.5)
    with pytest.raises(ValueError):
        NetworkOptions(latency_min_ns=10, latency_mean_ns=5)
    with pytest.raises(ValueError):
        NetworkOptions(latency_min_ns=-1)


def test_cut_links_agree_with_the_partitions_in_force_as_they_come_and_go():
    # The per-message check reads a map derived from the partitions: it must answer exactly as
    # asking every partition would, through overlaps, one-way cuts, expiry and healing.
    nodes = ["a", "b", "c", "d", "e"]
    rng = random.Random(7)
    network = SimNetwork(rng=random.Random(8), options=NetworkOptions.none())
    for step in range(200):
        now_ns = step * 10
        if rng.random() < 0.3:
            shuffled = rng.sample(nodes, len(nodes))
            cut = rng.randrange(1, len(nodes))
            try:
                network.partition(set(shuffled[:cut]), set(shuffled[cut:]), is_one_way=rng.random() < 0.5,
                                   until_ns=now_ns + rng.randrange(1, 100) if rng.random() < 0.8 else None)
            except TooManyPartitions:
                network.heal()
        if rng.random() < 0.02:
            network.heal()
        in_force = network.partitions_in_force(now_ns)
        for source in nodes:
            for destination in nodes:
                expected = any(p.blocks(source, destination) for p in in_force)
                assert network.is_blocked(source, destination, now_ns) == expected
                assert (network.fate_ns(source, destination, now_ns) is None) == expected
