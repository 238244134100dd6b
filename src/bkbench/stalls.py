"""What held a benchmark's processes up during each of its phases, and the timeline picture.

Every process keeps a bktransports.stall_recorder.StallRecorder: the client's is this process's
loop (bk.stalls), each bookie's is read from its /api/v1/bookie/stalls. phase_stalls() turns one
phase's window into the report's fields: the longest loop pause of the client and of the bookies
(each kind's longest, in fields named <who>_<kind>_max_ms; each bookie's loop pause too), and the
longest loop pauses themselves with the task that held the loop. draw_timeline() plots add latency over wall time
with what the bookies and the client recorded marked on it, so a person sees at a glance what
lines up with the spikes.
"""

from __future__ import annotations

import contextlib
import json
import time
from array import array
import urllib.request

from bkbench import announce
from bkbench.disk_probe import DiskProbe

# Kinds summed up per phase, each as <who>_<kind>_max_ms; loop pauses are named loop_pause.
SUMMED_KINDS = {"loop": "loop_pause", "gc": "gc_pause", "journal_sync": "journal_sync", "journal_write": "journal_write",
                "checkpoint": "checkpoint", "index_commit": "index_commit", "entry_log_write": "entry_log_write",
                "journal_roll": "journal_roll", "journal_prealloc": "journal_prealloc",
                "checkpoint_begin": "checkpoint_begin", "checkpoint_finish": "checkpoint_finish",
                "write_cache_full": "write_cache_full"}
# What the timeline marks, and how: kind -> (colour, label).
MARKED_KINDS = {"checkpoint": ("tab:blue", "checkpoint"), "index_commit": ("tab:cyan", "index commit"),
                "journal_roll": ("tab:purple", "journal roll"), "journal_prealloc": ("tab:pink", "journal prealloc"),
                "gc": ("tab:red", "GC pause"), "loop": ("tab:orange", "loop pause"),
                "write_cache_full": ("black", "write cache full"), "compaction": ("tab:brown", "compaction"),
                "disk_stall": ("tab:gray", "raw disk loop's fdatasync >= 20 ms")}
TIMELINE_EVENT_MIN_MS = {"gc": 1.0, "loop": 5.0}       # shorter ones would cover the picture


def bookie_stalls(http_ports: list[int], since_s: float) -> list[dict | None]:
    """Each bookie's /api/v1/bookie/stalls answer from since_s on (None for one that cannot be read)."""
    answers = []
    for port in http_ports:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/bookie/stalls?since={since_s}",
                                        timeout=5) as response:
                answers.append(json.loads(response.read()))
        except (OSError, ValueError):
            answers.append(None)
    return answers


def _longest_fields(who: str, longest: dict[str, float]) -> dict:
    return {f"{who}_{name}_max_ms": longest.get(kind, 0.0) for kind, name in SUMMED_KINDS.items()
            if kind in longest or kind in ("loop", "gc")}


def phase_stalls(client_recorder, http_ports: list[int], since_s: float) -> tuple[dict, dict]:
    """(fields for the phase's report, the raw events by source for a timeline)."""
    client = client_recorder.since(since_s)
    bookies = bookie_stalls(http_ports, since_s)
    readable = [answer for answer in bookies if answer is not None]
    bookies_longest: dict[str, float] = {}
    for answer in readable:
        for kind, value in answer["longest_ms"].items():
            bookies_longest[kind] = max(bookies_longest.get(kind, 0.0), value)
    pauses = [("client", event) for event in client["events"] if event["kind"] == "loop"]
    pauses += [(f"bookie {index + 1}", event) for index, answer in enumerate(bookies) if answer is not None
               for event in answer["events"] if event["kind"] == "loop"]
    longest_pauses = sorted(pauses, key=lambda pair: -pair[1]["duration_ms"])[:5]
    fields = {**_longest_fields("client", client["longest_ms"]),
              **(_longest_fields("bookies", bookies_longest) if readable else {}),
              "each_bookie_loop_pause_max_ms": [answer["longest_ms"].get("loop", 0.0) if answer is not None else None
                                                for answer in bookies],
              "longest_loop_pauses": [{"process": who, "ms": event["duration_ms"], "task": event["detail"]}
                                      for who, event in longest_pauses]}
    if len(readable) < len(bookies):
        fields["bookies_stalls_unreadable"] = len(bookies) - len(readable)
    events = {"client": client["events"],
              **{f"bookie {index + 1}": answer["events"] for index, answer in enumerate(bookies) if answer is not None}}
    return fields, events


