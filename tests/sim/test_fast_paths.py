"""The simulator's hot paths, written for speed, against plain reference versions: the same
draws from the same seeds, the same bytes, the same answers.

Each reference here is the straightforward code a fast path replaced (expovariate calls, packb,
generator-built write sets, the dataclass-generated __init__)."""

import dataclasses
import inspect
import random
import struct
from dataclasses import dataclass

import msgpack
import pytest

from bkcore.bookie.journal import (
    EntriesRecord, EntryRecord, FenceRecord, ForceRecord, JournalRecordKind, LacRecord, MasterKeyRecord,
    RecordEncoder, encode_record, scan_records,
)
from bkcore.bookie.index import (
    ENTRY_PREFIX, LEDGER_PREFIX, MemoryIndexStore, entry_id_of, entry_key, entry_prefix, ledger_key, pack_location,
    unpack_location,
)
from bkcore.digest import DigestType
from bkcore.ledger.metadata import LedgerMetadata
from bkcore.ledger.schedule import WRITE_SET_SHAPES_MAX, write_set
from bkcore.wire import AddRequest, ReadRequest, ReadResponse, store_fields_directly
from bkcore.effects import Completed, Send
from bksim.disk import draw_sync_latency_ns
from bksim.harness import Harness
from bksim.loop import EventLoop, EventLoopFull, TraceHasher
from bksim.network import LINK_LATENCY_SCALES, SimNetwork
from bksim.world import PUMP_ROUND_COUNT_MAX
from bksim.options import MS, DiskOptions, NetworkOptions

# -- network and disk draws ---------------------------------------------------------------


def _reference_delays_ns(rng, options, link_scale, source, destination):
    """SimNetwork's fate of one message as first written: expovariate, a latency per copy."""
    if options.loss_probability and rng.random() < options.loss_probability:
        return []
    link = (source, destination)

    def latency_ns():
        scale = link_scale.get(link)
        if scale is None:
            scale = link_scale[link] = rng.choice(LINK_LATENCY_SCALES)
        latency = options.latency_min_ns
        extra_ns = options.latency_mean_ns - options.latency_min_ns
        if extra_ns > 0:
            latency += int(rng.expovariate(1 / extra_ns) * scale)
        if options.reorder_probability and rng.random() < options.reorder_probability:
            latency += rng.randrange(options.reorder_delay_max_ns + 1)
        return latency

    if options.duplicate_probability and rng.random() < options.duplicate_probability:
        return [latency_ns(), latency_ns()]
    return [latency_ns()]


@pytest.mark.parametrize("options", [
    NetworkOptions.none(),
    NetworkOptions(latency_min_ns=100_000, latency_mean_ns=900_000, loss_probability=0.1,
                   duplicate_probability=0.2, reorder_probability=0.3, reorder_delay_max_ns=5 * MS),
])
def test_network_delays_are_the_reference_draws(options):
    network = SimNetwork(rng=random.Random(7), options=options)
    reference_rng, link_scale = random.Random(7), {}
    for index in range(5_000):
        source, destination = f"n{index % 3}", f"n{index % 5}"
        expected = _reference_delays_ns(reference_rng, options, link_scale, source, destination)
        if index % 2:
            assert network.delays_ns(source, destination, 0) == expected
        else:
            assert network.delivery_delays_ns(source=source, destination=destination, now_ns=0) == expected


def test_fsync_latency_is_the_reference_draw():
    options = DiskOptions(fsync_latency_min_ns=50_000, fsync_latency_mean_ns=400_000)
    rng, reference = random.Random(3), random.Random(3)
    for _ in range(2_000):
        extra_ns = options.fsync_latency_mean_ns - options.fsync_latency_min_ns
        expected = options.fsync_latency_min_ns + int(reference.expovariate(1 / extra_ns))
        assert draw_sync_latency_ns(rng, options) == expected


# -- event loop limits --------------------------------------------------------------------


def test_peak_is_the_largest_heap_and_the_limit_still_holds():
    loop = EventLoop(pending_count_max=5)
    sizes = []
    for at_ns in (5, 3, 9, 1):
        loop.post_at(at_ns, lambda: None)
        sizes.append(loop.pending_count)
    loop.run_until(3)                       # two run: the heap shrinks, the peak stays
    handle = loop.call_at(20, lambda: None)
    assert loop.statistics().pending_count_peak == max(sizes) == 4
    loop.call_later(1, lambda: None)
    loop.call_at(30, lambda: None)
    assert loop.statistics().pending_count_peak == 5
    loop.cancel(handle)
    loop.post_at(40, lambda: None)          # full: fits after dropping the cancelled event
    with pytest.raises(EventLoopFull):
        loop.post_at(50, lambda: None)
    loop.invariants()


