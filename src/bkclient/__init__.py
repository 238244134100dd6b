"""bkclient: the library users import.

    import bkclient
    async with bkclient.connect("raft://127.0.0.1:2281") as bk:
        ledger = await bk.create_ledger(password=b"pw")     # ledgers (bkcore.client.handles)
        await ledger.add(b"hello")
        async with bk.streams.open_writer("ns", "events") as writer:   # log streams
            await writer.write(b"...")
        table = await bk.open_table("ns/counters")        # tables, served by stream storage
        await table.increment(b"visits", 1)

    with bkclient.sync.connect(uri) as bk: ...              # the same, blocking, for scripts

    library        connect() and BookKeeper (the connected client)
    sync           the blocking wrapper
    table_client   tables for trio code: each call goes to the server owning the key's range
    storage_client the blocking gRPC client of stream storage (BookKeeper's protos)

Errors are the typed exceptions of bkcore.errors and bkcore.stream.errors, with BookKeeper's
names. A process that writes or reads many entries a second should call bkclient.tune_gc()
once it has started (see bktransports.gc_tuning: the collector's full passes otherwise pause
every add in flight).
"""

from bkcore.errors import *  # noqa: F401,F403  (the typed exceptions, BookKeeper's names)
from bkclient.library import BookKeeper, ReadHandle, WriteHandle, connect
from bktransports.gc_tuning import tune_gc

__all__ = ["BookKeeper", "ReadHandle", "WriteHandle", "connect", "tune_gc"]
