"""bkcli.progress: a status line drawn in place on a real terminal (a pseudo-terminal here), and
nothing at all into a pipe, a file or a capture; benchmarks' phases shown through it."""

import io
import logging
import os
import pty
import select
import subprocess
import sys

import pytest

from bkcli.progress import Progress, phases_of


@pytest.fixture
def terminal():
    """(stream, read): a writable file on a pseudo-terminal and what was drawn on it so far."""
    master, slave = pty.openpty()
    stream = os.fdopen(slave, "w")

    def read() -> str:
        # Everything written so far: a pseudo-terminal may hand over two writes in two reads.
        stream.flush()
        chunks = []
        while select.select([master], [], [], 0.2)[0]:
            chunks.append(os.read(master, 65536))
        return b"".join(chunks).decode()

    yield stream, read
    stream.close()
    os.close(master)


def test_a_bar_is_redrawn_in_place_on_a_terminal_and_erased_at_the_end(terminal):
    stream, read = terminal
    with Progress("ledgers", stream=stream, interval_s=0) as progress:
        progress.update(1, 4)
        progress(4, 4)
    drawn = read()
    assert drawn == (f"\r\x1b[K[{'#' * 7}{' ' * 23}] 1/4 ledgers"
                     f"\r\x1b[K[{'#' * 30}] 4/4 ledgers\r\x1b[K")


def test_redraws_are_throttled_but_the_last_one_shows(terminal):
    stream, read = terminal
    progress = Progress("entries", stream=stream, interval_s=3600)
    for done in range(1, 101):
        progress.update(done, 100, note="fine")
    progress.update(7)                           # a count without a total: throttled too
    drawn = read()
    assert drawn.count("\r\x1b[K") == 2                # the first and the last
    assert "] 1/100 entries: fine" in drawn and drawn.endswith("] 100/100 entries: fine")


@pytest.mark.parametrize("stream", [io.StringIO(), open(os.devnull, "w")], ids=["capture", "file"])
def test_nothing_at_all_goes_where_no_terminal_is(stream):
    with Progress("ledgers", stream=stream, interval_s=0) as progress:
        progress.update(1, 2)
        progress.show("anything")
        progress.clear()
    if isinstance(stream, io.StringIO):
        assert stream.getvalue() == ""
    stream.close()


def test_a_pipe_gets_no_carriage_return_from_a_real_process():
    code = ("import sys; from bkcli.progress import Progress\n"
            "with Progress('runs', interval_s=0) as p:\n"
            "    [p.update(i, 3) for i in range(1, 4)]\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, env={**os.environ}, timeout=60)
    assert done.returncode == 0 and done.stderr == b"" and done.stdout == b""


def test_phases_show_on_a_terminal_and_leave_logging_as_it_was(terminal):
    stream, read = terminal
    logger = logging.getLogger("bkbench.phase")
    before = (logger.level, logger.propagate, list(logger.handlers))
    with phases_of("bkbench.phase", Progress("phases", stream=stream), name="bk bench x"):
        logger.info("%s", "pipelined adds")
    assert (logger.level, logger.propagate, list(logger.handlers)) == before
    drawn = read()
    assert drawn.startswith("\r\x1b[Kbk bench x, 0s in: pipelined adds") and drawn.endswith("\r\x1b[K")


def test_phases_draw_nothing_without_a_terminal():
    captured = io.StringIO()
    with phases_of("bkbench.phase", Progress("phases", stream=captured), name="bk bench x"):
        logging.getLogger("bkbench.phase").info("pipelined adds")
    assert captured.getvalue() == ""


@pytest.mark.parametrize("argv", [["sim", "explore", "--seeds", "1", "--duration", "0.2", "--workload", "ledger"],
                                  ["bench", "sim", "--seeds", "1", "--duration", "0.2"]], ids=["sim-explore", "bench"])
def test_long_jobs_write_no_status_line_into_a_pipe(argv):
    src = os.path.join(os.path.dirname(__file__), "..", "..", "src")
    done = subprocess.run([sys.executable, "-m", "bkcli.main", *argv], capture_output=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.path.abspath(src)})
    assert done.returncode == 0 and done.stderr == b"" and b"\r" not in done.stdout


def test_bench_phases_are_drawn_on_a_terminal():
    src = os.path.join(os.path.dirname(__file__), "..", "..", "src")
    master, slave = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "bkcli.main", "bench", "sim", "--seeds", "2", "--duration", "0.2"],
                               stdout=subprocess.PIPE, stderr=slave, env={**os.environ, "PYTHONPATH": os.path.abspath(src)})
    os.close(slave)
    out, _ = process.communicate(timeout=300)
    drawn = b""
    try:
        while chunk := os.read(master, 4096):
            drawn += chunk
    except OSError:
        pass
    os.close(master)
    assert process.returncode == 0 and out.startswith(b"{") and b"\r" not in out
    assert b"\r\x1b[Kbk bench sim, " in drawn and b"ledger workload, seed 2 (2 of 2)" in drawn