# -- trace encoding -----------------------------------------------------------------------


def _reference_digest(records):
    packer = msgpack.Packer(use_bin_type=True, unicode_errors="surrogatepass",
                            default=lambda value: msgpack.ExtType(1, str(value).encode("ascii")))
    import hashlib
    return hashlib.blake2b(b"".join(packer.pack(tuple(r)) for r in records), digest_size=16).hexdigest()


@pytest.mark.parametrize("count", [0, 1, 15, 16, 1023, 1024, 1025, 70_000])
def test_trace_digest_is_the_concatenated_records_whatever_the_batch(count):
    records = [(i, f"node-{i % 7}", b"x" * (i % 5), None, i % 2 == 0, 2**70 + i) for i in range(count)]
    trace = TraceHasher()
    for index, record in enumerate(records):
        if index % 3:
            trace.record(*record)
        else:
            trace.record_plain(record)
    assert trace.hexdigest() == _reference_digest(records) and trace.record_count == count


def test_trace_passes_lone_surrogates_through():
    trace = TraceHasher()
    trace.record("\udc80", 1)
    assert trace.hexdigest() == _reference_digest([("\udc80", 1)])


# -- journal records ----------------------------------------------------------------------

RECORDS = [
    EntryRecord(5, 7, b"x" * 100), EntryRecord(2**40, 0, b""), EntryRecord(-3, 2**63 - 1, b"y" * 70_000),
    MasterKeyRecord(1, b"k" * 32), FenceRecord(3), LacRecord(1, -1, b"zz"), ForceRecord(9),
    EntriesRecord(1, 2, [b"a", b"b" * 300]),
]
KINDS = {EntryRecord: JournalRecordKind.ENTRY, MasterKeyRecord: JournalRecordKind.MASTER_KEY,
         FenceRecord: JournalRecordKind.FENCE, LacRecord: JournalRecordKind.LAC,
         ForceRecord: JournalRecordKind.FORCE, EntriesRecord: JournalRecordKind.ENTRIES}


@pytest.mark.parametrize("record", RECORDS)
def test_record_payload_is_packb_of_kind_and_fields(record):
    fields = [getattr(record, name) for name in record.__slots__]
    expected = msgpack.packb([int(KINDS[type(record)]), *fields], use_bin_type=True)
    encoder = RecordEncoder()
    for _ in range(2):                      # the reused Packer starts clean every time
        assert encoder.encode(record)[8:] == expected
    assert encode_record(record) == encoder.encode(record)
    if type(record) is EntryRecord:
        assert encoder.encode_entry(record.ledger_id, record.entry_id, record.body) == encoder.encode(record)
    assert scan_records(encoder.encode(record)).records == [record]


def test_encoder_recovers_after_a_record_it_cannot_pack():
    encoder = RecordEncoder()
    with pytest.raises(OverflowError):
        encoder.encode(EntryRecord(1, 2**64, b""))
    assert encoder.encode(RECORDS[0]) == encode_record(RECORDS[0])


# -- write sets ---------------------------------------------------------------------------


def test_write_sets_are_the_round_robin_positions():
    shapes = [(e, q) for e in range(1, 13) for q in range(1, e + 1)]
    assert len(shapes) > WRITE_SET_SHAPES_MAX     # past the table's bound too
    for ensemble_size, write_quorum_size in shapes:
        for entry_id in range(3 * ensemble_size):
            assert write_set(entry_id, ensemble_size=ensemble_size, write_quorum_size=write_quorum_size) == \
                tuple((entry_id + i) % ensemble_size for i in range(write_quorum_size))


# -- index keys and locations -------------------------------------------------------------


@pytest.mark.parametrize("ledger_id, entry_id", [(0, 0), (1, 2), (2**40, 7), (2**64 - 1, 2**64 - 1)])
def test_entry_keys_and_locations_are_the_prefixed_pairs(ledger_id, entry_id):
    pair = struct.Struct(">QQ")
    assert entry_key(ledger_id, entry_id) == ENTRY_PREFIX + pair.pack(ledger_id, entry_id)
    assert entry_id_of(entry_key(ledger_id, entry_id)) == entry_id
    assert entry_key(ledger_id, entry_id).startswith(entry_prefix(ledger_id))
    assert pack_location(ledger_id, entry_id) == pair.pack(ledger_id, entry_id)
    assert unpack_location(pack_location(ledger_id, entry_id)) == (ledger_id, entry_id)


