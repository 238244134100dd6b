"""BookieStack: one bookie with its journal and ledger storage over a FileSystem and an IndexStore.

The pieces a driver needs to run a durable bookie, composed once so that the simulator, tests
and real processes run the same sequence:
  start()          check the cookies, replay the journal from the LastLogMark into storage;
  write_journal()  append a JournalWrite's group (remembering where it ends);
  sync_journal()   make it durable (and the writes before it); the driver then calls
                   core.on_persisted(token) for each, oldest first (or its two halves);
  checkpoint()     storage first (entry logs flushed, index committed), then the LastLogMark,
                   then delete journals it made unnecessary — the order that loses nothing
                   (also in steps, begin/write/finish/advance, for threaded drivers).
Calls block on I/O: real drivers run them in a worker thread.
"""

from __future__ import annotations

from typing import Iterator

from bkcore.bookie.bookie import Bookie, BookieConfig
from bkcore.bookie.cookie import Cookie, check_cookies
from bkcore.bookie.durable_storage import (
    CheckpointPlan, DurableLedgerStorage, Pacer, PhaseTimer, StorageConfig, unpaced, untimed,
)
from bkcore.bookie.fs import FileSystem
from bkcore.bookie.index import IndexStore
from bkcore.bookie.journal_files import Journal, JournalConfig, JournalReplay, LogMark
from bkcore.effects import JournalWrite


class BookieStack:
    def __init__(self, *, bookie_id: str, fs: FileSystem, index: IndexStore,
                 bookie_config: BookieConfig = BookieConfig(),
                 journal_config: JournalConfig = JournalConfig(),
                 storage_config: StorageConfig = StorageConfig()) -> None:
        self.fs = fs
        self.bookie_id = bookie_id
        self.cookie: Cookie | None = None
        self.journal = Journal(fs=fs, config=journal_config)
        self._index = index
        self._bookie_config = bookie_config
        self._storage_config = storage_config
        # Made by start(), after the cookies say these directories are this bookie's.
        self.storage: DurableLedgerStorage | None = None
        self.core: Bookie | None = None
        # Journal position after each write (written by write_journal), kept until the core has
        # applied a later one entirely: a checkpoint's mark is that of core.applied_token
        # (persisted_mark), never that of a write merely synced. A threaded driver syncs in its
        # journal thread and tells the core afterwards, from its loop: a checkpoint beginning
        # in between must not promise storage holds what it has not been given yet (a crash
        # after that checkpoint would lose those records: replay starts at the mark).
        # Only write_journal and sync_journal change it (one thread at a time: the journal's),
        # the loop only looks one mark up.
        self._start_mark: LogMark | None = None
        self._marks_by_token: dict[int, LogMark] = {}

    def start(self, *, now_ms: int, new_instance_id: str = "",
              registered_cookie: Cookie | None = None) -> JournalReplay:
        """Check the cookies against each other and the metastore's copy (stamping a brand-new
        bookie with new_instance_id), then replay. Raises CookieError or JournalStartError with
        what to do. Afterwards the driver registers self.cookie if the metastore had none."""
        self.cookie = check_cookies(self.fs, bookie_id=self.bookie_id, journal_dir=self.journal.config.journal_dir,
                                    ledger_dirs=self.journal.config.ledger_dirs,
                                    new_instance_id=new_instance_id or f"{self.bookie_id}-{now_ms:x}",
                                    registered=registered_cookie)
        self.storage = DurableLedgerStorage(fs=self.fs, index=self._index, config=self._storage_config)
        self.core = Bookie(bookie_id=self.bookie_id, config=self._bookie_config, storage=self.storage)
        replay = self.journal.open(now_ms=now_ms)
        self.core.replay_records(replay.records)
        self._start_mark = replay.end_mark
        return replay

    @property
    def persisted_mark(self) -> LogMark | None:
        """Journal position after the last write the core has applied entirely (after replay,
        before any: where replay ended)."""
        applied_token = self.core.applied_token
        if not applied_token:
            return self._start_mark
        return self._marks_by_token[applied_token]

    def write_journal(self, effect: JournalWrite, *, now_ms: int) -> None:
        self._marks_by_token[effect.token] = self.journal.append(effect.data, now_ms=now_ms)

    def sync_journal(self, token: int) -> None:
        """Make the write `token` durable, and with it every write before it (one sync covers
        the journal file; a roll synced the previous one). The driver then tells the core, and
        persisted_mark moves once the core has applied it. (Marks older than the core's last
        applied write are dropped here: what is kept is that one and the writes after it.)"""
        self.journal.sync()
        applied_token = self.core.applied_token
        marks = self._marks_by_token
        for older in [t for t in marks if t < applied_token]:
            del marks[older]

    def checkpoint(self) -> LogMark:
        mark = self.persisted_mark
        self.storage.checkpoint()
        self.advance_last_mark(mark)
        return mark

    # The same checkpoint in steps for a driver with threads (see DurableLedgerStorage):
    # begin and finish on the thread that runs the core; write in a worker; then the mark in
    # two steps, in workers too: write_last_mark (its own files) at any time, and after it
    # delete_old_journals, never while a journal write is in progress.

    def begin_checkpoint(self) -> tuple[LogMark, CheckpointPlan]:
        """The mark covers the writes the core has applied entirely, all of which the plan
        holds (it may hold some records of the next: replay from the mark applies them again,
        which changes nothing)."""
        return self.persisted_mark, self.storage.begin_checkpoint()

    def write_checkpoint(self, plan: CheckpointPlan, *, timed: PhaseTimer = untimed, pace: Pacer = unpaced) -> None:
        """If this raises (DiskFullError), call abort_checkpoint instead of finish. timed(phase)
        wraps each phase and pace(fraction) follows the entry-log writes (a driver's clock:
        the core reads none)."""
        self.storage.write_checkpoint(plan, timed=timed, pace=pace)

    def abort_checkpoint(self, plan: CheckpointPlan) -> None:
        self.storage.abort_checkpoint(plan)

    def finish_checkpoint(self, plan: CheckpointPlan) -> None:
        self.storage.finish_checkpoint(plan)

    def finish_checkpoint_steps(self, plan: CheckpointPlan) -> Iterator[None]:
        """finish_checkpoint in steps, other inputs allowed between two (DurableLedgerStorage's)."""
        return self.storage.finish_checkpoint_steps(plan)

    def advance_last_mark(self, mark: LogMark) -> None:
        """Storage holds everything before `mark`: persist it, then drop journals behind it."""
        self.write_last_mark(mark)
        self.delete_old_journals(mark)

    def write_last_mark(self, mark: LogMark) -> None:
        """Persist the mark (files of its own in the ledger dirs: no journal is touched)."""
        self.journal.write_last_mark(mark)

    def delete_old_journals(self, mark: LogMark) -> None:
        """Only once the mark is persisted; never beside a journal write."""
        self.journal.delete_old_journals(mark)
