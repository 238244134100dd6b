"""Typed errors of log streams (namespaces, streams, writers, readers, cursors).

Ledger errors (NotEnoughBookies, Timeout, ...) pass through unchanged; these name what only a
stream can get wrong. Each says what happened and, where there is one, what to do about it.
"""


class StreamException(Exception):
    """Base of every stream error."""


class NamespaceNotFound(StreamException):
    pass


class NamespaceExists(StreamException):
    pass


class NamespaceNotEmpty(StreamException):
    pass


class StreamNotFound(StreamException):
    pass


class StreamExists(StreamException):
    pass


class WriterFenced(StreamException):
    """Another writer opened the stream and recovered this writer's segment; this writer can
    add nothing more (records it had not been told were written may or may not be in)."""


class EndOfStream(StreamException):
    """The stream was sealed with an end-of-stream marker: nothing more can be written."""


class TxidOutOfOrder(StreamException, ValueError):
    """A record's txid is below one the stream already holds (txids never decrease)."""


class PositionTruncated(StreamException):
    """The position asked for was truncated away (truncate() or retention)."""


class CursorNotFound(StreamException):
    pass


class StreamMetadataConflict(StreamException):
    """A metadata update kept losing compare-and-set races (or the metastore kept failing)."""


class MetastoreSessionExpired(StreamException):
    """This client's metastore session expired: every later metadata call fails. Connect again
    (a new client) to go on."""
