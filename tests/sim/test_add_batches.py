"""The writer's own add batches: adds pushed before the client's effects are taken, or held in
separate inputs while a bookie's connection is busy, leave as one request per bookie and run of
consecutive entries, are answered once, and go again as batches after an ensemble change."""

import dataclasses

from bkcore.ledger.schedule import write_set
from bkcore.wire import AddBatchRequest, AddRequest
from bksim.harness import Harness
from bksim.scenario import MS


def watch_adds(h: Harness) -> list[tuple[str, object]]:
    """(destination, message) of every add the client sends from now on (nothing is dropped)."""
    seen: list[tuple[str, object]] = []

    def record(source: str, destination: str, message: object) -> bool:
        if source == "client" and type(message) in (AddRequest, AddBatchRequest):
            seen.append((destination, message))
        return False

    h.drop_messages(record)
    return seen


def entry_ids(message: object) -> list[int]:
    if type(message) is AddRequest:
        return [message.entry_id]
    return list(range(message.first_entry_id, message.first_entry_id + len(message.bodies)))


def add_in_one_input(h: Harness, writer, payloads: list[bytes]) -> list:
    """Push every payload within one client input; returns the keys to wait on."""
    client = h.client()
    keys = []

    def push_all(first_op: int) -> None:
        keys.append(("client", first_op))
        writer.add(first_op, payloads[0], now_ns=h.now_ns)
        for payload in payloads[1:]:
            op_id = h._next_op_id
            h._next_op_id += 1
            keys.append(("client", op_id))
            writer.add(op_id, payload, now_ns=h.now_ns)

    h.start(client.ctx.client_id, push_all)
    return keys


def test_adds_of_one_input_travel_as_one_batch_per_bookie():
    h = Harness()
    writer = h.create_ledger(ensemble_size=3, write_quorum_size=3, ack_quorum_size=2)
    seen = watch_adds(h)
    payloads = [b"entry-%d" % i for i in range(10)]
    keys = add_in_one_input(h, writer, payloads)
    assert [h.wait(key).result for key in keys] == list(range(10))
    assert sorted(destination for destination, _ in seen) == sorted(writer.metadata.last_ensemble)
    for _, message in seen:
        assert type(message) is AddBatchRequest
        assert (message.first_entry_id, message.bodies[0][-7:], len(message.bodies)) == (0, b"entry-0", 10)
    # Adds from separate inputs still go one request each.
    seen.clear()
    assert h.add(writer, b"alone") == 10
    assert [type(message) for _, message in seen] == [AddRequest] * 3


def test_adds_of_separate_inputs_held_while_the_connections_write_leave_as_one_batch():
    h = Harness()
    h.world.scenario = dataclasses.replace(h.world.scenario, client_write_busy_ns=1 * MS)
    writer = h.create_ledger(ensemble_size=3, write_quorum_size=3, ack_quorum_size=2)
    h.advance(10 * MS)                             # (the connections idle again)
    seen = watch_adds(h)
    keys = []
    for index in range(4):                         # one at a time, 0.1 ms apart: each its own input
        keys.append(h.start("client", lambda op: writer.add(op, b"one-%d" % index, now_ns=h.now_ns)))
        h.advance(MS // 10)
    assert [h.wait(key).result for key in keys] == list(range(4))
    runs = sorted((destination, entry_ids(message)) for destination, message in seen)
    # The first leaves at once; the next three wait for the connections and leave together.
    assert runs == sorted((bookie, ids) for bookie in writer.metadata.last_ensemble for ids in ([0], [1, 2, 3]))


def test_striped_batches_carry_each_write_set_exactly_once():
    h = Harness(bookie_count=5)
    writer = h.create_ledger(ensemble_size=5, write_quorum_size=3, ack_quorum_size=2)
    seen = watch_adds(h)
    keys = add_in_one_input(h, writer, [b"e%d" % i for i in range(23)])
    assert [h.wait(key).result for key in keys] == list(range(23))
    ensemble = writer.metadata.last_ensemble
    sent = sorted((entry_id, ensemble.index(destination)) for destination, message in seen
                  for entry_id in entry_ids(message))
    expected = sorted((entry_id, position) for entry_id in range(23)
                      for position in write_set(entry_id, ensemble_size=5, write_quorum_size=3))
    assert sent == expected
    assert all(len(entry_ids(message)) <= 3 for _, message in seen)      # runs end where a stripe does
    assert any(type(message) is AddBatchRequest for _, message in seen)


def test_a_failed_batch_goes_again_as_one_batch_to_the_replacement():
    h = Harness(bookie_count=4)
    writer = h.create_ledger(ensemble_size=3, write_quorum_size=3, ack_quorum_size=3)
    lost = writer.metadata.last_ensemble[1]
    h.world.crash_bookie(lost, restart_after_ns=None)     # connections refused: the batch fails at once
    seen = watch_adds(h)
    keys = add_in_one_input(h, writer, [b"x%d" % i for i in range(8)])
    assert [h.wait(key).result for key in keys] == list(range(8))
    replacement = writer.metadata.last_ensemble[1]
    assert replacement != lost
    to_replacement = [message for destination, message in seen if destination == replacement]
    assert [entry_ids(message) for message in to_replacement] == [list(range(8))]
    assert writer.ensemble_change_count == 1
    metadata = h.close(writer)
    reader = h.open(writer.ledger_id, is_recovery=False).result
    completed = h.read(reader, 0, metadata.last_entry_id)
    assert completed.result == [b"x%d" % i for i in range(8)]


def test_a_resend_spanning_several_batches_acknowledges_each_of_them():
    # The two inputs' batches are acknowledged as two groups; the replacement gets them again in
    # runs that span both (and, with large entries, cut them elsewhere), whose answers split them.
    h = Harness(bookie_count=4)
    writer = h.create_ledger(ensemble_size=3, write_quorum_size=3, ack_quorum_size=3)
    lost = writer.metadata.last_ensemble[1]
    h.world.crash_bookie(lost, restart_after_ns=None)
    seen = watch_adds(h)
    large = 700 * 1024        # three make a batch (BATCH_SIZE_MAX is 2 MiB)
    payloads = [bytes([i]) * (large if i % 4 == 1 else 10) for i in range(11)]
    keys = add_in_one_input(h, writer, payloads[:5]) + add_in_one_input(h, writer, payloads[5:])
    assert [h.wait(key).result for key in keys] == list(range(11))
    replacement = writer.metadata.last_ensemble[1]
    to_replacement = sorted(entry_id for destination, message in seen if destination == replacement
                            for entry_id in entry_ids(message))
    assert to_replacement == list(range(11))
    assert any(4 in entry_ids(message) and 5 in entry_ids(message)
               for destination, message in seen if destination == replacement)
    metadata = h.close(writer)
    reader = h.open(writer.ledger_id, is_recovery=False).result
    assert h.read(reader, 0, metadata.last_entry_id).result == payloads
