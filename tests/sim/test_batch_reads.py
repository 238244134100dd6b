"""Batch reads (BookKeeper's BP-62) end to end in the simulator: when they are used, partial
answers, bad copies, silent and missing bookies, fragments, and the errors they give."""

import pytest

from bkcore.client.config import ClientConfig
from bkcore.errors import NoSuchEntry
from bkcore.wire import ReadBatchRequest, ReadRequest
from bksim.harness import Harness
from bksim.scenario import MS, S

from tests.sim.test_ledger_scenarios import payloads, read_all, write_entries


def counting(h: Harness) -> dict:
    """Count the read requests clients send, by kind (nothing is dropped)."""
    counts = {ReadRequest: 0, ReadBatchRequest: 0}

    def observe(source, destination, message) -> bool:
        if type(message) in counts:
            counts[type(message)] += 1
        return False
    h.drop_messages(observe)
    return counts


def written(h: Harness, count: int, **spec):
    writer = h.create_ledger(**spec)
    write_entries(h, writer, payloads(count))
    h.close(writer)
    return writer


@pytest.mark.parametrize("e,w,batch_count_max,uses_batches", [
    (3, 3, 1000, True), (1, 1, 1000, True), (3, 2, 1000, False), (3, 3, 0, False)])
def test_batch_reads_are_used_when_every_bookie_holds_every_entry(e, w, batch_count_max, uses_batches):
    h = Harness(client_config=ClientConfig(read_batch_count_max=batch_count_max))
    writer = written(h, 25, ensemble_size=e, write_quorum_size=w, ack_quorum_size=1)
    counts = counting(h)
    assert read_all(h, h.open(writer.ledger_id, is_recovery=False).result) == payloads(25)
    if uses_batches:
        assert counts == {ReadRequest: 0, ReadBatchRequest: 1}
    else:
        assert counts[ReadBatchRequest] == 0 and counts[ReadRequest] == 25


def test_a_range_longer_than_a_batch_is_read_in_several_at_once_spread_over_the_ensemble():
    h = Harness(client_config=ClientConfig(read_batch_count_max=10))
    writer = written(h, 35, ensemble_size=3, write_quorum_size=3, ack_quorum_size=2)
    asked = []
    h.drop_messages(lambda s, d, m: asked.append((d, m.first_entry_id, m.count_max))
                    if type(m) is ReadBatchRequest else False)
    assert read_all(h, h.open(writer.ledger_id, is_recovery=False).result) == payloads(35)
    assert sorted((first, count) for _, first, count in asked) == [(0, 10), (10, 10), (20, 10), (30, 5)]
    assert len({bookie for bookie, _, _ in asked}) == 3


def test_a_bookie_answering_with_part_of_a_batch_is_asked_for_the_rest():
    entry_size = len(b"entry-10") + 32 + 4
    h = Harness(client_config=ClientConfig(read_batch_size_max=3 * entry_size))
    writer = written(h, 20, ensemble_size=3, write_quorum_size=3, ack_quorum_size=2)
    counts = counting(h)
    assert read_all(h, h.open(writer.ledger_id, is_recovery=False).result) == payloads(20)
    assert counts[ReadBatchRequest] >= 7


def test_a_bad_copy_moves_the_rest_of_the_batch_to_another_replica():
    h = Harness()
    writer = written(h, 12, ensemble_size=3, write_quorum_size=3, ack_quorum_size=2)
    first_bookie = writer.metadata.ensemble_for(0)[0]          # a batch from entry 0 starts there
    storage = h.world.bookies[first_bookie].stack.storage
    good = storage.get_entry(writer.ledger_id, 5)
    storage.add_entry(writer.ledger_id, 5, good[:-1] + bytes([good[-1] ^ 0x01]))
    asked = []
    h.drop_messages(lambda s, d, m: asked.append((d, m.first_entry_id)) if type(m) is ReadBatchRequest else False)
    assert read_all(h, h.open(writer.ledger_id, is_recovery=False).result) == payloads(12)
    assert asked[0] == (first_bookie, 0)
    assert asked[1][1] == 5 and asked[1][0] != first_bookie


def test_a_silent_bookie_is_passed_over_after_the_speculative_timeout():
    config = ClientConfig(speculative_read_timeout_ns=50 * MS, read_entry_timeout_ns=5 * S)
    h = Harness(client_config=config)
    writer = written(h, 8, ensemble_size=3, write_quorum_size=3, ack_quorum_size=2)
    h.world.pause_node(writer.metadata.ensemble_for(0)[0], 30 * S)
    reader = h.open(writer.ledger_id, is_recovery=False).result
    started_ns = h.now_ns
    assert h.read(reader, 0, 7).result == payloads(8)
    assert h.now_ns - started_ns < 1 * S


def test_an_entry_no_replica_holds_is_no_such_entry():
    h = Harness()
    writer = h.create_ledger(ensemble_size=3, write_quorum_size=3, ack_quorum_size=2)
    write_entries(h, writer, payloads(4))
    reader = h.open(writer.ledger_id, is_recovery=False).result
    completed = h.run(reader.ctx.client_id,
                      lambda op: reader.read(op, 2, 6, now_ns=h.now_ns, is_unconfirmed_allowed=True))
    assert isinstance(completed.error, NoSuchEntry) and completed.error.entry_id == 4


def test_batches_never_cross_an_ensemble_change():
    h = Harness(bookie_count=4)
    writer = h.create_ledger(ensemble_size=3, write_quorum_size=3, ack_quorum_size=2)
    write_entries(h, writer, payloads(10))
    h.crash(writer.metadata.last_ensemble[0])
    entries = payloads(20)
    write_entries(h, writer, entries[10:])
    h.close(writer)
    boundaries = [first for first, _ in writer.metadata.ensembles]
    assert len(boundaries) == 2
    asked = []
    h.drop_messages(lambda s, d, m: asked.append((m.first_entry_id, m.count_max))
                    if type(m) is ReadBatchRequest else False)
    assert read_all(h, h.open(writer.ledger_id, is_recovery=False).result) == entries
    for first, count in asked:
        assert not any(first < boundary <= first + count - 1 for boundary in boundaries)
