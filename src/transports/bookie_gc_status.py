"""GcStatus: what a bookie's GC loop is doing and has done, what it has been asked for, and
which compactions an operator has suspended (the HTTP admin's /api/v1/bookie/gc, gc_details,
gc/suspend_compaction and gc/resume_compaction read and set it).

Which compaction a round runs follows BookKeeper's GarbageCollectorThread: major when it is
due (or asked for) and not suspended, else minor unless that is suspended, else none (the round
still collects deleted ledgers). A round asked for with forceMajor or forceMinor runs that kind
even while it is suspended, as BookKeeper's forceGC(forceMajor, forceMinor) does.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class GcStatus:
    is_force_wanted: bool = False       # a round asked for (request_gc) has not finished yet
    is_force_major: bool = False        # ... and is to be a major one
    is_force_minor: bool = False        # ... asked for with forceMinor
    running: str = ""                   # "major", "minor" or "gc" (no compaction) while a round runs
    is_running_forced: bool = False     # the running round is one asked for
    last_major_ms: int = 0              # when the last compaction of each kind ended (epoch ms; 0: none yet)
    last_minor_ms: int = 0
    major_count: int = 0                # compactions of each kind completed
    minor_count: int = 0
    is_major_suspended: bool = False    # suspend_compaction: no major compaction until resumed
    is_minor_suspended: bool = False

    def compaction_kind(self, *, is_major_due: bool, is_major_forced: bool = False,
                        is_minor_forced: bool = False) -> str | None:
        """"major", "minor" or None (no compaction) for a round (see the module docstring)."""
        if is_major_due and (is_major_forced or not self.is_major_suspended):
            return "major"
        if is_minor_forced or not self.is_minor_suspended:
            return "minor"
        return None
