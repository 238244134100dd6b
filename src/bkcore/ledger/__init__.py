"""Ledger metadata and the distribution schedule: the facts every client and bookie agree on."""
