"""The checkpoint record format of table ranges, on its own: what the writer's records parse
back to, and that torn, corrupt or malformed checkpoints are skipped, never returned."""

import crc32c
import msgpack

from bkcore.stream.records import DLSN
from bkcore.table.checkpoints import (
    CHECKPOINT_CHUNK_BYTES, CheckpointInfo, CheckpointParser, chunk_groups, end_record, header_record,
)


def checkpoint_records(items, *, journal_position, revision):
    """The records a range owner writes for one checkpoint of `items`."""
    chunks = [chunk for group in chunk_groups(items) for chunk in group]
    checksum = 0
    for chunk in chunks:
        checksum = crc32c.crc32c(chunk, checksum)
    return [header_record(journal_position, revision), *chunks, end_record(checksum, len(chunks))]


def feed(parser, records, *, segment):
    """Feed records at positions segment:0:0, segment:1:0, ...; the checkpoints that completed."""
    return [done for entry_id, payload in enumerate(records)
            if (done := parser.feed(DLSN(segment, entry_id, 0), payload)) is not None]


def test_what_is_written_parses_back_including_several_chunks():
    items = [(b"d%06d" % i, b"v" * 1000) for i in range(600)]
    records = checkpoint_records(items, journal_position=[4, 7, 1], revision=33)
    per_chunk = -(-CHECKPOINT_CHUNK_BYTES // (7 + 1000 + 8))             # 259 pairs fill a chunk
    assert len(records) == 1 + 3 + 1 and per_chunk * 2 < 600 < per_chunk * 3
    (done,) = feed(CheckpointParser(), records, segment=2)
    assert done == (CheckpointInfo(DLSN(2, 0, 0), DLSN(4, 7, 1), 33), dict(items))
    assert done[0].replay_from == DLSN(4, 7, 2)


def test_an_empty_index_still_makes_a_checkpoint_before_the_first_journal_record():
    (done,) = feed(CheckpointParser(), checkpoint_records([], journal_position=None, revision=0), segment=1)
    assert done == (CheckpointInfo(DLSN(1, 0, 0), None, 0), {})
    assert done[0].replay_from is None


def test_torn_corrupt_and_malformed_checkpoints_are_skipped():
    good = checkpoint_records([(b"k", b"v")], journal_position=[1, 0, 0], revision=1)
    torn = good[:-1]                                             # its owner died before the end record
    corrupt = [good[0], msgpack.packb(["chunk", [[b"k", b"forged"]]], use_bin_type=True), good[2]]
    malformed = [good[0], b"\xc1not msgpack", good[2]]
    short_header = [msgpack.packb(["checkpoint"]), *good[1:]]
    parser = CheckpointParser()
    for records in (torn, corrupt, malformed, short_header):
        assert feed(parser, records, segment=1) == []
    # The parser is not left confused: the next good checkpoint parses.
    (done,) = feed(parser, checkpoint_records([(b"k", b"v2")], journal_position=[1, 5, 0], revision=2), segment=3)
    assert done[1] == {b"k": b"v2"}


def test_checkpoints_a_reader_does_not_want_are_passed_over():
    wanted = CheckpointParser(lambda info: info.revision < 5)
    assert feed(wanted, checkpoint_records([(b"k", b"new")], journal_position=[2, 0, 0], revision=9), segment=1) == []
    (done,) = feed(wanted, checkpoint_records([(b"k", b"old")], journal_position=[1, 0, 0], revision=4), segment=2)
    assert done[1] == {b"k": b"old"}
