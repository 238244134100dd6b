"""Progress of long `bk` jobs: one status line, redrawn in place, on a terminal only.

Every long job (shell recover, decommission, updateledgers, localconsistencycheck, sim explore,
bench) draws through Progress, so that they all keep one rule: the line goes to stderr, and only
when stderr is a terminal. Into a pipe, a file or a test's capture it writes nothing at all (no
carriage returns, no escape codes), and stdout, where --json output goes, is never touched.

    with Progress("ledgers") as progress:
        for index, ledger_id in enumerate(ledger_ids):
            ...
            progress.update(index + 1, len(ledger_ids))
    # the line is erased on the way out; results are printed after it

A job that prints lines of its own meanwhile calls clear() first, so a line is not printed over
half a status line. Redraws are throttled to one per interval_s (the last one always shows).
Benchmarks, which may not import bkcli, announce their phases as INFO records of the
"bkbench.phase" logger; phases_of() turns those into status text (bench_commands installs it).
"""

from __future__ import annotations

import logging
import sys
import time

BAR_WIDTH = 30
REDRAW_INTERVAL_S = 0.1
_ERASE_LINE = "\r\033[K"


def is_terminal(stream) -> bool:
    """True when `stream` is a terminal (a closed or odd stream is not)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


class Progress:
    """A status line for one job (see the module's docstring)."""

    def __init__(self, what: str, *, stream=None, interval_s: float = REDRAW_INTERVAL_S) -> None:
        self.what = what
        self.stream = stream if stream is not None else sys.stderr
        self.is_drawing = is_terminal(self.stream)
        self.interval_s = interval_s
        self._drawn_at = float("-inf")
        self._is_shown = False       # a status line is on the screen now (clear() erases it)

    def update(self, done: int, total: int | None = None, note: str = "") -> None:
        """done of total things (total None: a count alone), with a note after it."""
        if not self.is_drawing:
            return
        is_last = total is not None and done >= total
        if not is_last and time.monotonic() - self._drawn_at < self.interval_s:
            return
        if total is None:
            text = f"{done} {self.what}"
        else:
            filled = BAR_WIDTH * min(done, total) // max(total, 1)
            text = f"[{'#' * filled}{' ' * (BAR_WIDTH - filled)}] {done}/{total} {self.what}"
        self.show(f"{text}{f': {note}' if note else ''}")

    def __call__(self, done: int, total: int | None = None) -> None:
        """update(), for code that takes a progress(done, total) callback."""
        self.update(done, total)

    def show(self, text: str) -> None:
        """Any status text, in place of the last."""
        if not self.is_drawing:
            return
        self.stream.write(f"{_ERASE_LINE}{text}")
        self.stream.flush()
        self._drawn_at = time.monotonic()
        self._is_shown = True

    def clear(self) -> None:
        """Erase the status line (before a line of the job's own, and at the end)."""
        if self._is_shown:
            self.stream.write(_ERASE_LINE)
            self.stream.flush()
            self._is_shown = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info) -> None:
        self.clear()


class _PhaseHandler(logging.Handler):
    """Shows each record of a logger as the status line: "<name>, <seconds>s in: <message>"."""

    def __init__(self, progress: Progress, name: str) -> None:
        super().__init__(level=logging.INFO)
        self.progress = progress
        self.name_shown = name
        self.started = time.monotonic()

    def emit(self, record: logging.LogRecord) -> None:
        elapsed = time.monotonic() - self.started
        self.progress.show(f"{self.name_shown}, {elapsed:.0f}s in: {record.getMessage()}")


class phases_of:
    """While in it, INFO records of `logger_name` show as the status line of `progress` (on a
    terminal; elsewhere they go only where logging sends them):

        with phases_of("bkbench.phase", Progress("bench"), name="bk bench ledger"):
            run_the_benchmark()
    """

    def __init__(self, logger_name: str, progress: Progress, *, name: str) -> None:
        self.logger = logging.getLogger(logger_name)
        self.progress = progress
        self.handler = _PhaseHandler(progress, name)
        self._saved = (self.logger.level, self.logger.propagate)

    def __enter__(self) -> Progress:
        if self.progress.is_drawing:
            self.logger.addHandler(self.handler)
            if not self.logger.isEnabledFor(logging.INFO):
                # Phases are wanted on the status line, not as log lines the user did not ask for.
                self.logger.setLevel(logging.INFO)
                self.logger.propagate = False
        return self.progress

    def __exit__(self, *exc_info) -> None:
        if self.progress.is_drawing:
            self.logger.removeHandler(self.handler)
            self.logger.setLevel(self._saved[0])
            self.logger.propagate = self._saved[1]
        self.progress.clear()
