"""bkcore.table.placement: every server and client computes the same preferred owner of a range,
ranges spread evenly, and a change of the live servers moves only the ranges it must."""

from bkcore.table.placement import preferred_server

RANGES = [("ns", f"table{t}", r) for t in range(8) for r in range(64)]     # 512 ranges


def placement(servers) -> dict:
    return {index: preferred_server(index, servers) for index in RANGES}


def test_the_preferred_server_depends_on_the_set_of_servers_only():
    servers = ["127.0.0.1:4191", "127.0.0.1:4192", "127.0.0.1:4193"]
    assert placement(servers) == placement(list(reversed(servers))) == placement(tuple(sorted(servers)))
    assert preferred_server(RANGES[0], []) is None
    assert {preferred_server(index, ["only"]) for index in RANGES} == {"only"}


def test_ranges_spread_evenly_over_the_servers():
    servers = [f"ss{i}" for i in range(4)]
    counts = {server: 0 for server in servers}
    for server in placement(servers).values():
        counts[server] += 1
    assert all(abs(count - len(RANGES) / 4) < 0.2 * len(RANGES) / 4 for count in counts.values()), counts


def test_a_join_moves_about_one_range_in_n_and_only_to_the_new_server():
    before = placement(["ss0", "ss1", "ss2"])
    after = placement(["ss0", "ss1", "ss2", "ss3"])
    moved = [index for index in RANGES if before[index] != after[index]]
    assert {after[index] for index in moved} == {"ss3"}
    assert abs(len(moved) - len(RANGES) / 4) < 0.2 * len(RANGES) / 4, len(moved)


def test_a_leave_moves_only_the_ranges_of_the_server_that_left():
    before = placement(["ss0", "ss1", "ss2", "ss3"])
    after = placement(["ss0", "ss1", "ss3"])
    assert [index for index in RANGES if before[index] != after[index]] == \
        [index for index in RANGES if before[index] == "ss2"]
