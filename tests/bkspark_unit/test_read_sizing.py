"""How much a Spark partition reads at a time: bounded by entries and by bytes."""

from bkspark.read_sizing import (
    ARROW_BATCH_BYTES, ARROW_BATCH_ENTRIES, FIRST_READ_ENTRIES, READ_BYTES_TARGET, ReadSizer, is_batch_full,
)


def test_small_entries_are_read_readbatchentries_at_a_time_after_a_small_first_read():
    sizer = ReadSizer(1000)
    assert sizer.next_count() == FIRST_READ_ENTRIES
    sizer.saw([b"x" * 100] * FIRST_READ_ENTRIES)
    assert sizer.next_count() == 1000


def test_large_entries_are_read_a_few_at_a_time_so_a_read_stays_near_its_byte_target():
    sizer = ReadSizer(1000)
    sizer.saw([b"x" * (512 * 1024)] * 4)
    assert sizer.next_count() == READ_BYTES_TARGET // (512 * 1024) == 16
    sizer.saw([b"x" * (64 * 1024 * 1024)])          # one huge entry pulls the average up
    assert 1 <= sizer.next_count() < 16


def test_a_read_asks_for_one_entry_at_least_and_readbatchentries_at_most():
    huge = ReadSizer(1000)
    huge.saw([b"x" * (2 * READ_BYTES_TARGET)])
    assert huge.next_count() == 1
    tiny = ReadSizer(5)
    assert tiny.next_count() == 5
    tiny.saw([b""] * 3)                             # empty entries: no division by zero
    assert tiny.next_count() == 5


def test_a_batch_goes_to_spark_at_its_entry_or_byte_bound():
    assert not is_batch_full(ARROW_BATCH_ENTRIES - 1, ARROW_BATCH_BYTES - 1)
    assert is_batch_full(ARROW_BATCH_ENTRIES, 0)
    assert is_batch_full(1, ARROW_BATCH_BYTES)
