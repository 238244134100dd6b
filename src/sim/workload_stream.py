"""The stream workload: writers that crash and fence each other, readers that tail from every
kind of start, cursors, truncation and retention, all running the library's own stream code
(bkcore.stream) inside simulated processes.

Processes (bksim.processes; each may crash and restart, pause, or be cut off):
  sw<i>  writer: opens the stream's writer (fencing the one before), writes batches of records
         from a few tasks at once, sometimes rolls the segment, closes and reopens now and then;
  sr<i>  reader: opens a reader from the start, the tail, a position, a txid or its cursor,
         reads with a timeout, commits its cursor as it goes, and starts again now and then;
  st     truncator: truncates below every cursor, and applies retention;
  sv     verifier: once the faults end, fences the last writer, seals the stream and reads it
         whole.
Everything seen goes into the StreamHistory; bksim.stream_history judges it.
"""

from __future__ import annotations

from bkcore.errors import BKException
from bkcore.stream.errors import StreamException, StreamExists, NamespaceExists
from bkcore.stream.records import DLSN, DLSN_START
from bkcore.stream.segments import StreamSettings
from bksim.processes import ProcessNemesis, Processes, ProcessWorkload, SimProcess
from bksim.stream_history import ReaderLog, StreamHistory, check_stream_history

NAMESPACE = "sim"
STREAM = "events"
RETRY_PAUSE_S = 0.2
READ_TIMEOUT_S = 0.5
# Failures a workload process expects from the layers below and goes on after (anything else
# escaping a process is a bug and fails the run).
EXPECTED = (BKException, StreamException, ConnectionError)


