"""A bookie process on real files for the SIGKILL test: it adds entries to one ledger as fast
as fdatasync allows, checkpointing now and then, and prints "ACK <ledger> <entry>" for each
acknowledgement (flushed) — the parent kills it at a random moment and checks what survived."""

import sys

from bkcore.bookie.bookie import BookieConfig
from bkcore.bookie.durable_storage import StorageConfig
from bkcore.bookie.journal_files import JournalConfig
from bkcore.bookie.stack import BookieStack
from bkcore.digest import Digester, DigestType
from bkcore.effects import JournalWrite, Send
from bkcore.errors import Code
from bkcore.wire import AddRequest
from bktransports.filesystem import OsFileSystem
from bktransports.lmdb_index import LmdbIndexStore

KEY = b"k" * 32
JOURNAL_CONFIG = JournalConfig(journal_max_size=256 * 1024, journal_max_backups=2)
STORAGE_CONFIG = StorageConfig(entry_log_size_max=512 * 1024)


def open_stack(root: str, now_ms: int) -> BookieStack:
    fs = OsFileSystem(root)
    fs.makedirs("index")
    stack = BookieStack(bookie_id="b", fs=fs, index=LmdbIndexStore(f"{root}/index"),
                        bookie_config=BookieConfig(journal_flush_when_queue_empty=True),
                        journal_config=JOURNAL_CONFIG, storage_config=STORAGE_CONFIG)
    stack.start(now_ms=now_ms)
    return stack


def entry_body(ledger_id: int, entry_id: int) -> bytes:
    digester = Digester(ledger_id=ledger_id, digest_type=DigestType.CRC32C, password=b"pw")
    payload = b"ledger %d entry %d " % (ledger_id, entry_id) + bytes([entry_id % 251]) * (entry_id % 300)
    return digester.pack_entry(entry_id=entry_id, lac=entry_id - 1, length=entry_id + 1, payload=payload)


def main(root: str, ledger_id: int, now_ms: int) -> None:
    stack = open_stack(root, now_ms)
    core = stack.core
    entry_id = 0
    while True:
        for _ in range(8):   # a few adds per group commit
            core.receive(AddRequest(request_id=entry_id, ledger_id=ledger_id, entry_id=entry_id, master_key=KEY,
                                    body=entry_body(ledger_id, entry_id)), source="client", now_ns=0)
            entry_id += 1
        core.on_timer(10**18)
        while effects := core.take_effects():
            for effect in effects:
                if isinstance(effect, JournalWrite):
                    stack.write_journal(effect, now_ms=now_ms)
                    stack.sync_journal(effect.token)
                    core.on_persisted(effect.token, 0)
                elif isinstance(effect, Send) and effect.message.code == Code.OK:
                    sys.stdout.write(f"ACK {effect.message.ledger_id} {effect.message.entry_id}\n")
        sys.stdout.flush()
        if entry_id % 200 == 0:
            stack.checkpoint()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
