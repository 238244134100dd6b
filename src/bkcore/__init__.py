"""bkcore: the BookKeeper protocol as pure state machines.

Nothing in this package performs I/O, reads a clock or draws global randomness. Inputs arrive
as method calls carrying `now_ns`; outputs leave as effects (see `bkcore.effects`) that a driver
performs: the deterministic simulator (`sim`) or the trio runtime (`transports`).
"""
