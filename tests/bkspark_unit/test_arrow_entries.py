"""bkspark.arrow_entries without a JVM: entries packed straight from Arrow buffers are, byte for
byte, the entries the stream writer packs from the same records one by one, whatever the
batches' sizes and offsets into their buffers."""

import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from bkcore.stream.entry_format import unpack_entry
from bkcore.stream.records import Record, RecordBatcher
from bkcore.stream.segments import SegmentMetadata, StreamSettings
from bkcore.stream.writer_state import SegmentWriteState
from bkspark.arrow_entries import ArrowEntries, entry_parts


def _state(compression="none"):
    return SegmentWriteState(SegmentMetadata(3, 9), StreamSettings(), last_txid=-1, compression=compression)


def _arrays(txids, payloads, skip):
    """The rows as Arrow arrays that start `skip` rows into their buffers (as Spark's slices may)."""
    txid_array = pa.array([0] * skip + txids, pa.int64()).slice(skip)
    payload_array = pa.array([b"skipped"] * skip + payloads, pa.binary()).slice(skip)
    return txid_array, payload_array


@settings(max_examples=150)
@given(st.lists(st.tuples(st.lists(st.binary(max_size=90), max_size=30), st.integers(0, 3)), max_size=5),
       st.integers(120, 500), st.sampled_from(["none", "lz4"]))
def test_entries_from_arrow_buffers_are_the_entries_the_writer_packs(batches, size_max, compression):
    by_record, expected = RecordBatcher(entry_size_max=size_max), []
    reference, state = _state(compression), _state(compression)
    entries, got, txid = ArrowEntries(state, entry_size_max=size_max), [], 0
    for payloads, skip in batches:
        txids = list(range(txid, txid + len(payloads)))
        txid += len(payloads)
        for record in map(Record, txids, payloads):
            full = by_record.add(record)
            if full:
                expected.append(reference.pack(full))
        got += entries.add(*_arrays(txids, payloads, skip))
        assert entries.pending_count == by_record.pending_count
    rest = by_record.flush()
    if rest:
        expected.append(reference.pack(rest))
    got += entries.flush()
    assert got == expected and entries.flush() == []
    assert state.completed(len(got) - 1) == reference.completed(len(got) - 1)
    assert [r.payload for entry in got for r in unpack_entry(entry).records] == \
        [p for payloads, _ in batches for p in payloads]


def test_parts_are_views_of_the_arrays_own_buffers_rebased_when_sliced():
    txids, payloads = _arrays([7, 8], [b"ab", b"cde"], 2)
    txid_view, offsets_view, values_view = entry_parts(txids, payloads)
    assert (bytes(txid_view), bytes(values_view)) == ((7).to_bytes(8, "little") + (8).to_bytes(8, "little"), b"abcde")
    assert bytes(offsets_view) == b"".join(n.to_bytes(4, "little") for n in (0, 2, 5))
    # No copy: the views are of the very memory the arrays hold.
    assert txid_view.obj.address == txids.buffers()[1].address
    assert values_view.obj.address == payloads.buffers()[2].address


def test_a_row_too_large_for_an_entry_is_refused_before_any_is_taken():
    entries = ArrowEntries(_state(), entry_size_max=200)
    assert entries.add(*_arrays([1], [b"a"], 0)) == []
    with pytest.raises(ValueError, match="record of 500 bytes exceeds the entry size limit 200"):
        entries.add(*_arrays([2, 3], [b"b", b"y" * 500], 0))
    assert [r.payload for r in unpack_entry(entries.flush()[0]).records] == [b"a"]
