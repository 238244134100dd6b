"""Self-contained HTML pages with inline SVG (no network, no plotting library): a timeline of
operations per client process with the nemesis's faults as shaded bands, and a latency scatter
(latency against invocation time, one colour per outcome). At most POINT_COUNT_MAX operations
are drawn (every k-th when there are more), so pages stay small.
"""

from __future__ import annotations

import html

from bkjepsen.history import History

POINT_COUNT_MAX = 20_000
WIDTH, ROW_HEIGHT, MARGIN_LEFT, MARGIN_TOP = 1200, 18, 110, 30
COLOURS = {"ok": "#2a9d3a", "unknown": "#e09a18", "fail": "#c8322d", "pending": "#888"}
NEMESIS_COLOURS = {"kill": "#f4a6a6", "pause": "#a6c8f4", "partition": "#f4e3a6", "leader": "#d6a6f4",
                   "disk-full": "#a6f4d0", "corrupt": "#f4c6a6"}


def _sampled(history: History) -> list:
    ops = [op for op in history.ops if op.completed_s is not None]
    step = max(1, len(ops) // POINT_COUNT_MAX)
    return ops[::step]


def _end_s(history: History) -> float:
    ends = [op.completed_s for op in history.ops if op.completed_s is not None]
    ends += [e.end_s or e.start_s for e in history.nemesis]
    return max(ends, default=1.0) or 1.0


def _page(title: str, svg: str, legend: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
            f"<body style='font-family:sans-serif'><h3>{html.escape(title)}</h3><p>{legend}</p>{svg}</body></html>")


def _legend() -> str:
    parts = [f"<span style='color:{c}'>&#9632; {k}</span>" for k, c in COLOURS.items()]
    parts += [f"<span style='background:{c}'>&nbsp;{k}&nbsp;</span>" for k, c in NEMESIS_COLOURS.items()]
    return " ".join(parts)


def _nemesis_bands(history: History, x, height: float) -> list[str]:
    parts = []
    end_s = _end_s(history)
    for event in history.nemesis:
        start, stop = x(event.start_s), x(event.end_s if event.end_s is not None else end_s)
        colour = NEMESIS_COLOURS.get(event.kind, "#ddd")
        label = html.escape(f"{event.kind} {','.join(event.targets)} {event.detail}".strip())
        parts.append(f"<rect x='{start:.1f}' y='{MARGIN_TOP}' width='{max(stop - start, 1.5):.1f}' "
                     f"height='{height:.1f}' fill='{colour}' opacity='0.6'><title>{label}</title></rect>")
    return parts


def timeline_html(history: History, title: str) -> str:
    ops = _sampled(history)
    processes = sorted({op.process for op in ops})
    row = {process: index for index, process in enumerate(processes)}
    end_s = _end_s(history)
    height = ROW_HEIGHT * max(len(processes), 1)

    def x(seconds: float) -> float:
        return MARGIN_LEFT + (WIDTH - MARGIN_LEFT - 10) * seconds / end_s

    parts = _nemesis_bands(history, x, height)
    for process, index in row.items():
        parts.append(f"<text x='4' y='{MARGIN_TOP + index * ROW_HEIGHT + 13}' font-size='11'>"
                     f"{html.escape(process)}</text>")
    for op in ops:
        y = MARGIN_TOP + row[op.process] * ROW_HEIGHT + 3
        start = x(op.invoked_s)
        tip = html.escape(f"{op.kind} {op.key} {op.outcome} {op.error}")
        parts.append(f"<rect x='{start:.1f}' y='{y}' width='{max(x(op.completed_s) - start, 1.0):.1f}' height='12' "
                     f"fill='{COLOURS[op.outcome]}'><title>{tip}</title></rect>")
    parts += _time_axis(x, end_s, MARGIN_TOP + height)
    svg = (f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{MARGIN_TOP + height + 30}'>"
           + "".join(parts) + "</svg>")
    return _page(title, svg, _legend())


def _time_axis(x, end_s: float, y: float) -> list[str]:
    step = max(1, int(end_s / 12) or 1)
    return [f"<text x='{x(t):.1f}' y='{y + 16}' font-size='10'>{t}s</text>" for t in range(0, int(end_s) + 1, step)]


def latency_html(history: History, title: str) -> str:
    ops = _sampled(history)
    end_s = _end_s(history)
    height = 400
    latency_max_s = max((op.latency_s for op in ops), default=1.0) or 1.0

    def x(seconds: float) -> float:
        return MARGIN_LEFT + (WIDTH - MARGIN_LEFT - 10) * seconds / end_s

    def y(latency_s: float) -> float:
        return MARGIN_TOP + height - height * latency_s / latency_max_s

    parts = _nemesis_bands(history, x, height)
    for fraction in (0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f"<text x='4' y='{y(latency_max_s * fraction):.1f}' font-size='10'>"
                     f"{latency_max_s * fraction * 1000:.0f} ms</text>")
    for op in ops:
        parts.append(f"<circle cx='{x(op.invoked_s):.1f}' cy='{y(op.latency_s):.1f}' r='1.6' "
                     f"fill='{COLOURS[op.outcome]}'><title>{html.escape(op.kind)}</title></circle>")
    parts += _time_axis(x, end_s, MARGIN_TOP + height)
    svg = (f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{MARGIN_TOP + height + 30}'>"
           + "".join(parts) + "</svg>")
    return _page(title, svg, "latency of each operation against the time it started; " + _legend())
