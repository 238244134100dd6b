"""Local clusters of real processes on 127.0.0.1: `bk` services (bookies, raft-lite metastore
nodes, stream storage) and ZooKeeper servers started as children of the calling process, each
with its own data directory, log file and free ports, and stopped by pid.

What it owns: spawning a child and judging it ready from its own log lines (processes), the
whole standalone cluster of metastore nodes, bookies and stream storage (standalone), and
ZooKeeper ensembles (zookeeper). `bk standalone`, the benchmarks (bkbench), the jepsen-like
harness (bkjepsen) and the real-process tests all start their clusters here.

Its rule: it imports no other room above bkcore. It starts `bk` as a program
(`python -m bkcli.main ...` in a child), which runs the command without importing it here.
"""
