"""The `bk` command line: one entry point that dispatches to the simulator or the real runtime."""