def draw_timeline(path: str, adds: AddSamples, events: dict[str, list[dict]],
                  phases: list[tuple[str, float, float]]) -> None:
    """A PNG at path: each add's latency (ms, log scale) at the wall time it started, the phases
    shaded and named, and below, one row per process with its recorded events as bars as long
    as they lasted (checkpoints, index commits, journal rolls, GC and loop pauses, and the raw
    disk loop's stalls when a DiskProbe ran beside the phases)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    origin = min([start for _, start, _ in phases] + list(adds.started_s[:1]) or [time.time()])
    sources = sorted(events)
    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(14, 7 + 0.3 * len(sources)),
                                         gridspec_kw={"height_ratios": [3, 1 + 0.25 * len(sources)]})
    if len(adds):
        top.scatter([started - origin for started in adds.started_s], adds.latencies_ms, s=1, alpha=0.4,
                    color="tab:green", label="add latency", rasterized=True)
        top.set_yscale("log")
    for index, (name, start, end) in enumerate(phases):
        top.axvspan(start - origin, end - origin, color="0.9" if index % 2 else "0.95", zorder=0)
        top.text(start - origin, 1.01, name, transform=top.get_xaxis_transform(), fontsize=8)
    top.set_ylabel("add latency (ms)")
    seen_labels = set()
    for row, source in enumerate(sources):
        for event in events[source]:
            kind = event["kind"]
            if kind not in MARKED_KINDS or event["duration_ms"] < TIMELINE_EVENT_MIN_MS.get(kind, 0.0):
                continue
            colour, label = MARKED_KINDS[kind]
            start = event["at_s"] - origin
            width = max(event["duration_ms"] / 1e3, 0.002)
            bottom.broken_barh([(start, width)], (row - 0.4, 0.8), color=colour,
                               label=None if label in seen_labels else label)
            seen_labels.add(label)
            if kind in ("checkpoint", "journal_roll", "write_cache_full", "compaction", "disk_stall"):
                top.axvline(start, color=colour, linewidth=0.6, alpha=0.5)
    bottom.set_yticks(range(len(sources)), sources)
    bottom.set_xlabel("seconds")
    if seen_labels:
        bottom.legend(loc="upper right", fontsize=7, ncol=4)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


class AddSamples:
    """Each add's wall time started and latency (ms), for a timeline: kept in two arrays of
    doubles, which the garbage collector does not walk (a list of 100,000 tuples it would, and
    the client's full passes would grow with the samples taken)."""

    def __init__(self) -> None:
        self.started_s = array("d")
        self.latencies_ms = array("d")

    def append(self, started_s: float, latency_ms: float) -> None:
        self.started_s.append(started_s)
        self.latencies_ms.append(latency_ms)

    def __len__(self) -> int:
        return len(self.started_s)


class PhaseWatch:
    """Runs a benchmark's phases one after another, adding to each phase's report what held
    the client and the bookies up meanwhile (phase_stalls) and, given disk_probe_dir, what a
    raw disk loop beside it saw (disk_probe_* fields: bkbench.disk_probe), and keeping the
    events, the phase windows and any add samples the phases give for draw_timeline."""

    def __init__(self, client_recorder, http_ports: list[int], *, disk_probe_dir: str | None = None) -> None:
        self._client_recorder = client_recorder
        self._http_ports = http_ports
        self._disk_probe_dir = disk_probe_dir       # a raw disk loop beside each phase (DiskProbe)
        self.phases: list[tuple[str, float, float]] = []
        self.events: dict[str, list[dict]] = {}
        self.adds = AddSamples()

    async def run(self, name: str, measure, *args, **kwargs) -> dict:
        announce(name)
        probe = DiskProbe(self._disk_probe_dir) if self._disk_probe_dir else contextlib.nullcontext()
        with probe:
            started = time.time()
            report = await measure(*args, **kwargs)
        fields, events = phase_stalls(self._client_recorder, self._http_ports, started)
        if self._disk_probe_dir:
            stalls = probe.report.pop("stalls", [])
            fields.update({f"disk_probe_{name}": value for name, value in probe.report.items()})
            events["disk (raw loop)"] = [{"kind": "disk_stall", "detail": "", **stall} for stall in stalls]
        self.phases.append((name, started, time.time()))
        for source, listed in events.items():
            self.events.setdefault(source, []).extend(listed)
        return {**report, **fields}

    def draw(self, path: str) -> None:
        draw_timeline(path, self.adds, self.events, self.phases)
