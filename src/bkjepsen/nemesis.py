"""The nemesis: faults on the real cluster, one at a time, chosen and timed from the run's seed.

Kinds (`--nemesis` names; `all` is every one the cluster supports):
  kill        SIGKILL a bookie (or stream storage in the table workload), restart it later
  pause       SIGSTOP a bookie, metastore node or stream storage for 1-9 s (longer than the
              metastore session and add timeouts), then SIGCONT
  partition   through the proxies: isolate one process, split the processes in two, make one
              process's links one-way, or slow its links by 50-500 ms; healed later
  leader      SIGKILL the metastore leader (raft-lite or ZooKeeper), restart it later
  disk-full   fill a bookie's ledger tmpfs with a file (it turns readonly), delete the file later
              (needs the tmpfs ledger dirs: root and mount)
  corrupt     SIGKILL a bookie, write a torn record (random bytes) just after the last record
              of its newest journal file, restart it: it must start, report the torn tail and
              keep every acknowledged entry. (Flipping bytes inside acknowledged records would
              model a disk losing synced data, outside the fault model the protocol promises.)

Every random choice comes from one random.Random(seed): the same seed gives the same schedule
of kinds, targets and durations (what the system does in between is not deterministic). Each
fault records a NemesisEvent in the history; heal() ends whatever is in progress.
"""

from __future__ import annotations

import os
import random
import signal

import trio

from bkjepsen.cluster import Cluster
from bkjepsen.history import History

KINDS = ("kill", "pause", "partition", "leader", "disk-full", "corrupt")
FILL_CHUNK_SIZE = 1 << 20
FILL_CHUNK_COUNT_MAX = 1024
TORN_RECORD_SIZE_MAX = 300


def parse_kinds(text: str, cluster_supports_disk_full: bool) -> list[str]:
    if text in ("none", ""):
        return []
    kinds = list(KINDS) if text == "all" else [k.strip() for k in text.split(",")]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown nemesis {unknown}: choose from {', '.join(KINDS)}, all or none")
    if not cluster_supports_disk_full and "disk-full" in kinds:
        kinds.remove("disk-full")
    return kinds


