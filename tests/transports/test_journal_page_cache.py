"""journalRemoveFromPageCache (BookKeeper's, on by default): a bookie lets the OS drop its
journal's cached pages once synced, but for the last 8 MiB. Checked where it happens, in the
page cache itself (mincore on a shared mapping of the file): OsFileSystem.drop_cached alone, then
a real `bk bookie` process with the option on and off."""

import ctypes
import ctypes.util
import mmap
import os

import pytest
import trio

from bklocal.processes import spawn_bookie
from bkcore.bookie.journal_files import PAGE_CACHE_DROP_LAG, journal_id_of
from bkcore.digest import Digester, DigestType, master_key
from bkcore.wire import AddBatchRequest, FrameDecoder, encode_frame
from bktransports.filesystem import OsFileSystem
from raw_frames import expect_ok

MIB = 1024 * 1024
PAGE = mmap.PAGESIZE
LEDGER_ID = 9
PASSWORD = b"pw"

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)

pytestmark = pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise on this platform")


def resident_pages(path: str, offset: int, size: int) -> int:
    """How many pages of path[offset:offset + size] are in the page cache now."""
    fd = os.open(path, os.O_RDONLY)
    try:
        address = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, offset)
        assert address != ctypes.c_void_p(-1).value, os.strerror(ctypes.get_errno())
        try:
            pages = ctypes.create_string_buffer(-(-size // PAGE))
            assert _libc.mincore(address, size, pages) == 0, os.strerror(ctypes.get_errno())
            return sum(byte & 1 for byte in pages.raw)
        finally:
            _libc.munmap(address, size)
    finally:
        os.close(fd)


def test_drop_cached_lets_the_pages_of_a_synced_range_go(tmp_path):
    fs = OsFileSystem(str(tmp_path))
    fs.write_at("file", 0, os.urandom(4 * MIB))
    fs.sync("file")
    path = str(tmp_path / "file")
    assert resident_pages(path, 0, 4 * MIB) > 3 * MIB // PAGE       # just written: in memory
    fs.drop_cached("file", 0, 2 * MIB)
    assert resident_pages(path, 0, 2 * MIB) == 0
    assert resident_pages(path, 2 * MIB, 2 * MIB) > MIB // PAGE      # the rest is left alone
    with open(path, "rb") as file:                                   # and nothing is lost
        assert len(file.read()) == 4 * MIB
    fs.drop_cached("never written", 0, MIB)                          # a hint: no error for that


async def add_megabytes(port: int, count: int) -> None:
    """`count` frames of about 1 MiB of adds each, one after the other."""
    digester = Digester(ledger_id=LEDGER_ID, digest_type=DigestType.CRC32C, password=PASSWORD)
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    decoder = FrameDecoder()
    payload = os.urandom(1000)
    per_frame = 1000
    for frame_index in range(count):
        first = frame_index * per_frame
        bodies = [digester.pack_entry(entry_id=i, lac=i - 1, length=(i + 1) * len(payload), payload=payload)
                  for i in range(first, first + per_frame)]
        await expect_ok(stream, decoder, encode_frame([AddBatchRequest(request_id=frame_index, ledger_id=LEDGER_ID,
                                                                       first_entry_id=first,
                                                                       master_key=master_key(PASSWORD),
                                                                       bodies=bodies)]))
    await stream.aclose()


@pytest.mark.parametrize("remove_from_page_cache", [True, False])
def test_a_real_bookie_keeps_only_its_journal_tail_in_the_page_cache(tmp_path, remove_from_page_cache):
    data_dir = str(tmp_path / "bookie")
    bookie = spawn_bookie(data_dir=data_dir, metastore_uri="memory://pages",
                          extra={"journalRemoveFromPageCache": remove_from_page_cache, "flushInterval": 600_000})
    try:
        trio.run(add_megabytes, bookie.port, 20)
        journal_dir = os.path.join(data_dir, "journal")
        (name,) = [n for n in os.listdir(journal_dir) if journal_id_of(n) is not None]
        path = os.path.join(journal_dir, name)
        written = 20 * MIB - 2 * PAGE_CACHE_DROP_LAG        # well before the synced end less the lag
        cached = resident_pages(path, 0, written)
    finally:
        bookie.stop()
    if remove_from_page_cache:
        assert cached == 0
    else:
        assert cached > written // PAGE // 2
