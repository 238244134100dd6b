"""The mixed workload: the stream workload and the table workload side by side in one world,
sharing its bookies, metastore and faults (their processes are one Processes, so crashes, session
expiries and the final restarts cover both). Each keeps its own history and checker; the run is
verified once both verifiers have finished."""

from __future__ import annotations

from bksim.stream_history import StreamHistory
from bksim.table_history import TableHistory
from bksim.workload_stream import StreamWorkload
from bksim.workload_table import TableWorkload


class MixedWorkload:
    def __init__(self, *, world) -> None:
        self.streams = StreamWorkload(world=world, history=StreamHistory())
        self.tables = TableWorkload(world=world, history=TableHistory(), processes=self.streams.processes)
        self._parts = (self.streams, self.tables)

    @property
    def is_verified(self) -> bool:
        return all(part.is_verified for part in self._parts)

    @property
    def verify_failures(self) -> list[str]:
        return self.streams.verify_failures + self.tables.verify_failures

    def start(self) -> None:
        for part in self._parts:
            part.start()

    def start_nemesis(self, end_ns: int) -> None:
        for part in self._parts:
            part.start_nemesis(end_ns)

    def stop_writing(self) -> None:
        for part in self._parts:
            part.stop_writing()

    def heal(self) -> None:
        self.streams.heal()           # (one Processes: restarting its crashed ones covers both)

    def start_verification(self) -> None:
        for part in self._parts:
            part.start_verification()

    def stop(self) -> None:
        self.streams.stop()

    def check(self) -> list:
        return self.streams.check() + self.tables.check()

    def summary(self) -> list[str]:
        return self.streams.summary() + self.tables.summary()