class Nemesis:
    def __init__(self, cluster: Cluster, history: History, *, rng: random.Random, kinds: list[str],
                 victims_extra: list[str] = ()) -> None:
        self.cluster, self.history, self.rng = cluster, history, rng
        self.kinds = list(kinds)
        self.victims = list(cluster.bookie_names) + list(victims_extra)   # what kill may hit
        self.counts: dict[str, int] = {}

    async def run(self, duration_s: float) -> None:
        """Faults one after another until duration_s has passed, then heal everything."""
        if not self.kinds:
            await trio.sleep(duration_s)
            return
        deadline = trio.current_time() + duration_s
        try:
            for _ in range(10_000):          # bounded: each round sleeps at least a second
                quiet_s, fault_s = self.rng.uniform(1.0, 3.0), self.rng.uniform(2.0, 8.0)
                kind = self.rng.choice(self.kinds)
                if trio.current_time() + quiet_s + fault_s > deadline:
                    break
                await trio.sleep(quiet_s)
                self.counts[kind] = self.counts.get(kind, 0) + 1
                await getattr(self, "_" + kind.replace("-", "_"))(fault_s)
        finally:
            with trio.CancelScope(shield=True):
                await self.heal()
        await trio.sleep_until(max(deadline, trio.current_time()))

    async def heal(self) -> None:
        """End every fault: links open, processes resumed, fillers gone, everything running."""
        self.cluster.proxies.heal()
        for service in self.cluster.services.values():
            if service.is_paused:
                service.signal(signal.SIGCONT)
                service.is_paused = False
        for name in self.cluster.bookie_names:
            _remove_filler(self.cluster.services[name].data_dir)
        for name, service in self.cluster.services.items():
            if not service.is_running():
                await self._restart(name)

    async def _restart(self, name: str) -> None:
        service = self.cluster.services[name]
        try:
            await trio.to_thread.run_sync(service.start)
        except RuntimeError as exc:
            service.exits.append(str(exc)[-2000:])
            self.history.nemesis_start("restart-failed", [name], str(exc)[-300:])

    async def _kill(self, fault_s: float) -> None:
        name = self.rng.choice(self.victims)
        event = self.history.nemesis_start("kill", [name])
        self.cluster.services[name].kill()
        await trio.sleep(fault_s)
        await self._restart(name)
        self.history.nemesis_end(event)

    async def _pause(self, fault_s: float) -> None:
        name = self.rng.choice(self.victims + self.cluster.metastore_names)
        service = self.cluster.services[name]
        event = self.history.nemesis_start("pause", [name])
        service.signal(signal.SIGSTOP)
        service.is_paused = True
        await trio.sleep(fault_s)
        service.signal(signal.SIGCONT)
        service.is_paused = False
        self.history.nemesis_end(event)

    async def _partition(self, fault_s: float) -> None:
        proxies = self.cluster.proxies
        # Metastore nodes and bookies, and stream storage servers (cut off from the metastore
        # while clients still reach them: their sessions expire and their ranges move on).
        nodes = sorted({link.target for link in proxies.links.values()} | set(self.cluster.stream_storage_names))
        shape = self.rng.choice(["isolate", "split", "one-way", "slow"])
        node = self.rng.choice(nodes)
        if shape == "isolate":
            proxies.partition({node})
            targets = [node]
        elif shape == "split":
            targets = self.rng.sample(nodes, len(nodes) // 2)
            proxies.partition(set(targets))
        elif shape == "one-way":
            targets = [node]
            for link in proxies.touching(node):       # node can send, but hears nothing back
                link.set(mode="forward" if link.source == node else "backward")
        else:
            targets = [node]
            delay_s = self.rng.uniform(0.05, 0.5)
            for link in proxies.touching(node):
                link.set(delay_s=delay_s)
        event = self.history.nemesis_start("partition", targets, shape)
        await trio.sleep(fault_s)
        proxies.heal()
        self.history.nemesis_end(event)

    async def _leader(self, fault_s: float) -> None:
        name = await self.cluster.metastore_leader()
        if name is None:
            self.history.nemesis_start("leader", [], "no leader found")
            return
        event = self.history.nemesis_start("leader", [name])
        self.cluster.services[name].kill()
        await trio.sleep(fault_s)
        await self._restart(name)
        self.history.nemesis_end(event)

    async def _disk_full(self, fault_s: float) -> None:
        name = self.rng.choice(self.cluster.bookie_names)
        event = self.history.nemesis_start("disk-full", [name])
        written = await trio.to_thread.run_sync(_fill, self.cluster.services[name].data_dir)
        event.detail = f"{written >> 20} MiB filler"
        await trio.sleep(fault_s)
        _remove_filler(self.cluster.services[name].data_dir)
        self.history.nemesis_end(event)

    async def _corrupt(self, fault_s: float) -> None:
        name = self.rng.choice(self.cluster.bookie_names)
        service = self.cluster.services[name]
        event = self.history.nemesis_start("corrupt", [name])
        service.kill()
        event.detail = _tear_journal_tail(os.path.join(service.data_dir, "journal"), self.rng)
        await trio.sleep(min(fault_s, 3.0))
        await self._restart(name)
        self.history.nemesis_end(event)


def _filler_path(data_dir: str) -> str:
    return os.path.join(data_dir, "ledgers", "nemesis-filler")


def _fill(data_dir: str) -> int:
    """Fill the ledger disk but for a few KiB; returns the bytes written."""
    path = _filler_path(data_dir)
    written = 0
    chunk = b"\xff" * FILL_CHUNK_SIZE
    try:
        with open(path, "wb") as file:
            for _ in range(FILL_CHUNK_COUNT_MAX):
                free = os.statvfs(os.path.dirname(path))
                room = free.f_bavail * free.f_frsize - 64 * 1024
                if room <= 0:
                    break
                written += file.write(chunk[:min(room, FILL_CHUNK_SIZE)])
                file.flush()
    except OSError:
        pass            # ENOSPC: full is what we wanted
    return written


def _remove_filler(data_dir: str) -> None:
    try:
        os.remove(_filler_path(data_dir))
    except FileNotFoundError:
        pass


def _tear_journal_tail(journal_dir: str, rng: random.Random) -> str:
    """Random bytes right after the last whole record of the newest journal (a torn write)."""
    from bkcore.bookie.journal import JournalCorrupted, scan_records
    from bkcore.bookie.journal_files import JOURNAL_HEADER, journal_id_of
    names = sorted((n for n in os.listdir(journal_dir) if journal_id_of(n) is not None),
                   key=journal_id_of) if os.path.isdir(journal_dir) else []
    if not names:
        return "no journal file"
    path = os.path.join(journal_dir, names[-1])
    with open(path, "r+b") as file:
        data = file.read()
        if len(data) < JOURNAL_HEADER.size:
            return f"{names[-1]} has no header yet"
        try:
            end = scan_records(data, start_offset=JOURNAL_HEADER.size).valid_size
        except JournalCorrupted as exc:      # already corrupt: leave it alone
            return f"{names[-1]} not torn: {exc}"
        torn = bytes(rng.randrange(1, 256) for _ in range(rng.randrange(1, TORN_RECORD_SIZE_MAX)))
        file.seek(end)
        file.write(torn)
    return f"{len(torn)} torn bytes at offset {end} of {names[-1]}"
