"""StreamViews for the planning tests, built as the driver builds them (bkspark.planning.extent_of
over segment metadata and, for an in-progress segment, its LAC): no Spark, no cluster.

The stream "ns/s" of most tests:

    segment 1  completed    ledger 11  entries 0-9  txids 0-99     1000 bytes an entry  created at 100 s
    segment 2  completed    ledger 12  entries 0-4  txids 100-149  1000 bytes an entry  created at 200 s
    segment 3  in progress  ledger 13  LAC 6        txids from 150 1000 bytes an entry  created at 300 s
"""

from bkcore.stream.records import DLSN
from bkcore.stream.segments import SegmentMetadata, SegmentState
from bkspark.planning import StreamView, extent_of

ENTRY_SIZE = 1000


def completed(seqno: int, ledger_id: int, last_entry_id: int, first_txid: int, last_txid: int, *, ctime_s: int = 0):
    return extent_of(SegmentMetadata(seqno, ledger_id, SegmentState.COMPLETED, first_txid, last_txid, last_entry_id,
                                     record_count=last_txid - first_txid + 1, size=(last_entry_id + 1) * ENTRY_SIZE,
                                     ctime_s=ctime_s))


def in_progress(seqno: int, ledger_id: int, lac: int, first_txid: int, *, ctime_s: int = 0):
    # The metadata of an in-progress segment knows no last entry: the LAC read now says how far.
    return extent_of(SegmentMetadata(seqno, ledger_id, SegmentState.IN_PROGRESS, first_txid, ctime_s=ctime_s),
                     lac=lac, records_through=(lac + 1) * 10, bytes_through=(lac + 1) * ENTRY_SIZE)


def truncated(seqno: int, ledger_id: int, *, ctime_s: int = 0):
    return extent_of(SegmentMetadata(seqno, ledger_id, SegmentState.TRUNCATED, 0, 9, 9, ctime_s=ctime_s))


def view(*extents, truncated_to: DLSN = DLSN(0, 0, 0)) -> StreamView:
    return StreamView("ns/s", truncated_to, tuple(extents))


SEGMENT_1 = completed(1, 11, 9, 0, 99, ctime_s=100)
SEGMENT_2 = completed(2, 12, 4, 100, 149, ctime_s=200)
SEGMENT_3 = in_progress(3, 13, 6, 150, ctime_s=300)
STREAM = view(SEGMENT_1, SEGMENT_2, SEGMENT_3)
SEALED = view(SEGMENT_1, SEGMENT_2)            # the same without the in-progress segment
