"""Re-replication of a lost bookie's fragments (autorecovery's worker), in the simulator:
BookKeeper's TestLedgerFragmentReplication and BookieRecoveryTest in spirit."""

import pytest

from bkcore.client.rereplication import fragments_on
from bkcore.errors import IllegalOperation, NoSuchEntry
from bksim.harness import Harness


def written_ledger(h: Harness, count: int, **spec):
    writer = h.create_ledger(**spec)
    for i in range(count):
        h.add(writer, b"entry-%d" % i)
    return writer


def replicate(h: Harness, metadata, bookie: str, target: str):
    client = h.client("worker")
    results = []
    for fragment in fragments_on(metadata, bookie):
        completed = h.run("worker", lambda op: client.replicate_fragment(op, metadata, fragment, target,
                                                                        now_ns=h.now_ns))
        results.append(completed)
        if completed.error is None:
            metadata = completed.result
    return metadata, results


@pytest.mark.parametrize("e,w,a", [(3, 3, 2), (3, 2, 2), (4, 2, 2)])
def test_a_lost_bookies_fragments_move_to_a_new_bookie_byte_for_byte(e, w, a):
    h = Harness(bookie_count=e + 1)
    writer = written_ledger(h, 30, ensemble_size=e, write_quorum_size=w, ack_quorum_size=a)
    metadata = h.close(writer)
    lost = metadata.last_ensemble[1]
    spare = next(b for b in h.bookie_ids if b not in metadata.last_ensemble)
    h.crash(lost)
    updated, results = replicate(h, metadata, lost, spare)
    assert all(r.error is None for r in results)
    assert lost not in updated.all_bookies() and spare in updated.last_ensemble
    fragment = fragments_on(metadata, lost)[0]
    source = next(b for b in metadata.last_ensemble if b != lost)
    for entry_id in fragment.entry_ids(metadata):
        assert h.bookie(spare).storage.get_entry(metadata.ledger_id, entry_id) is not None
    # With the lost bookie gone for good, everything reads from the new ensemble.
    reader = h.open(metadata.ledger_id, is_recovery=False).result
    completed = h.read(reader, 0, 29)
    assert completed.error is None and completed.result == [b"entry-%d" % i for i in range(30)]
    assert source in updated.last_ensemble


def test_open_ledgers_last_ensemble_is_left_to_its_writer():
    h = Harness(bookie_count=4)
    writer = written_ledger(h, 5, ensemble_size=3, write_quorum_size=3, ack_quorum_size=2)
    assert fragments_on(writer.metadata, writer.metadata.last_ensemble[0]) == []


def test_an_ensemble_that_changed_meanwhile_is_not_overwritten():
    h = Harness(bookie_count=5)
    writer = written_ledger(h, 10, ensemble_size=3, write_quorum_size=3, ack_quorum_size=2)
    metadata = h.close(writer)
    lost = metadata.last_ensemble[0]
    spares = [b for b in h.bookie_ids if b not in metadata.last_ensemble]
    h.crash(lost)
    first, _ = replicate(h, metadata, lost, spares[0])
    _, results = replicate(h, metadata, lost, spares[1])        # from the stale metadata
    assert isinstance(results[0].error, IllegalOperation)
    assert first.last_ensemble.count(spares[0]) == 1 and spares[1] not in first.all_bookies()


def test_no_surviving_copy_fails_and_leaves_metadata_alone():
    h = Harness(bookie_count=4)
    writer = written_ledger(h, 6, ensemble_size=3, write_quorum_size=2, ack_quorum_size=2)
    metadata = h.close(writer)
    lost = metadata.last_ensemble[0]
    for other in metadata.last_ensemble:
        h.crash(other)
    spare = next(b for b in h.bookie_ids if b not in metadata.last_ensemble)
    _, results = replicate(h, metadata, lost, spare)
    assert results and all(r.error is not None for r in results)
    assert isinstance(results[0].error, NoSuchEntry)
