"""A real `bk bookie` process preallocates its journal (journalPreAllocSizeMB): after adds over TCP
the journal file on disk is a whole chunk, far past the records written into it, and a restart
after SIGKILL replays them from it; journalPreAllocSizeMB = 0 leaves files exactly as long as their records.
Also OsFileSystem's fallbacks: zeros written where posix_fallocate is missing or unsupported."""

import errno
import os

import pytest
import trio

from bklocal.processes import spawn_bookie
from bkcore.bookie.fs import DiskFullError
from bkcore.bookie.journal import EntryRecord, scan_records
from bkcore.bookie.journal_files import JOURNAL_HEADER, journal_id_of
from bkcore.digest import Digester, DigestType, master_key
from bkcore.wire import AddRequest, FrameDecoder, encode_frame
from bktransports import filesystem
from bktransports.filesystem import OsFileSystem
from raw_frames import expect_ok

MIB = 1024 * 1024
LEDGER_ID = 7
ADD_COUNT = 20


async def add_entries(port: int) -> None:
    digester = Digester(ledger_id=LEDGER_ID, digest_type=DigestType.CRC32C, password=b"pw")
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    decoder = FrameDecoder()
    for entry_id in range(ADD_COUNT):
        body = digester.pack_entry(entry_id=entry_id, lac=entry_id - 1, length=entry_id + 1, payload=b"p" * 100)
        await expect_ok(stream, decoder, encode_frame([AddRequest(request_id=entry_id, ledger_id=LEDGER_ID,
                                                                  entry_id=entry_id, master_key=master_key(b"pw"),
                                                                  body=body)]))
    await stream.aclose()


def journal_files(data_dir: str) -> list[str]:
    directory = os.path.join(data_dir, "journal")
    names = sorted((n for n in os.listdir(directory) if journal_id_of(n) is not None), key=journal_id_of)
    return [os.path.join(directory, name) for name in names]


def written_entries(path: str) -> tuple[int, list[int]]:
    with open(path, "rb") as file:
        scan = scan_records(file.read(), start_offset=JOURNAL_HEADER.size)
    assert scan.tail_problem is None
    return scan.valid_size, [r.entry_id for r in scan.records if type(r) is EntryRecord]


@pytest.mark.parametrize("prealloc_mb", [1, 0])
def test_a_real_bookie_journal_runs_ahead_of_its_records(tmp_path, prealloc_mb):
    data_dir = str(tmp_path / "bookie")
    extra = {"journalPreAllocSizeMB": prealloc_mb, "flushInterval": 600_000}
    bookie = spawn_bookie(data_dir=data_dir, metastore_uri="memory://prealloc", extra=extra)
    try:
        trio.run(add_entries, bookie.port)
    finally:
        bookie.kill()               # no checkpoint at shutdown: the restart replays the journal
    (path,) = journal_files(data_dir)
    written_size, entry_ids = written_entries(path)
    assert entry_ids == list(range(ADD_COUNT))
    assert os.path.getsize(path) == (prealloc_mb * MIB if prealloc_mb else written_size)
    # A restart (same bookie id and log) replays every record (the master key and the
    # entries) and no torn tail from the file, and starts a new one.
    bookie = spawn_bookie(data_dir=data_dir, metastore_uri="memory://prealloc", port=bookie.port, extra=extra)
    bookie.stop()
    log = open(os.path.join(data_dir, "bookie.log")).read()
    assert f"replayed {ADD_COUNT + 1} journal records from 1 files" in log and "tail problems" not in log
    assert len(journal_files(data_dir)) == 2


def test_preallocation_writes_zeros_without_posix_fallocate(tmp_path, monkeypatch):
    calls = []

    def unsupported(fd, offset, size):
        calls.append((offset, size))
        raise OSError(errno.EOPNOTSUPP, "not supported")

    monkeypatch.setattr(filesystem.os, "posix_fallocate", unsupported)
    fs = OsFileSystem(str(tmp_path))
    fs.write_at("f", 0, b"head")
    fs.preallocate("f", 3 * filesystem.ZERO_CHUNK_SIZE + 5)
    assert calls == [(4, 3 * filesystem.ZERO_CHUNK_SIZE + 1)]
    assert fs.read("f") == b"head" + bytes(3 * filesystem.ZERO_CHUNK_SIZE + 1)
    monkeypatch.delattr(filesystem.os, "posix_fallocate")
    fs.preallocate("g", 10)
    assert fs.read("g") == bytes(10)
    fs.close()


def test_no_space_for_preallocation_is_a_full_disk(tmp_path, monkeypatch):
    def no_space(fd, offset, size):
        raise OSError(errno.ENOSPC, "no space left on device")

    monkeypatch.setattr(filesystem.os, "posix_fallocate", no_space)
    fs = OsFileSystem(str(tmp_path))
    with pytest.raises(DiskFullError, match="no space"):
        fs.preallocate("f", 4096)
    fs.close()
