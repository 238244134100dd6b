"""BookieStack: one bookie with its journal and ledger storage over a FileSystem and an IndexStore.

The pieces a driver needs to run a durable bookie, composed once so that the simulator, tests
and real processes run the same sequence:
  start()          check the cookies, replay the journal from the LastLogMark into storage;
  write_journal()  append a JournalWrite's group (remembering where it ends);
  sync_journal()   make it durable; the driver then calls core.on_persisted(token);
  checkpoint()     storage first (entry logs flushed, index committed), then the LastLogMark,
                   then delete journals it made unnecessary — the order that loses nothing.
Calls block on I/O: real drivers run them in a worker thread.
"""

from __future__ import annotations

from bkcore.bookie.bookie import Bookie, BookieConfig
from bkcore.bookie.cookie import Cookie, check_cookies
from bkcore.bookie.durable_storage import DurableLedgerStorage, StorageConfig
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
        # Journal position after the last group the core has been told is durable.
        self.persisted_mark: LogMark | None = None
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
        self.persisted_mark = replay.end_mark
        return replay

    def write_journal(self, effect: JournalWrite, *, now_ms: int) -> None:
        self._marks_by_token[effect.token] = self.journal.append(effect.data, now_ms=now_ms)

    def sync_journal(self, token: int) -> None:
        self.journal.sync()
        self.persisted_mark = self._marks_by_token.pop(token)

    def checkpoint(self) -> LogMark:
        mark = self.persisted_mark
        self.storage.checkpoint()
        self.journal.write_last_mark(mark)
        self.journal.delete_old_journals(mark)
        return mark
