"""Transports: the trio runtime (TCP, real disk, wall clock) around the pure core."""
