"""How much a Spark partition reads at a time, and how much it has on its way: bounded by
entries and by bytes."""

import concurrent.futures

from bkspark.read_sizing import (
    ARROW_BATCH_BYTES, ARROW_BATCH_ENTRIES, FIRST_READ_ENTRIES, READ_AHEAD_BYTES, READ_BYTES_TARGET, ReadSizer,
    is_batch_full, read_range,
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


class _Bookies:
    """bk.submit for read_range: each read of entries first..last answers at once with
    entries of entry_size bytes (None once `deleted_from` is reached), the first
    `answered_count` reads only if given (the others stay on their way); the reads are kept."""

    def __init__(self, entry_size: int, deleted_from: int | None = None, answered_count: int | None = None) -> None:
        self.entry_size, self.deleted_from, self.answered_count = entry_size, deleted_from, answered_count
        self.reads: list[tuple[int, int]] = []
        self.futures: list[concurrent.futures.Future] = []

    def submit(self, _read_entries, _handle, first: int, last: int) -> concurrent.futures.Future:
        self.reads.append((first, last))
        future = concurrent.futures.Future()
        self.futures.append(future)
        if self.answered_count is None or len(self.futures) <= self.answered_count:
            deleted = self.deleted_from is not None and last >= self.deleted_from
            future.set_result(None if deleted else [bytes(self.entry_size)] * (last - first + 1))
        return future


def test_reads_in_flight_wait_for_the_first_then_fill_the_byte_budget_small_entries_up_to_the_count_cap():
    bookies = _Bookies(1024)
    reads = read_range(bookies, None, 0, 99_999, entries_max=1000, in_flight_max=32)
    first, payloads = next(reads)
    assert (first, len(payloads)) == (0, FIRST_READ_ENTRIES)
    # Until the first read came back the entries' size was unknown: it went alone. Then 32
    # reads of 1,000 entries of 1 KiB: 32 MiB, the budget, and the count cap.
    assert len(bookies.reads) == 1 + 32
    assert READ_AHEAD_BYTES == 32 * 1024 * 1024
    assert all(last - first == 999 for first, last in bookies.reads[1:])


def test_large_entries_have_as_many_bytes_in_flight_in_fewer_reads():
    bookies = _Bookies(512 * 1024)
    reads = read_range(bookies, None, 0, 9_999, entries_max=1000, in_flight_max=32)
    next(reads)
    sizes = [(last - first + 1) * 512 * 1024 for first, last in bookies.reads[1:]]
    assert sizes == [READ_BYTES_TARGET] * (READ_AHEAD_BYTES // READ_BYTES_TARGET)
    next(reads)                      # one taken: one more goes out
    assert len(bookies.reads) == 1 + READ_AHEAD_BYTES // READ_BYTES_TARGET + 1


def test_reads_cover_the_range_in_order_and_stop_at_a_deleted_ledger():
    bookies = _Bookies(100)
    got = list(read_range(bookies, None, 5, 4_321, entries_max=1000, in_flight_max=4))
    assert [first for first, _ in got] == [first for first, _ in bookies.reads]
    assert sum(len(payloads) for _, payloads in got) == 4_321 - 5 + 1
    deleted = _Bookies(100, deleted_from=2_000)
    got = list(read_range(deleted, None, 0, 9_999, entries_max=1000, in_flight_max=4))
    assert got[-1][1] is None and all(payloads is not None for _, payloads in got[:-1])


def test_a_caller_that_stops_early_cancels_the_reads_not_yet_started():
    bookies = _Bookies(1024, answered_count=2)
    reads = read_range(bookies, None, 0, 99_999, entries_max=1000, in_flight_max=8)
    next(reads)
    next(reads)
    waiting = bookies.futures[2:]
    assert len(waiting) == 8 and not any(future.done() for future in waiting)
    reads.close()
    assert all(future.cancelled() for future in waiting)
