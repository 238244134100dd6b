"""Benchmarks and their peers: the code behind every `bk bench ...` subcommand.

What it owns: the measurements (the journal path in-process, one bookie over TCP, the library
on a local cluster, tables and streams, failover latency, the Spark data source, the
simulator's own speed), the peer clusters measured beside them in the same run (NATS
JetStream, etcd, the raw fdatasync and bandwidth loops, dict-backed gRPC and no-op Spark
ceilings), CPU metering from /proc, and `bk bench all`'s results table.

Its rules: every benchmark prints one JSON report and returns the exit status; bkcli parses the
arguments and calls it, and nothing here imports bkcli (the arrow points down, to bkclient,
transports, metastore, sim and bkcore; local clusters come from bklocal). Running `bk` in a
child process (`bk bench all` runs each benchmark in a fresh interpreter) is not an import.

A benchmark says which phase it starts with announce(): an INFO record of the "bkbench.phase"
logger, which `bk bench` shows as a status line on a terminal (bkcli.progress) and which goes
nowhere else unless logging is asked for it.
"""

import logging

_PHASES = logging.getLogger("bkbench.phase")


def announce(phase: str) -> None:
    """Say that a benchmark starts `phase` (a few words: "pipelined adds, 1 KiB")."""
    _PHASES.info("%s", phase)
