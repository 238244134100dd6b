"""The client side of the ledger protocol: writer, readers, recovery, as pure sub-machines of one
`Client` (client.py) that owns request ids, timers and the effect outbox (context.py)."""
