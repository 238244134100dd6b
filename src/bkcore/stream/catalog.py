"""The metastore side of log streams: namespaces, streams, segments and cursors as typed values.

Paths and value formats are bkcore.stream.segments'. Every change is a create or a
compare-and-set; when the store answers CONNECTION_LOSS (the outcome is unknown) the node is
re-read and compared before anything is retried, so a write that did land is never applied
twice nor reported as lost.

Segment and stream nodes are read through the catalog's WatchedCache
(bkcore.stream.watched_cache): a node whose watch has not fired since its last read is not read
again.
"""

from __future__ import annotations

from bkcore.metaops import Children, Create, Delete, Get, MetaCode, MetaResult, SetData
from bkcore.stream.errors import (
    CursorNotFound, MetastoreSessionExpired, NamespaceExists, NamespaceNotEmpty, NamespaceNotFound, StreamExists,
    StreamMetadataConflict, StreamNotFound,
)
from bkcore.stream.records import DLSN
from bkcore.stream.watched_cache import WatchedCache
from bkcore.stream.segments import SegmentMetadata, StreamLayout, StreamMetadata, StreamSettings, stream_id_of

# How often an op whose outcome stayed unknown is tried again, and the pause between tries.
UNKNOWN_OUTCOME_RETRIES = 8
RETRY_PAUSE_S = 0.1


