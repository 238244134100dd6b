"""EntryLogger.append_many: where records land when writes and rolls fall inside a batch."""

import random

import pytest

import bkcore.bookie.entrylog as entrylog
from bkcore.bookie.entrylog import ENTRY_KEY, RECORD_HEADER, EntryLogger
from bkcore.bookie.index import unpack_location
from bksim.filesystem import SimFileSystem
from bksim.options import DiskOptions

RECORD_OVERHEAD_SIZE = RECORD_HEADER.size + ENTRY_KEY.size


def logger(entry_log_size_max: int) -> EntryLogger:
    fs = SimFileSystem(rng=random.Random(1), options=DiskOptions.none())
    entry_logger = EntryLogger(fs=fs, ledger_dir="ledgers", entry_log_size_max=entry_log_size_max)
    entry_logger.open()
    return entry_logger


@pytest.mark.parametrize("batch_count", [1, 3, 1024])
@pytest.mark.parametrize("write_size", [1, 100, 300, 1 << 20])
def test_every_record_is_where_its_location_says_and_the_usage_adds_up(monkeypatch, write_size, batch_count):
    """Bodies from empty to larger than a whole log, two ledgers, writes every few records (or
    after every one), rolls inside a ledger's run, batches of records that end anywhere: each
    location reads back its own record, every log holds exactly the records placed in it, and
    the usage per (log, ledger) is the sum of their sizes."""
    monkeypatch.setattr(entrylog, "APPEND_WRITE_SIZE", write_size)
    monkeypatch.setattr(entrylog, "APPEND_BATCH_COUNT", batch_count)
    entry_logger = logger(entry_log_size_max=250)
    sizes = [0, 5, 40, 300, 1, 90, 90, 90, 500, 7, 60]
    runs = [(ledger_id, 0, [bytes([entry_id]) * size for entry_id, size in enumerate(sizes)]) for ledger_id in (2, 5)]
    runs += [(ledger_id, 7, [b"one"]) for ledger_id in (6, 7, 8)]            # runs of one entry
    appended = entry_logger.append_many(runs)
    assert [(ledger_id, first) for ledger_id, first, _ in appended.runs] == [(ledger_id, first) for ledger_id, first, _ in runs]
    expected_usage: dict[tuple[int, int], int] = {}
    placed: dict[int, list[tuple[int, int, int, int]]] = {}
    for (ledger_id, first, bodies), (_, _, locations) in zip(runs, appended.runs):
        assert len(locations) == len(bodies)
        for entry_id, body, location in zip(range(first, first + len(bodies)), bodies, locations):
            log_id, offset = unpack_location(location)
            assert entry_logger.read((log_id, offset), ledger_id=ledger_id, entry_id=entry_id) == body
            placed.setdefault(log_id, []).append((offset, ledger_id, entry_id, len(body)))
            usage_key = (log_id, ledger_id)
            expected_usage[usage_key] = expected_usage.get(usage_key, 0) + RECORD_OVERHEAD_SIZE + len(body)
    assert appended.sizes == expected_usage
    assert len(placed) > 3                      # it rolled, several times
    for log_id, records in placed.items():
        assert list(entry_logger.scan(log_id)) == records
        # A log passes its limit only when its one record is larger than the limit.
        end = records[-1][0] + RECORD_OVERHEAD_SIZE + records[-1][3]
        assert end <= 250 or len(records) == 1


def test_appends_continue_the_current_log_where_the_last_ended():
    entry_logger = logger(entry_log_size_max=1 << 20)
    first = entry_logger.append_many([(1, 0, [b"a" * 10])])
    second = entry_logger.append_many([(1, 1, [b"b" * 20, b"c"])])
    offsets = [unpack_location(location)[1] for location in first.runs[0][2] + second.runs[0][2]]
    assert offsets == [16, 16 + RECORD_OVERHEAD_SIZE + 10, 16 + 2 * RECORD_OVERHEAD_SIZE + 30]
    assert entry_logger.current_size == 16 + 3 * RECORD_OVERHEAD_SIZE + 31


def test_small_runs_of_many_ledgers_share_one_write(monkeypatch):
    entry_logger = logger(entry_log_size_max=1 << 20)
    writes = []
    append = entry_logger.fs.append
    monkeypatch.setattr(entry_logger.fs, "append", lambda path, data: (writes.append(len(data)), append(path, data)))
    appended = entry_logger.append_many([(ledger_id, 0, [b"x" * 10]) for ledger_id in range(1, 101)])
    assert writes == [100 * (RECORD_OVERHEAD_SIZE + 10)]
    assert len(appended.runs) == 100


