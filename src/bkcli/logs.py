"""One logging set-up for every `bk` process, and the rotation of standalone's log files.

    bk --log-level DEBUG bookie --config ...     (or BK_LOG_LEVEL=DEBUG in the environment)

Servers (bookie, metastore, stream-storage) log at INFO unless told otherwise, client commands
at WARNING. `bk standalone` hands its level to the processes it starts (through BK_LOG_LEVEL)
and keeps each one's log file under LOG_SIZE_MAX, with LOG_BACKUPS older copies (rotate_log).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys

LEVEL_ENV = "BK_LOG_LEVEL"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"
LOG_SIZE_MAX = 32 * 1024 * 1024
LOG_BACKUPS = 5


def add_log_level_argument(parser) -> None:
    parser.add_argument("--log-level", type=str.upper, choices=LEVELS, default=None,
                        help=f"DEBUG, INFO, WARNING or ERROR (${LEVEL_ENV}; else INFO for servers, WARNING for "
                             f"the rest)")


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is when a record comes (not the one there when it was made:
    `bk`'s main() may run more than once in a process that swaps sys.stderr, as tests do)."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _) -> None:
        pass


def setup_logging(level: str | None, *, default: str) -> str:
    """Configure the root logger, for the whole process; returns the level chosen. An unknown
    ${LEVEL_ENV} is named and the default used."""
    chosen = level or os.environ.get(LEVEL_ENV, "").upper() or default
    is_known = chosen in LEVELS
    logging.basicConfig(level=chosen if is_known else default, format=FORMAT, handlers=[_StderrHandler()], force=True)
    if not is_known:
        logging.getLogger("bk").warning("%s=%s is not one of %s; logging at %s", LEVEL_ENV,
                                        os.environ.get(LEVEL_ENV), ", ".join(LEVELS), default)
        return default
    return chosen


def rotate_log(path: str, *, size_max: int = LOG_SIZE_MAX, backups: int = LOG_BACKUPS) -> bool:
    """Once `path` reaches size_max: path.N-1 -> path.N ... path -> path.1 (a copy), then
    `path` truncated in place, as logrotate's copytruncate does. The process writing it keeps
    its file open in append mode, so it goes on at the new end. (A line written between the
    copy and the truncation is lost.) True when it rotated."""
    try:
        if os.path.getsize(path) < size_max:
            return False
    except OSError:
        return False
    for index in range(backups - 1, 0, -1):
        older = f"{path}.{index}"
        if os.path.exists(older):
            os.replace(older, f"{path}.{index + 1}")
    shutil.copyfile(path, f"{path}.1")
    os.truncate(path, 0)
    return True
