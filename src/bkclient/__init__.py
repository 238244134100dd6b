"""bkclient: the library's front door.

    import bkclient
    async with bkclient.connect("raft://127.0.0.1:2281") as bk:
        ledger = await bk.create_ledger(password=b"pw")
        await ledger.add(b"hello")

See transports.library for the handles and bkcore.errors for the typed exceptions. A process
that writes or reads many entries a second should call bkclient.tune_gc() once it has started
(see transports.gc_tuning: the collector's full passes otherwise pause every add in flight).
"""

from bkcore.errors import *  # noqa: F401,F403  (the typed exceptions, BookKeeper's names)
from transports.gc_tuning import tune_gc
from transports.library import BookKeeper, ReadHandle, WriteHandle, connect

__all__ = ["BookKeeper", "ReadHandle", "WriteHandle", "connect", "tune_gc"]