# -- a batch read's runs: run_bodies against its plain reference --------------------------------

def _records(rng: random.Random, ledger_id: int, first_entry_id: int, count: int) -> list[bytes]:
    records = []
    for entry_id in range(first_entry_id, first_entry_id + count):
        payload = ENTRY_KEY.pack(ledger_id, entry_id) + rng.randbytes(rng.choice([0, 1, 7, 100, 1024]))
        records.append(RECORD_HEADER.pack(len(payload), entrylog.crc32c.crc32c(payload)) + payload)
    return records


def _damaged_run(rng: random.Random) -> tuple[bytes, list[int]]:
    """The offsets an index might give for entries 5.. of ledger 3 and a log's bytes from the
    first: a run with a gap, a foreign record, a flipped bit, a cut end, offsets out of order
    (each now and then)."""
    records = _records(rng, 3, 5, rng.randrange(1, 12))
    if rng.random() < 0.3:                       # another ledger's record in the middle
        records.insert(rng.randrange(len(records) + 1), _records(rng, 4, 5, 1)[0])
    if rng.random() < 0.3:                       # a gap: the rest of the run written later
        records.insert(rng.randrange(len(records) + 1), b"\0" * rng.randrange(1, 64))
    data = bytearray(b"".join(records))
    if rng.random() < 0.4:
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    base_offset = 16
    offsets, position = [], base_offset
    for record in records:
        if len(record) >= RECORD_OVERHEAD_SIZE and ENTRY_KEY.unpack_from(record, RECORD_HEADER.size)[0] == 3:
            offsets.append(position)
        position += len(record)
    if rng.random() < 0.2 and len(offsets) > 2:
        index = rng.randrange(1, len(offsets))
        offsets[index] += rng.choice([-1, 1, 8, -(offsets[index] - base_offset) - 5])
    if rng.random() < 0.3:
        data = data[:rng.randrange(len(data) + 1)]
    offsets = offsets[:rng.randrange(len(offsets) + 1)]
    return bytes(data[offsets[0] - base_offset:] if offsets else b""), offsets


@pytest.mark.parametrize("seed", range(400))
def test_run_bodies_finds_what_the_plain_walk_finds(seed):
    data, offsets = _damaged_run(random.Random(seed))
    expected = entrylog.run_bodies_plain(data, offsets, ledger_id=3, first_entry_id=5)
    assert entrylog.run_bodies(data, offsets, ledger_id=3, first_entry_id=5) == expected


def test_run_bodies_of_a_whole_run_and_of_one_cut_short():
    records = _records(random.Random(1), 3, 5, 10)
    data = b"".join(records)
    offsets = [sum(map(len, records[:index])) for index in range(10)]
    bodies = [record[RECORD_OVERHEAD_SIZE:] for record in records]
    assert entrylog.run_bodies(data, offsets, ledger_id=3, first_entry_id=5) == bodies
    assert entrylog.run_bodies(data[:offsets[7] + 3], offsets, ledger_id=3, first_entry_id=5) == bodies[:7]
    assert entrylog.run_bodies(data, offsets, ledger_id=3, first_entry_id=6) == []
    assert entrylog.run_bodies(data, offsets, ledger_id=2, first_entry_id=5) == []


def test_a_walk_ends_at_another_entrys_record_without_a_checksum_over_its_body(monkeypatch):
    # Read-ahead of a striped ledger (E3 Qw2): after entry 5 this bookie's log holds entry 7.
    rng = random.Random(2)
    data = b"".join(_records(rng, 3, 5, 1) + _records(rng, 3, 7, 1))
    checksummed = []
    real_crc32c = entrylog.crc32c.crc32c

    class CountingCrc:
        @staticmethod
        def crc32c(data, value=0):
            checksummed.append(len(data))
            return real_crc32c(data, value)
    monkeypatch.setattr(entrylog, "crc32c", CountingCrc)
    found = entrylog.walk_records(data, 0, ledger_id=3, first_entry_id=5, count_max=10)
    assert [entry_id for entry_id, _, _ in found] == [5]
    assert len(checksummed) == 1, "only entry 5's record was checksummed"
