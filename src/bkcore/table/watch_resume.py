"""WatchResume: where a watch goes on after its stream breaks, so the caller sees every change
once, in revision order.

A revision can change several keys (a deleteRange, a txn, expiries carried out with a command),
and a stream can break between two of its changes. So a watch resumes from the revision of the
last change it delivered, not the one after, and skips the changes of that revision it
delivered already: a range sends one revision's changes in the same order every time, so
counting them is enough. The library's WatchStream (bkclient.storage_client) and the
simulator's watchers both follow this rule.
"""

from __future__ import annotations


class WatchResume:
    def __init__(self, start_revision: int = 0) -> None:
        """start_revision 0: from whatever the first stream's server says is now."""
        self.revision = start_revision
        # Changes of `revision` delivered so far, and how many of them a new stream must skip.
        self._delivered_count = 0
        self._skip_count = 0

    def new_stream(self) -> int:
        """A stream is (re)opened: the start revision to ask it for."""
        self._skip_count = self._delivered_count
        return self.revision

    def started(self, revision_before: int) -> None:
        """The server says every change above `revision_before` will come."""
        if not self.revision:
            self.revision = revision_before + 1

    def is_new(self, revision: int) -> bool:
        """Whether a change at `revision` that a stream sent is one to deliver (it was not
        delivered before the stream broke); counts it if so."""
        if revision < self.revision:
            return False
        if revision == self.revision:
            if self._skip_count > 0:
                self._skip_count -= 1
                return False
            self._delivered_count += 1
        else:
            self.revision, self._delivered_count = revision, 1
        return True
