"""bkspark.offsets without a JVM: the offset JSON Spark checkpoints, and the startingOffsets /
endingOffsets forms users write."""

import json

import pytest

from bkcore.stream.records import DLSN
from bkspark.offsets import UNKNOWN_LEDGER, OffsetError, OffsetSpec, StreamOffset, decode, encode, parse_offset_spec


def test_an_offset_is_position_and_ledger_and_survives_a_json_round_trip():
    offset = StreamOffset(DLSN(3, 10, 2), 17)
    assert encode(offset) == {"position": "3:10:2", "ledger": 17}
    assert decode(json.dumps(encode(offset))) == offset          # as Spark hands it back from its checkpoint
    assert decode(encode(offset)) == offset
    assert decode({"position": "4:0:0"}) == StreamOffset(DLSN(4, 0, 0), UNKNOWN_LEDGER)
    # The padded form of the `position` column is accepted too.
    assert decode({"position": "0000000003:000000000010:00002", "ledger": 17}) == offset


@pytest.mark.parametrize("checkpointed, complaint", [
    ("not json", "is not JSON"),
    ('["3:10:0", 17]', "is not {\"position\""),
    ({"ledger": 17}, "is not {\"position\""),
    ({"position": "3:10"}, "is not SEGMENT:ENTRY:SLOT"),
    ({"position": "3:10:0", "ledger": "17"}, "\"ledger\" must be an integer ledger id"),
    ({"position": "3:10:0", "ledger": True}, "\"ledger\" must be an integer ledger id"),
])
def test_a_checkpointed_offset_that_cannot_be_understood_is_named(checkpointed, complaint):
    with pytest.raises(OffsetError) as failure:
        decode(checkpointed)
    assert complaint in str(failure.value)


def test_the_offset_forms_users_write():
    def parse(text, default="earliest"):
        return parse_offset_spec(text, option="startingOffsets", default=default)

    assert parse(None) == OffsetSpec("earliest")
    assert parse(None, default="latest") == OffsetSpec("latest")
    assert parse("  LATEST ") == OffsetSpec("latest")
    assert parse('{"position": "3:10:0"}') == OffsetSpec("position", position=DLSN(3, 10, 0))
    spec = parse('{"position": "3:10:0", "ledger": 17}')
    assert spec == OffsetSpec("position", position=DLSN(3, 10, 0), ledger_id=17)
    assert spec.as_offset() == StreamOffset(DLSN(3, 10, 0), 17)
    assert parse('{"txid": 1200}') == OffsetSpec("txid", value=1200)
    assert parse('{"timestamp": 1700000000000}') == OffsetSpec("timestamp", value=1700000000000)


@pytest.mark.parametrize("text, complaint", [
    ("{nope", "option endingOffsets='{nope' is neither earliest, latest nor JSON"),
    ("newest", "option endingOffsets='newest' is neither earliest, latest nor JSON"),
    ('{"txid": -1}', "option endingOffsets: txid must be a non-negative integer, not -1"),
    ('{"txid": "12"}', "option endingOffsets: txid must be a non-negative integer, not '12'"),
    ('{"timestamp": 1.5}', "option endingOffsets: timestamp must be a non-negative integer, not 1.5"),
    ('{"offset": 3}', "a JSON offset has one of the keys position, txid, timestamp"),
    ('{"position": "x"}', "is not SEGMENT:ENTRY:SLOT"),
])
def test_offset_options_that_cannot_be_understood_name_the_option(text, complaint):
    with pytest.raises(OffsetError) as failure:
        parse_offset_spec(text, option="endingOffsets", default="latest")
    assert complaint in str(failure.value)
