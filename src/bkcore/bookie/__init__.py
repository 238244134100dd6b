"""The bookie: request handling, fencing and long polls (bookie, longpoll), the journal's record
format (journal) and files (journal_files), and ledger storage (storage: the interface and the
in-memory implementation; durable_storage: entry logs + index)."""
