"""A bookie whose journal disk is full stops with a message that names the directory to free,
whether the group was synced on the event loop (small) or in a worker thread (large), and the
add it could not journal is never acknowledged."""

import re

import pytest
import trio

from bkcli.bookie_command import first_system_exit
from bkcore.bookie.fs import DiskFullError
from bkcore.digest import Digester, DigestType, master_key
from bkcore.errors import Code
from bkcore.wire import AddBatchRequest, AddRequest, FrameDecoder, encode_frame
from bkmetastore.layout_node import resolve_layout
from bkmetastore.memory_store import forget_memory_servers
from bkmetastore.uri import open_metastore, parse_metastore_uri
from bktransports.bookie_server import BookieServer, BookieServerConfig

URI = "memory://journal-full"


@pytest.mark.parametrize("entry_count", [1, 40])     # 1 KiB each: inline, and past 16 KiB
async def test_a_full_journal_disk_stops_the_bookie_and_acknowledges_nothing(tmp_path, entry_count):
    forget_memory_servers()
    parsed = parse_metastore_uri(URI)
    answers: list = []
    with pytest.raises(BaseExceptionGroup) as raised:
        async with await open_metastore(parsed) as store:
            server = BookieServer(BookieServerConfig(data_dir=str(tmp_path / "bookie"), port=0), store,
                                  await resolve_layout(store, parsed))
            async with trio.open_nursery() as nursery:
                port = await nursery.start(server.serve)

                def full(path, offset, data):
                    raise DiskFullError(f"{path}: no space left on device")
                server.fs.write_at = full           # every journal write from now on

                digester = Digester(ledger_id=1, digest_type=DigestType.CRC32C, password=b"pw")
                bodies = [digester.pack_entry(entry_id=i, lac=i - 1, length=(i + 1) * 1024, payload=bytes(1024))
                          for i in range(entry_count)]
                request = (AddRequest(1, 1, 0, master_key(b"pw"), bodies[0]) if entry_count == 1 else
                           AddBatchRequest(1, 1, 0, master_key(b"pw"), bodies))
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                await stream.send_all(encode_frame([request]))
                decoder = FrameDecoder()
                with trio.fail_after(10):
                    while data := await stream.receive_some(65536):
                        decoder.feed(data)
                        while (frame := decoder.next_frame()) is not None:
                            answers.extend(frame)
                await trio.sleep(10)                 # the bookie must stop before this ends
    stop = first_system_exit(raised.value)
    assert stop is not None and re.search(r"journal disk full .*; free space in .*/journal and restart", str(stop))
    assert all(answer.code != Code.OK for answer in answers)
