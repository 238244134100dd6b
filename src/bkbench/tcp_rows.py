"""A row server that stores nothing: the least work a data source that reads over the network can
do, as a peer for `bk bench spark`'s reads.

The server is a process of its own (`python -m bkbench.tcp_rows`, which prints the port it
listens on), as a bookie is. Each request asks for `count` rows of `size` bytes; the answer is
the rows' bytes back to back, sent from a buffer made once (no disk, no index, no framing, no
checksum). A Spark partition that reads its rows from it pays for the socket, the kernel's
copies and the Python around them, and nothing else; `bk bench spark` times such a source
(bkbench.spark_ceiling, option tcpRows) beside the real reads and the source that reads
nothing, so the ratios say how much of the gap any networked source would have on the machine.

    with RowServer.started() as server:          # a child process
        for buffer, count in receive_rows(server.address, count=10_000, size=1024, batch_rows=8192):
            ...                                  # buffer: count * size bytes
"""

from __future__ import annotations

import contextlib
import socket
import struct
import subprocess
import sys
import threading
from typing import Iterator

REQUEST = struct.Struct(">QI")         # rows wanted, bytes per row
SEND_CHUNK_SIZE = 1024 * 1024
ROW_SIZE_MAX = 16 * 1024 * 1024


def _serve_connection(connection: socket.socket) -> None:
    chunks: dict[int, memoryview] = {}          # by row size: whole rows of bytes 0..255 repeated
    with connection:
        while True:
            request = _receive_exactly(connection, REQUEST.size)
            if request is None:
                return
            count, size = REQUEST.unpack(request)
            if not 0 < size <= ROW_SIZE_MAX:
                return
            chunk = chunks.get(size)
            if chunk is None:
                rows_per_chunk = max(1, SEND_CHUNK_SIZE // size)
                chunk = chunks[size] = memoryview(bytes(range(256)) * (rows_per_chunk * size // 256 + 1))[
                    :rows_per_chunk * size]
            left = count * size
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
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port))) as connection:
        connection.sendall(REQUEST.pack(count, size))
        left = count
        while left:
            rows = min(batch_rows, left)
            buffer = bytearray(rows * size)
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