class StreamCatalog:
    def __init__(self, store, layout: StreamLayout, *, runtime) -> None:
        self.store = store              # an async metastore (bkmetastore.api's interface)
        self.layout = layout
        self._rt = runtime
        self.cache = WatchedCache()

    # -- namespaces ---------------------------------------------------------------------------

    async def create_namespace(self, namespace: str, settings: StreamSettings = StreamSettings()) -> None:
        path = self.layout.namespace_path(namespace)
        await self._ensure(f"{self.layout.root}/streams")
        data = _pack_settings(settings)
        if (await self._write(Create(path, data))).code is MetaCode.NODE_EXISTS:
            raise NamespaceExists(f"namespace {namespace!r} already exists")

    async def namespace_settings(self, namespace: str) -> StreamSettings:
        result = await self._read(Get(self.layout.namespace_path(namespace)))
        if result.code is MetaCode.NO_NODE:
            raise NamespaceNotFound(f"namespace {namespace!r} does not exist (create it first)")
        return _unpack_settings(result.data)

    async def list_namespaces(self) -> list[str]:
        result = await self._read(Children(f"{self.layout.root}/streams"))
        return sorted(result.children) if result.code is MetaCode.OK else []

    async def delete_namespace(self, namespace: str) -> None:
        if await self.list_streams(namespace):
            raise NamespaceNotEmpty(f"namespace {namespace!r} still has streams; delete them first")
        result = await self._write(Delete(self.layout.namespace_path(namespace)))
        if result.code is MetaCode.NOT_EMPTY:
            raise NamespaceNotEmpty(f"namespace {namespace!r} still has streams; delete them first")

    # -- streams ------------------------------------------------------------------------------

    async def create_stream(self, namespace: str, stream: str,
                            settings: StreamSettings | None = None) -> StreamMetadata:
        if settings is None:
            settings = await self.namespace_settings(namespace)
        else:
            await self.namespace_settings(namespace)      # the namespace must exist
        path = self.layout.stream_path(namespace, stream)
        metadata = StreamMetadata(settings)
        result = await self._write(Create(path, metadata.to_bytes()))
        if result.code is MetaCode.NODE_EXISTS:
            # Its creator may have died between this node and the ones below: without them the
            # stream could never be written or read, so whoever creates it again completes it.
            await self._ensure_stream_children(namespace, stream)
            raise StreamExists(f"stream {namespace}/{stream} already exists")
        await self._ensure_stream_children(namespace, stream)
        return StreamMetadata(settings, version=0)

    async def _ensure_stream_children(self, namespace: str, stream: str) -> None:
        """The nodes a stream needs besides its own: its segments, its cursors, its id."""
        await self._ensure(self.layout.segments_path(namespace, stream))
        await self._ensure(self.layout.cursors_path(namespace, stream))
        await self._ensure(f"{self.layout.root}/stream-ids")
        full_name = f"{namespace}/{stream}".encode()
        id_path = self.layout.stream_id_path(stream_id_of(namespace, stream))
        result = await self._write(Create(id_path, full_name))
        if result.code is MetaCode.NODE_EXISTS and (await self._read(Get(id_path))).data != full_name:
            raise StreamMetadataConflict(f"stream {namespace}/{stream} hashes to the id of another stream; "
                                         f"choose another name")

    async def stream_by_id(self, stream_id: int) -> tuple[str, str]:
        """(namespace, stream) of a stream id."""
        result = await self._read(Get(self.layout.stream_id_path(stream_id)))
        if result.code is MetaCode.NO_NODE:
            raise StreamNotFound(f"no stream has id {stream_id}")
        namespace, stream = result.data.decode().split("/", 1)
        return namespace, stream

    async def get_stream(self, namespace: str, stream: str) -> StreamMetadata:
        metadata = await self._watched_get(self.layout.stream_path(namespace, stream), StreamMetadata.from_bytes)
        if metadata is None:
            raise StreamNotFound(f"stream {namespace}/{stream} does not exist")
        return metadata

    async def list_streams(self, namespace: str) -> list[str]:
        result = await self._read(Children(self.layout.namespace_path(namespace)))
        if result.code is MetaCode.NO_NODE:
            raise NamespaceNotFound(f"namespace {namespace!r} does not exist")
        return sorted(result.children)

    async def replace_stream(self, namespace: str, stream: str, new: StreamMetadata) -> StreamMetadata | None:
        """CAS on new.version; the stored value, or None if someone else changed it first."""
        path = self.layout.stream_path(namespace, stream)
        self.cache.forget(path)
        result = await self._write(SetData(path, new.to_bytes(), new.version))
        if result.code is MetaCode.NO_NODE:
            raise StreamNotFound(f"stream {namespace}/{stream} does not exist")
        if result.code is MetaCode.BAD_VERSION:
            return None
        return StreamMetadata.from_bytes(new.to_bytes(), version=result.version)

    async def delete_stream_nodes(self, namespace: str, stream: str) -> None:
        """Remove the stream's nodes (its segments' ledgers must be gone already)."""
        for seqno in [s.seqno for s in await self.segments(namespace, stream)]:
            await self._write(Delete(self.layout.segment_path(namespace, stream, seqno)))
        for cursor in await self.list_cursors(namespace, stream):
            await self._write(Delete(self.layout.cursor_path(namespace, stream, cursor)))
        commits = await self._read(Children(self.commits_path(namespace, stream)))
        for name in commits.children if commits.code is MetaCode.OK else ():
            await self._write(Delete(f"{self.commits_path(namespace, stream)}/{name}"))
        await self._write(Delete(self.commits_path(namespace, stream)))
        await self._write(Delete(self.layout.segments_path(namespace, stream)))
        await self._write(Delete(self.layout.cursors_path(namespace, stream)))
        await self._write(Delete(self.layout.stream_path(namespace, stream)))
        await self._write(Delete(self.layout.stream_id_path(stream_id_of(namespace, stream))))

    # -- segments -----------------------------------------------------------------------------

    async def segments(self, namespace: str, stream: str) -> list[SegmentMetadata]:
        return (await self.segments_with_watch(namespace, stream, watch=False))[0]

    async def segments_with_watch(self, namespace: str, stream: str, *, watch: bool = True
                                  ) -> tuple[list[SegmentMetadata], object | None]:
        """Every segment, ascending by seqno; with `watch`, a watch that fires when a segment
        is added or removed (changes of a segment's own value are not watched)."""
        path = self.layout.segments_path(namespace, stream)
        if watch:
            result, fired = await self.store.execute_watch(Children(path))
            _check_answered(result, path)
        else:
            result, fired = await self._read(Children(path)), None
        if result.code is MetaCode.NO_NODE:
            raise StreamNotFound(f"stream {namespace}/{stream} does not exist")
        segments = []
        for name in sorted(result.children):
            segment = await self._watched_get(f"{path}/{name}", SegmentMetadata.from_bytes)
            if segment is not None:
                segments.append(segment)
        return segments, fired

    async def _watched_get(self, path: str, decode):
        """decode(data, version=) of a node's value (None: no such node), from the cache while
        its watch is quiet; otherwise read with a new watch, and cached."""
        value = self.cache.get(path)
        if value is not None:
            return value
        result, watch = await self.store.execute_watch(Get(path))
        if result.code in (MetaCode.CONNECTION_LOSS, MetaCode.SESSION_EXPIRED):
            # Read again as every read is (tried while the outcome is unknown, raising once the
            # session is gone), and cache nothing: that read sets no watch.
            result, watch = await self._read(Get(path)), None
        if result.code is not MetaCode.OK:
            return None
        value = decode(result.data, version=result.version)
        if watch is not None:
            self.cache.put(path, value, watch)
        return value

    async def create_segment(self, namespace: str, stream: str, segment: SegmentMetadata) -> SegmentMetadata | None:
        """The stored segment, or None if that seqno exists already (another writer won)."""
        path = self.layout.segment_path(namespace, stream, segment.seqno)
        result = await self._write(Create(path, segment.to_bytes()))
        if result.code is MetaCode.NODE_EXISTS:
            return None
        if result.code is MetaCode.NO_NODE:
            raise StreamNotFound(f"stream {namespace}/{stream} does not exist")
        return SegmentMetadata.from_bytes(segment.to_bytes(), version=0)

    async def replace_segment(self, namespace: str, stream: str, new: SegmentMetadata) -> SegmentMetadata | None:
        """CAS on new.version; the stored segment, or None if it changed (or vanished) meanwhile."""
        path = self.layout.segment_path(namespace, stream, new.seqno)
        self.cache.forget(path)
        result = await self._write(SetData(path, new.to_bytes(), new.version))
        if result.code in (MetaCode.BAD_VERSION, MetaCode.NO_NODE):
            return None
        return SegmentMetadata.from_bytes(new.to_bytes(), version=result.version)

    # -- cursors ------------------------------------------------------------------------------

    async def list_cursors(self, namespace: str, stream: str) -> list[str]:
        result = await self._read(Children(self.layout.cursors_path(namespace, stream)))
        return sorted(result.children) if result.code is MetaCode.OK else []

    async def cursor(self, namespace: str, stream: str, cursor: str) -> DLSN:
        result = await self._read(Get(self.layout.cursor_path(namespace, stream, cursor)))
        if result.code is MetaCode.NO_NODE:
            raise CursorNotFound(f"cursor {cursor!r} of stream {namespace}/{stream} does not exist")
        return DLSN.parse(result.data.decode())

    async def commit_cursor(self, namespace: str, stream: str, cursor: str, position: DLSN) -> None:
        path = self.layout.cursor_path(namespace, stream, cursor)
        data = str(position).encode()
        result = await self._write(SetData(path, data, -1))
        if result.code is MetaCode.NO_NODE:
            await self.get_stream(namespace, stream)
            result = await self._write(Create(path, data))
            if result.code is MetaCode.NODE_EXISTS:
                await self._write(SetData(path, data, -1))

    async def delete_cursor(self, namespace: str, stream: str, cursor: str) -> None:
        if (await self._write(Delete(self.layout.cursor_path(namespace, stream, cursor)))).code is MetaCode.NO_NODE:
            raise CursorNotFound(f"cursor {cursor!r} of stream {namespace}/{stream} does not exist")

    # -- commit records of batch writers (bkcore.stream.attach) ------------------------------

    def commits_path(self, namespace: str, stream: str) -> str:
        return f"{self.layout.stream_path(namespace, stream)}/commits"

    async def commit_record(self, namespace: str, stream: str, writer_id: str) -> tuple[bytes | None, int]:
        """(value, version) of a batch writer's commit record; (None, -1) if it has none."""
        result = await self._read(Get(f"{self.commits_path(namespace, stream)}/{_writer_node(writer_id)}"))
        if result.code is MetaCode.NO_NODE:
            await self.get_stream(namespace, stream)          # a missing stream is an error
            return None, -1
        return result.data, result.version

    async def put_commit_record(self, namespace: str, stream: str, writer_id: str, data: bytes,
                                version: int) -> bool:
        """Create (version -1) or CAS the record; False if someone else changed it first."""
        path = f"{self.commits_path(namespace, stream)}/{_writer_node(writer_id)}"
        if version < 0:
            await self._ensure(self.commits_path(namespace, stream))
            return (await self._write(Create(path, data))).code is MetaCode.OK
        return (await self._write(SetData(path, data, version))).code is MetaCode.OK

    # -- plumbing -----------------------------------------------------------------------------

    async def _ensure(self, path: str) -> None:
        """Create `path` if missing. One create: every backend makes the missing parents of
        what it creates (BookKeeper's createFullPathOptimistic; bkmetastore.memory)."""
        await self._write(Create(path))

    async def _read(self, op: Get | Children) -> MetaResult:
        return await self._execute(op, settle=None)

    async def _write(self, op: Create | SetData | Delete) -> MetaResult:
        """Execute a write; after CONNECTION_LOSS, re-read and decide whether it landed."""
        return await self._execute(op, settle=self._landed)

    async def _execute(self, op, *, settle) -> MetaResult:
        """`op`, tried again while its outcome is unknown (CONNECTION_LOSS); before a write is
        sent again, settle(op) says whether it landed after all (None: it plainly did not)."""
        for _ in range(UNKNOWN_OUTCOME_RETRIES):
            result = await self.store.execute(op)
            if result.code is MetaCode.SESSION_EXPIRED:
                raise _session_expired(op)
            if result.code is not MetaCode.CONNECTION_LOSS:
                return result
            await self._rt.sleep(RETRY_PAUSE_S)
            if settle is not None:
                landed = await settle(op)
                if landed is not None:
                    return landed
        verb = "reading" if settle is None else "writing"
        raise StreamMetadataConflict(f"the metastore did not answer {verb} {op.path}; is it up?")

    async def _landed(self, op: Create | SetData | Delete) -> MetaResult | None:
        """After an unknown outcome: the result the op had if the store shows it applied,
        None if it plainly was not (so it is safe to send again)."""
        now = await self.store.execute(Get(op.path))
        if now.code is MetaCode.CONNECTION_LOSS:
            return None
        if isinstance(op, Delete):
            return MetaResult(MetaCode.OK) if now.code is MetaCode.NO_NODE else None
        if isinstance(op, Create):
            return MetaResult(MetaCode.OK, version=now.version) if now.code is MetaCode.OK and now.data == op.data \
                else None
        if now.code is MetaCode.OK and now.data == op.data and now.version != op.version:
            return MetaResult(MetaCode.OK, version=now.version)
        return None


def _writer_node(writer_id: str) -> str:
    """A writer id as one node name (ids such as checkpoint paths hold '/')."""
    if not writer_id or len(writer_id) > 400:
        raise ValueError(f"writer id {writer_id!r} must be 1 to 400 characters")
    return writer_id.replace("%", "%25").replace("/", "%2F")


def _check_answered(result: MetaResult, path: str) -> None:
    if result.code is MetaCode.CONNECTION_LOSS:
        raise StreamMetadataConflict(f"the metastore did not answer reading {path}; is it up?")


def _pack_settings(settings: StreamSettings) -> bytes:
    return StreamMetadata(settings).to_bytes()


def _unpack_settings(data: bytes) -> StreamSettings:
    return StreamMetadata.from_bytes(data, version=0).settings


def _session_expired(op) -> MetastoreSessionExpired:
    return MetastoreSessionExpired(f"the metastore session of this client expired (at {type(op).__name__} "
                                   f"{op.path}); connect again to go on")