def leaf_exceptions(group: BaseExceptionGroup) -> list[BaseException]:
    """The exceptions of a group and of the groups nested in it."""
    leaves = []
    for exc in group.exceptions:
        leaves += leaf_exceptions(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
    return leaves


async def create_stream_if_missing(streams, namespace: str, stream: str, settings: StreamSettings) -> None:
    """The namespace and the stream, made by whichever setup gets there first."""
    try:
        await streams.create_namespace(namespace, settings)
    except NamespaceExists:
        pass
    try:
        await streams.create_stream(namespace, stream, settings)
    except StreamExists:
        pass


class StreamWorkload(ProcessWorkload):
    def __init__(self, *, world, history: StreamHistory) -> None:
        self.world = world
        self.history = history
        self.scenario = world.scenario
        self.rng = world.workload_rng
        self.processes = Processes(world=world, rng=self.rng)
        scenario = self.scenario
        self.settings = StreamSettings(
            ensemble_size=scenario.ensemble_size, write_quorum_size=scenario.write_quorum_size,
            ack_quorum_size=scenario.ack_quorum_size, segment_rolling_size=scenario.stream_rolling_size,
            retention_size=scenario.stream_retention_size, retention_keeps_unconsumed=True)
        history.keeps_unconsumed = True
        self.writer_roles = [f"sw{i}" for i in range(scenario.writer_count)]
        self.reader_roles = [f"sr{i}" for i in range(scenario.stream_reader_count)]
        self.cursors = [f"c{i}" for i in range(len(self.reader_roles)) if i % 2 == 0]
        self.is_writing = True
        self.is_ready = False
        self.is_verified = False
        self.verify_failures: list[str] = []
        self._write_counts: dict[str, int] = {}

    # -- the run's phases -----------------------------------------------------------------------

    def start(self) -> None:
        self.start_supervised("setup", self._setup)

    def start_nemesis(self, end_ns: int) -> None:
        ProcessNemesis(processes=self.processes, roles=self.writer_roles + self.reader_roles + ["st"],
                       end_ns=end_ns).start()

    def start_verification(self) -> None:
        self.start_supervised("sv", self._verify)

    def check(self) -> list:
        return check_stream_history(self.history)

    def summary(self) -> list[str]:
        history = self.history
        final = history.final_records
        return [
            f"stream: writes {history.writes_invoked} invoked, {len(history.acks)} acknowledged, "
            f"{history.writes_failed} failed; writers opened {len(history.writer_opens)}; "
            f"readers {len(history.readers)} read {sum(len(r.records) for r in history.readers)} records; "
            f"truncations {len(history.truncations)}; cursor commits {len(history.cursor_commits)}",
            f"final stream: {'unverified' if final is None else f'{len(final)} records'}, truncated to "
            f"{history.final_truncated_to}; process crashes {self.processes.crash_count}, "
            f"sessions expired {self.processes.world.metastore.expired_session_count}",
            f"errors seen: {dict(sorted(history.errors.items()))}",
        ]

    # -- processes ------------------------------------------------------------------------------

    async def _setup(self, process: SimProcess) -> None:
        streams = process.bk.streams
        while True:
            try:
                await create_stream_if_missing(streams, NAMESPACE, STREAM, self.settings)
                for cursor in self.cursors:
                    # Cursors exist before any record, so retention never passes one.
                    await streams.commit_cursor(NAMESPACE, STREAM, cursor, DLSN_START)
                break
            except EXPECTED as exc:
                self.history.error(f"setup:{type(exc).__name__}")
                await process.runtime.sleep(RETRY_PAUSE_S)
        self.is_ready = True
        for role in self.writer_roles:
            self.start_supervised(role, self._writer)
        for index, role in enumerate(self.reader_roles):
            self.start_supervised(role, lambda p, i=index: self._reader(p, i))
        self.start_supervised("st", self._truncator)

    async def _writer(self, process: SimProcess) -> None:
        rt = process.runtime
        streams = process.bk.streams
        while self.is_writing:
            try:
                async with streams.open_writer(NAMESPACE, STREAM, entries_in_flight_max=self.rng.choice([1, 4, 16]),
                                               compression=self.rng.choice(["none", "lz4"])) as writer:
                    self.history.writer_opens.append((process.name, writer.segment.seqno))
                    async with rt.open_nursery() as nursery:
                        for _ in range(self.rng.choice([1, 2, 3])):
                            nursery.start_soon(self._write_some, process, writer)
            except* EXPECTED as group:
                self._count_errors("writer", group)
            await rt.sleep(self.rng.random() * RETRY_PAUSE_S)

    async def _write_some(self, process: SimProcess, writer) -> None:
        rt = process.runtime
        for _ in range(self.rng.randint(5, 40)):
            if not self.is_writing:
                return
            payloads = [self._payload(process) for _ in range(self.rng.choice([1, 1, 2, 5]))]
            self.history.writes_invoked += len(payloads)
            try:
                positions = await writer.write_many(payloads)
            except EXPECTED:
                self.history.writes_failed += len(payloads)
                raise
            for payload, position in zip(payloads, positions):
                self.history.acks.append((process.name, payload, position))
            if self.rng.random() < 0.05:
                await writer.roll()
            await rt.sleep(self.rng.expovariate(1 / 0.01))

    def _payload(self, process: SimProcess) -> bytes:
        count = self._write_counts.get(process.name, 0) + 1
        self._write_counts[process.name] = count
        return f"{process.name}:{count}:".encode() + b"x" * self.rng.choice([0, 10, 200, 1500])

    async def _reader(self, process: SimProcess, index: int) -> None:
        rt = process.runtime
        streams = process.bk.streams
        cursor = f"c{index}" if f"c{index}" in self.cursors else None
        instance = 0
        while True:
            instance += 1
            kind = "cursor" if cursor else self.rng.choice(["earliest", "latest", "position", "txid"])
            start, txid = None, None
            if kind == "latest":
                start = "latest"
            elif kind == "position" and self.history.acks:
                start = self.rng.choice(self.history.acks)[2]
            elif kind == "txid":
                txid = self.rng.randint(0, max(1, len(self.history.acks)))
            else:
                kind = "cursor" if cursor else "earliest"
            try:
                async with streams.open_reader(NAMESPACE, STREAM, start, txid=txid, cursor=cursor) as reader:
                    log = ReaderLog(f"{process.name}/{instance}", kind, reader.position, self.world.now_ns,
                                    is_start_exact=kind in ("earliest", "position", "cursor"))
                    self.history.readers.append(log)
                    await self._read_some(process, reader, log, cursor)
            except* EXPECTED as group:
                self._count_errors("reader", group)
            await rt.sleep(self.rng.random() * RETRY_PAUSE_S)

    async def _read_some(self, process: SimProcess, reader, log: ReaderLog, cursor: str | None) -> None:
        streams = process.bk.streams
        for _ in range(self.rng.randint(20, 400)):
            record = await reader.read_next(timeout_s=READ_TIMEOUT_S)
            if record is None:
                if reader.is_ended:
                    return
                continue
            log.records.append((record.dlsn, record.txid, record.payload))
            if cursor is not None and self.rng.random() < 0.2:
                await streams.commit_cursor(NAMESPACE, STREAM, cursor, record.dlsn)
                self.history.cursor_commits.append((cursor, record.dlsn))

    def _count_errors(self, who: str, group: BaseExceptionGroup) -> None:
        for exc in leaf_exceptions(group):
            self.history.error(f"{who}:{type(exc).__name__}")

    async def _truncator(self, process: SimProcess) -> None:
        rt = process.runtime
        streams = process.bk.streams
        while self.is_writing:
            await rt.sleep(self.rng.expovariate(1 / 1.0))
            try:
                if self.rng.random() < 0.5:
                    await streams.apply_retention(NAMESPACE, STREAM)
                    continue
                committed = [await streams.cursor_position(NAMESPACE, STREAM, name)
                             for name in await streams.list_cursors(NAMESPACE, STREAM)]
                acked = [p for _, _, p in self.history.acks]
                if not acked:
                    continue
                limit = min(committed) if committed else max(acked)
                candidates = [p for p in acked if p <= limit]
                if not candidates:
                    continue
                position = self.rng.choice(candidates)
                await streams.truncate(NAMESPACE, STREAM, position)
                self.history.truncations.append((position, self.world.now_ns))
            except EXPECTED as exc:
                self.history.error(f"truncator:{type(exc).__name__}")

    async def _verify(self, process: SimProcess) -> None:
        rt = process.runtime
        streams = process.bk.streams
        while not self.is_ready:
            await rt.sleep(RETRY_PAUSE_S)
        while True:
            records = None
            try:
                async with streams.open_writer(NAMESPACE, STREAM) as writer:
                    end = DLSN(writer.segment.seqno, 0, 0)
                records = []
                async with streams.open_reader(NAMESPACE, STREAM, "earliest", end=end) as reader:
                    while (record := await reader.read_next(timeout_s=5.0)) is not None:
                        records.append((record.dlsn, record.txid, record.payload))
                    if not reader.is_ended:
                        records = None
                        raise ConnectionError("the final read stalled")
                metadata = await streams.catalog.get_stream(NAMESPACE, STREAM)
                cursors = {name: await streams.cursor_position(NAMESPACE, STREAM, name)
                           for name in await streams.list_cursors(NAMESPACE, STREAM)}
            except* EXPECTED as group:
                self.verify_failures.append("; ".join(repr(e) for e in leaf_exceptions(group)))
                records = None
            if records is None:
                await rt.sleep(RETRY_PAUSE_S)
                continue
            history = self.history
            history.final_records = records
            history.final_truncated_to = metadata.truncated_to
            history.final_cursors = cursors
            self.is_verified = True
            return