def test_entry_keys_refuse_what_the_pairs_refuse():
    for ledger_id, entry_id in [(-1, 0), (0, -1), (2**64, 0)]:
        with pytest.raises(struct.error):
            struct.pack(">QQ", ledger_id, entry_id)
        with pytest.raises(struct.error):
            entry_key(ledger_id, entry_id)


class _ReferenceIndex:
    """The sorted map MemoryIndexStore stands for, written plainly: sort on every query."""

    def __init__(self):
        self.data = {}

    def write(self, puts, deletes):
        for key in deletes:
            self.data.pop(key, None)
        self.data.update(puts)

    def keys(self, prefix=b""):
        return [key for key in sorted(self.data) if key.startswith(prefix)]


@pytest.mark.parametrize("seed", range(5))
def test_memory_index_answers_as_a_plain_sorted_map(seed):
    rng = random.Random(seed)
    index, reference = MemoryIndexStore(), _ReferenceIndex()
    ledger_ids = [1, 2, 3, 2**40]
    for _ in range(300):
        new_count = rng.choice([0, 1, 3, 40])     # a checkpoint's few keys, or a large batch
        puts = {entry_key(rng.choice(ledger_ids), rng.randrange(500)): bytes([rng.randrange(256)])
                for _ in range(new_count)}
        puts.update({ledger_key(rng.choice(ledger_ids)): b"state" for _ in range(rng.randrange(2))})
        known = sorted(reference.data)
        deletes = rng.sample(known, min(len(known), rng.choice([0, 0, 1, 5]))) + [entry_key(9, 9)]
        index.write(puts, deletes)
        reference.write(puts, deletes)
        index.invariants()
        for ledger_id in ledger_ids + [7]:
            expected = reference.keys(entry_prefix(ledger_id))
            assert list(index.keys_with_prefix(entry_prefix(ledger_id))) == expected
            assert index.last_key_with_prefix(entry_prefix(ledger_id)) == (expected[-1] if expected else None)
            first = entry_key(ledger_id, rng.randrange(500))
            following = [key for key in sorted(reference.data) if key >= first][:10]
            assert index.items_from(first, 10) == [(key, reference.data[key]) for key in following]
        assert list(index.keys_with_prefix(LEDGER_PREFIX)) == reference.keys(LEDGER_PREFIX)
        assert all(index.get(key) == value for key, value in reference.data.items())


# -- dataclasses that store their fields directly -----------------------------------------


@dataclass(frozen=True, slots=True)
class _Plain:
    a: int
    b: bytes = b""
    c: bool = False


@store_fields_directly
@dataclass(frozen=True, slots=True)
class _Direct:
    a: int
    b: bytes = b""
    c: bool = False


@store_fields_directly
@dataclass(frozen=True, slots=True)
class _Checked:
    a: int

    def __post_init__(self):
        if self.a < 0:
            raise ValueError("negative")


def test_direct_init_behaves_like_the_generated_one():
    assert str(inspect.signature(_Direct)) == str(inspect.signature(_Plain))
    for args, kwargs in [((1,), {}), ((1, b"x"), {}), ((1,), {"c": True}), ((), {"a": 2, "b": b"y", "c": True})]:
        direct, plain = _Direct(*args, **kwargs), _Plain(*args, **kwargs)
        assert dataclasses.astuple(direct) == dataclasses.astuple(plain)
        assert direct == _Direct(*args, **kwargs) and hash(direct) == hash(_Direct(*args, **kwargs))
    with pytest.raises(dataclasses.FrozenInstanceError):
        _Direct(1).a = 2
    with pytest.raises(TypeError):
        _Direct()
    with pytest.raises(TypeError):
        _Direct(1, d=3)
    assert dataclasses.replace(_Direct(1, b"x"), c=True) == _Direct(1, b"x", True)
    assert _Checked(1).a == 1
    with pytest.raises(ValueError):
        _Checked(-1)


