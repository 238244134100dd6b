"""One logging set-up for every process, and standalone's log rotation (copytruncate)."""

import logging
import os

from bkcli.logs import LEVEL_ENV, rotate_log, setup_logging


def test_the_level_comes_from_the_flag_then_the_environment_then_the_default(monkeypatch, caplog):
    monkeypatch.delenv(LEVEL_ENV, raising=False)
    assert setup_logging(None, default="WARNING") == "WARNING"
    assert logging.getLogger().level == logging.WARNING
    monkeypatch.setenv(LEVEL_ENV, "debug")
    assert setup_logging(None, default="INFO") == "DEBUG"
    assert setup_logging("ERROR", default="INFO") == "ERROR"
    monkeypatch.setenv(LEVEL_ENV, "chatty")
    assert setup_logging(None, default="INFO") == "INFO"
    logging.basicConfig(level=logging.WARNING, force=True)


def test_a_log_past_its_size_is_copied_aside_and_truncated_and_its_writer_goes_on(tmp_path):
    path = str(tmp_path / "bookie.log")
    writer = open(path, "ab", buffering=0)        # as bk standalone's children hold their logs
    try:
        writer.write(b"a" * 100)
        assert not rotate_log(path, size_max=1000, backups=2)
        writer.write(b"b" * 1000)
        assert rotate_log(path, size_max=1000, backups=2)
        assert os.path.getsize(path) == 0 and os.path.getsize(path + ".1") == 1100
        writer.write(b"c" * 10)                    # appends at the new end, no hole before it
        assert open(path, "rb").read() == b"c" * 10
        writer.write(b"d" * 1000)
        assert rotate_log(path, size_max=1000, backups=2)
        writer.write(b"e" * 1000)
        assert rotate_log(path, size_max=1000, backups=2)    # the oldest copy goes
        assert sorted(os.listdir(tmp_path)) == ["bookie.log", "bookie.log.1", "bookie.log.2"]
        assert open(path + ".2", "rb").read() == b"c" * 10 + b"d" * 1000
        assert open(path + ".1", "rb").read() == b"e" * 1000
    finally:
        writer.close()
