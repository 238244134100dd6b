"""The cyclic garbage collector's settings for a process that moves many small objects a second.

CPython runs a young-generation collection every 700 net allocations of container objects and,
every hundred of those, a full collection over every tracked object in the process. A bookie, or
a writer pipelining adds, allocates and frees several such objects per entry, so at tens of
thousands of entries a second the collector ran dozens of times a second, and each full pass
over a warmed-up client took some 30 ms, a pause for every add in flight (measured in
`bk bench ledger`'s client: 15% of its CPU, four full passes in four seconds).

tune_gc() moves what startup created (modules, classes, configuration, replayed state) out of
the collector's sight with gc.freeze(), and lets many more allocations pass between young
collections. Reference counting still frees everything that is not in a cycle at once, which
is nearly everything on the data path; cycles (trio's cancelled tasks, exceptions with their
tracebacks) wait for the next collection, at most young_threshold objects later.

Bookie processes call it once they serve. It changes the whole process, so the library leaves
it to the application: `bkclient.tune_gc()` after startup, as `bk bench ledger` does.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000


def tune_gc(young_threshold: int = YOUNG_THRESHOLD) -> None:
    """Freeze the objects that exist now and collect young objects every young_threshold
    allocations instead of every 700."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young_threshold, middle, old)
