"""Metadata store backends behind one interface (memory, raft-lite, ZooKeeper)."""
