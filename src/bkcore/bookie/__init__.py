"""The bookie: request handling, fencing, long polls, the journal's record format and group
commit, and the ledger storage interface (memory today; entry logs + lmdb in issue 3)."""
