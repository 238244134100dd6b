"""`bk`: the command line for everything (standalone, bookie, metastore, shell, stream storage,
namespace, stream, table, sim, bench).

Subcommand modules are imported lazily so `bk sim ...` never loads trio and the real runtime
never loads the simulator.
"""

from __future__ import annotations

import argparse
import sys

from bkcli.logs import add_log_level_argument, setup_logging


def _refuse_optimized() -> None:
    # The core checks its invariants with assert; running without them is not supported.
    if not __debug__:
        sys.exit("bk: refusing to run under python -O: the invariant checks are asserts")


# The commands that run a server (they log at INFO by default).
SERVER_COMMANDS = frozenset({"bookie", "metastore", "stream-storage", "standalone", "autorecovery"})


def build_parser() -> argparse.ArgumentParser:
    from bkcli import (
        autorecovery_command, bench_commands, bookie_command, catalog_commands, metastore_command, shell_command,
        sim_commands, standalone_command, storage_cli, storage_commands, table_commands,
    )

    parser = argparse.ArgumentParser(prog="bk", description="BookKeeper in Python")
    parser.add_argument("--version", action="version", version=f"bk {installed_version()} (Python {sys.version.split()[0]})")
    add_log_level_argument(parser)
    storage_cli.add_top_level_server_argument(parser)
    commands = parser.add_subparsers(dest="command", required=True)

    standalone_command.add_parser(commands)
    bookie_command.add_parser(commands)
    metastore_command.add_parser(commands)
    autorecovery_command.add_parser(commands)
    shell_command.add_parser(commands)
    storage_commands.add_parser(commands)
    catalog_commands.add_parser(commands)
    table_commands.add_parser(commands)
    sim_commands.add_parser(commands)
    bench_commands.add_parser(commands)
    return parser


def installed_version() -> str:
    """The installed distribution's version ("unknown" when run from a source tree that was
    never installed)."""
    from importlib.metadata import PackageNotFoundError, version

    from bkcore.extras import DISTRIBUTION
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    _refuse_optimized()
    from bkcore.extras import MissingExtra
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.log_level, default="INFO" if args.command in SERVER_COMMANDS else "WARNING")
    try:
        return int(args.run(args) or 0)
    except MissingExtra as exc:
        print(f"bk {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
