"""Client settings, with BookKeeper's defaults where BookKeeper has the same knob."""

from __future__ import annotations

from dataclasses import dataclass

MS = 1_000_000


@dataclass(frozen=True, slots=True)
class ClientConfig:
    # addEntryTimeoutSec: an add not acknowledged by a bookie in this time counts as that
    # bookie's failure and triggers an ensemble change.
    add_entry_timeout_ns: int = 5_000 * MS
    # readEntryTimeoutSec
    read_entry_timeout_ns: int = 5_000 * MS
    # speculativeReadTimeout: ask the next replica if the first has not answered in this time.
    speculative_read_timeout_ns: int = 2_000 * MS
    # explicitLacInterval: a writer whose adds have all completed sends its LAC explicitly, at
    # most once per interval (0: never), so that a tailing reader sees its last add without
    # waiting for the next one to carry the LAC. BookKeeper's default is off; here it is on:
    # bookies take an explicit LAC without an fdatasync of its own, and a writer with adds in
    # flight never sends it (they carry the LAC). Its application's habit also counts: one that
    # added again within the interval after going idle last time gets the push
    # explicit_lac_hold_ns later, unless it adds before then (that add carries the LAC
    # instead). Half a millisecond: a loaded two-core machine often takes longer than 0.2 ms
    # to get an application from one acknowledgement to its next add, and each push is a
    # message to every bookie.
    explicit_lac_interval_ns: int = MS // 2
    # How long such a writer, one that adds again at once, waits before pushing: a few adds'
    # time, so that its timer rarely fires (each firing wakes the client) while its adds keep
    # coming; readers of its last add wait at most this long once it stops.
    explicit_lac_hold_ns: int = 5 * MS
    # How many ensemble changes one writer may make before it gives up.
    ensemble_change_count_max: int = 20
    # Metadata compare-and-set retries and the pause between retries after a lost connection.
    metadata_retry_count_max: int = 50
    metadata_retry_delay_ns: int = 100 * MS
    # Pending adds of one writer beyond which add() fails with TooManyRequests.
    pending_adds_count_max: int = 50_000
    # Concurrent recovery reads (each to the whole write set).
    recovery_read_batch_count: int = 8
    # Long-poll wait the client asks of a bookie when tailing.
    long_poll_timeout_ns: int = 10_000 * MS
    entry_size_max: int = 5 * 1024 * 1024
    # Batch reads (BookKeeper's batchRead, BP-62) of ledgers whose bookies each hold every entry
    # (E == Qw): at most this many entries and bytes per request; 0 entries reads one entry per
    # request, as for striped ledgers.
    read_batch_count_max: int = 1000
    read_batch_size_max: int = 2 * 1024 * 1024
