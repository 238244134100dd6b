"""A row server that stores nothing: the least work a data source that reads over the network can
do, as a peer for `bk bench spark`'s reads.

The server is a process of its own (`python -m bkbench.tcp_rows`, which prints the port it
listens on), as a bookie is. Each request asks for `count` rows of `size` bytes; the answer is
the rows' bytes back to back, sent from a buffer made once (no disk, no index, no framing, no
checksum). A Spark partition that reads its rows from it pays for the socket, the kernel's
copies and the Python around them, and nothing else; `bk bench spark` times such a source
(bkbench.spark_ceiling, option tcpRows) beside the real reads and the source that reads
nothing, so the ratios say how much of the gap any networked source would have on the machine.

It also serves BookKeeper entries (receive_entries): each row packed as a ledger's entry is, a
header and a CRC32C digest before its payload (bkcore.digest), made once per batch size. A source
that reads those must check every digest and take the payloads out, as any BookKeeper client must;
no bookie, index or framing is in the way (the option tcpEntries of bkbench.spark_ceiling).

    with RowServer.started() as server:          # a child process
        for buffer, count in receive_rows(server.address, count=10_000, size=1024, batch_rows=8192):
            ...                                  # buffer: count * size bytes
        for buffer, count in receive_entries(server.address, count=10_000, size=1024, batch_rows=8192):
            ...                                  # entries 0..count-1 of ENTRY_LEDGER_ID, packed
"""

from __future__ import annotations

import contextlib
import socket
import struct
import subprocess
import sys
import threading
from typing import Iterator

from bkcore.digest import ENTRY_HEADER, Digester, DigestType

REQUEST = struct.Struct(">QIIB")       # rows wanted, bytes per row, rows per batch, ROWS or ENTRIES
ROWS, ENTRIES = 0, 1
SEND_CHUNK_SIZE = 1024 * 1024
ROW_SIZE_MAX = 16 * 1024 * 1024
BATCH_ENTRIES_MAX = 1 << 20
ENTRY_LEDGER_ID = 1
ENTRY_DIGESTER = Digester(ledger_id=ENTRY_LEDGER_ID, digest_type=DigestType.CRC32C, password=b"")
ENTRY_OVERHEAD_SIZE = ENTRY_HEADER.size + ENTRY_DIGESTER.digest_size


def _pattern(size: int) -> bytes:
    """size bytes of 0..255 repeated: every row's payload."""
    return (bytes(range(256)) * (size // 256 + 1))[:size]


def _rows_chunk(size: int) -> memoryview:
    """Whole rows of the pattern, about SEND_CHUNK_SIZE bytes."""
    rows_per_chunk = max(1, SEND_CHUNK_SIZE // size)
    return memoryview(_pattern(rows_per_chunk * size))


def _entries_chunk(size: int, batch_rows: int) -> memoryview:
    """One batch: entries 0..batch_rows-1 of ENTRY_LEDGER_ID, each with a payload of the pattern."""
    payload = _pattern(size)
    return memoryview(b"".join(ENTRY_DIGESTER.pack_entry(entry_id=entry_id, lac=entry_id - 1,
                                                         length=(entry_id + 1) * size, payload=payload)
                               for entry_id in range(batch_rows)))


def _serve_connection(connection: socket.socket) -> None:
    chunks: dict[tuple, memoryview] = {}
    with connection:
        while True:
            request = _receive_exactly(connection, REQUEST.size)
            if request is None:
                return
            count, size, batch_rows, kind = REQUEST.unpack(request)
            if not 0 < size <= ROW_SIZE_MAX or not 0 < batch_rows <= BATCH_ENTRIES_MAX or kind not in (ROWS, ENTRIES):
                return
            key = (size,) if kind == ROWS else (size, batch_rows)
            chunk = chunks.get(key)
            if chunk is None:
                chunk = chunks[key] = _rows_chunk(size) if kind == ROWS else _entries_chunk(size, batch_rows)
            # Rows go out as they fit the chunk; entries a batch at a time, each batch entries
            # 0, 1, ... (the last batch the first of the chunk's).
            row_size = size if kind == ROWS else size + ENTRY_OVERHEAD_SIZE
            left = count * row_size
            while left:
                sent = min(left, len(chunk))
                connection.sendall(chunk[:sent])
                left -= sent


def _receive_exactly(connection: socket.socket, size: int) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        part = connection.recv(size - len(data))
        if not part:
            return None
        data += part
    return bytes(data)


def serve(listener: socket.socket) -> None:
    """Answer every connection in a thread of its own, until the process ends."""
    while True:
        connection, _ = listener.accept()
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=_serve_connection, args=(connection,), daemon=True).start()


def receive_rows(address: str, *, count: int, size: int, batch_rows: int) -> Iterator[tuple[bytearray, int]]:
    """`count` rows of `size` bytes from the server at host:port, in buffers of batch_rows rows
    (the last may hold fewer): (buffer, rows in it). Each buffer is filled by recv_into."""
    return _receive(address, count, size, batch_rows, ROWS, size)


def receive_entries(address: str, *, count: int, size: int, batch_rows: int) -> Iterator[tuple[bytearray, int]]:
    """`count` rows of `size` bytes as packed BookKeeper entries, in buffers of batch_rows entries
    (the last may hold fewer): (buffer, entries in it). Each buffer holds entries 0, 1, ... of
    ENTRY_LEDGER_ID back to back, ENTRY_OVERHEAD_SIZE + size bytes each, to be checked with
    ENTRY_DIGESTER."""
    return _receive(address, count, size, batch_rows, ENTRIES, size + ENTRY_OVERHEAD_SIZE)


def _receive(address: str, count: int, size: int, batch_rows: int, kind: int,
             row_size: int) -> Iterator[tuple[bytearray, int]]:
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port))) as connection:
        connection.sendall(REQUEST.pack(count, size, batch_rows, kind))
        left = count
        while left:
            rows = min(batch_rows, left)
            buffer = bytearray(rows * row_size)
            view, filled = memoryview(buffer), 0
            while filled < len(buffer):
                received = connection.recv_into(view[filled:])
                if not received:
                    raise ConnectionError(f"the row server at {address} closed after {count - left} of {count} rows")
                filled += received
            left -= rows
            yield buffer, rows


class RowServer:
    """The server as a child process; `address` is where it listens (127.0.0.1)."""

    def __init__(self, process: subprocess.Popen, address: str) -> None:
        self.process, self.address = process, address

    @classmethod
    @contextlib.contextmanager
    def started(cls) -> Iterator["RowServer"]:
        process = subprocess.Popen([sys.executable, "-m", "bkbench.tcp_rows"], stdout=subprocess.PIPE, text=True)
        try:
            line = process.stdout.readline()
            if not line.startswith("listening on "):
                raise RuntimeError(f"the row server did not start (it said {line!r})")
            yield cls(process, line.split()[-1])
        finally:
            process.kill()
            process.wait()


def main() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    print(f"listening on 127.0.0.1:{listener.getsockname()[1]}", flush=True)
    serve(listener)


if __name__ == "__main__":
    main()
