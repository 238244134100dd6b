"""bkjepsen: the jepsen-like harness (issue 7). Real bookie, metastore and stream-storage
processes on 127.0.0.1, faults injected by a seeded nemesis, histories checked afterwards.
Entry point: jepsen-like/run (bkjepsen.runner)."""