def test_messages_and_metadata_keep_their_defaults_and_checks():
    request = ReadRequest(1, 2, 3)
    assert (request.master_key, request.is_fencing, request.previous_lac, request.long_poll_timeout_ns) == \
        (b"", False, -1, 0)
    assert ReadResponse(1, 0, 2, 3).lac == -1
    assert AddRequest(1, 2, 3, b"k", b"body").is_recovery is False
    metadata = LedgerMetadata(ledger_id=5, ensemble_size=3, write_quorum_size=3, ack_quorum_size=2,
                              ensembles=((0, ("a", "b", "c")),), digest_type=DigestType.CRC32C,
                              password_hash=b"x" * 32)
    assert LedgerMetadata.from_bytes(metadata.to_bytes(), version=-1) == metadata
    with pytest.raises(ValueError):
        dataclasses.replace(metadata, ack_quorum_size=4)


# -- the world's pump ---------------------------------------------------------------------


class _ScriptedCore:
    """A client core that hands out the rounds it was given, then a Completed every time if
    asked to keep talking."""

    def __init__(self, rounds, *, is_endless=False):
        self.rounds = list(rounds)
        self.is_endless = is_endless
        self.taken_count = 0

    def take_effects(self):
        self.taken_count += 1
        if self.rounds:
            return self.rounds.pop(0)
        return [Completed(self.taken_count)] if self.is_endless else []

    def next_deadline_ns(self):
        return None


def _world_with_core(core):
    h = Harness(bookie_count=1)
    h.client("c")
    node = h.world.clients["c"]
    node.set_core(core)
    node.on_completed = lambda client_id, completed, now_ns: None
    return h.world, node


def test_pump_counts_sends_only_and_asks_again_only_after_other_effects():
    core = _ScriptedCore([[Send("bookie-0", object()), Completed(1), Send("nowhere", object())],
                          [Send("bookie-0", object())], [Completed(2)]])
    world, node = _world_with_core(core)
    sent_before = world.counts.messages_sent
    world._pump(node)
    # Round 1 had a Completed, so the core was asked again; round 2 was sends only: not asked a
    # third time. Sends to unknown nodes count as sent (and vanish).
    assert core.taken_count == 2 and core.rounds == [[Completed(2)]]
    assert world.counts.messages_sent - sent_before == 3


def test_pump_refuses_a_core_that_never_stops_talking():
    world, node = _world_with_core(_ScriptedCore([], is_endless=True))
    with pytest.raises(AssertionError, match="effects kept coming"):
        world._pump(node)
    assert node.core.taken_count == PUMP_ROUND_COUNT_MAX + 1


def test_world_runs_its_own_copy_of_each_input_handler_per_kind_of_node():
    """Bookies and clients go through copies of _deliver, _pump and _on_timer with code objects
    of their own (so each specializes to one kind of core), made from the same bytecode."""
    from bksim.world import SimWorld
    h = Harness(bookie_count=1)
    h.client("c")
    bookie, client = h.world.bookies["bookie-0"], h.world.clients["c"]
    for name, bookie_copy, client_copy in (("_deliver", "_deliver_to_bookie", "_deliver_to_client"),
                                           ("_pump", "_pump_bookie", "_pump_client"),
                                           ("_on_timer", "_on_bookie_timer", "_on_client_timer")):
        original = getattr(SimWorld, name).__code__
        copies = [getattr(SimWorld, bookie_copy).__code__, getattr(SimWorld, client_copy).__code__]
        assert copies[0] is not copies[1] and all(code is not original for code in copies)
        assert all(code.co_code == original.co_code and code.co_consts == original.co_consts for code in copies)
    assert bookie.deliver.__func__ is SimWorld._deliver_to_bookie and client.deliver.__func__ is SimWorld._deliver_to_client
    assert bookie.pump.__func__ is SimWorld._pump_bookie and client.pump.__func__ is SimWorld._pump_client
    assert bookie.on_timer.__func__ is SimWorld._on_bookie_timer and client.on_timer.__func__ is SimWorld._on_client_timer


def test_a_nodes_bound_core_methods_follow_its_core():
    h = Harness(bookie_count=1)
    node = h.world.bookies["bookie-0"]
    assert node.take_effects.__self__ is node.core and node.next_deadline_ns.__self__ is node.core
    h.world.crash_bookie("bookie-0", restart_after_ns=None)
    assert node.core is None and node.take_effects is None and node.next_deadline_ns is None
    h.world._restart_bookie("bookie-0")
    assert node.core is not None and node.take_effects.__self__ is node.core
