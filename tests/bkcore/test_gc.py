"""GcLedgersTest in spirit: ledgers absent from metadata are collected, in both layouts, walking
the hierarchical one partition by partition; a ledger created during the round survives."""

import random

import pytest

from bkcore.bookie.durable_storage import DurableLedgerStorage
from bkcore.bookie.gc import collect_garbage, metadata_ledger_ids
from bkcore.bookie.index import MemoryIndexStore
from bkcore.ledger.layout import LedgerLayout
from bkcore.metaops import Children, Create, Delete, MetaCode
from bkmetastore.memory import MemoryMetastore
from bksim.filesystem import SimFileSystem
from bksim.options import DiskOptions


def lister(store: MemoryMetastore, calls: list | None = None):
    def list_children(path: str):
        if calls is not None:
            calls.append(path)
        result = store.apply(Children(path))
        return list(result.children) if result.code is MetaCode.OK else None
    return list_children


@pytest.fixture(params=[False, True], ids=["flat", "hierarchical"])
def layout(request):
    return LedgerLayout(is_hierarchical=request.param)


def storage_with(ledger_ids):
    storage = DurableLedgerStorage(fs=SimFileSystem(rng=random.Random(1), options=DiskOptions.none()),
                                   index=MemoryIndexStore())
    for ledger_id in ledger_ids:
        storage.set_master_key(ledger_id, b"k")
        storage.add_entry(ledger_id, 0, b"entry")
    return storage


def test_ledgers_missing_from_metadata_are_collected(layout):
    store = MemoryMetastore()
    ids = [1, 2, 3, 12_345, 9_999_999_999]
    for ledger_id in ids:
        store.apply(Create(layout.ledger_path(ledger_id), b"md"))
    store.apply(Create(layout.available_path + "/bookie-0"))     # not a ledger: ignored
    storage = storage_with(ids)
    for ledger_id in (2, 12_345):
        store.apply(Delete(layout.ledger_path(ledger_id)))
    report = collect_garbage(storage, layout, lister(store))
    assert report.deleted_ledger_ids == (2, 12_345)
    assert storage.ledger_ids() == [1, 3, 9_999_999_999]
    assert storage.get_entry(2, 0) is None and storage.get_entry(1, 0) == b"entry"
    storage.checkpoint()
    assert storage.ledger_ids() == [1, 3, 9_999_999_999]


def test_hierarchical_walk_lists_one_partition_at_a_time():
    layout = LedgerLayout(is_hierarchical=True)
    store = MemoryMetastore()
    ids = [1, 2, 10_001, 20_000_000, 1_234_567_890]
    for ledger_id in ids:
        store.apply(Create(layout.ledger_path(ledger_id), b"md"))
    partitions = list(metadata_ledger_ids(layout, lister(store)))
    assert [i for p in partitions for i in p] == sorted(ids)
    assert max(len(p) for p in partitions) == 2, "no listing may hold every ledger id"


def test_a_ledger_created_during_the_round_survives(layout):
    store = MemoryMetastore()
    storage = storage_with([1])
    store.apply(Create(layout.ledger_path(1), b"md"))

    def list_children(path):
        # A new ledger appears on the bookie while metadata is being listed (its metadata was
        # created just before, but after the listing passed it).
        if not storage.has_ledger(7):
            storage.set_master_key(7, b"k")
            storage.add_entry(7, 0, b"new")
        return lister(store)(path)

    report = collect_garbage(storage, layout, list_children)
    assert report.deleted_ledger_ids == ()
    assert storage.has_ledger(7)


def test_an_empty_root_collects_everything_but_a_missing_root_collects_nothing():
    storage = storage_with([4, 5])
    assert collect_garbage(storage, LedgerLayout(), lister(MemoryMetastore())).deleted_ledger_ids == ()
    assert storage.ledger_ids() == [4, 5]
    store = MemoryMetastore()
    store.apply(Create("/ledgers/available/bookie-0"))
    assert collect_garbage(storage, LedgerLayout(), lister(store)).deleted_ledger_ids == (4, 5)
