"""What `bk namespace`, `bk stream` and `bk table` share: the server address (-s HOST:PORT, at
any level), the output format (-w/--write-out simple|json, --json), the exit status every one
of them keeps, and run_command, which turns a refusal into one line on stderr.

    0  done (a key that is not there too: get prints "(no such key)", or JSON null)
    1  the cluster refused or failed: one line on stderr (what, the server's reason, BookKeeper's
       status code), or stream storage did not answer
    2  bad usage: argparse's, and ours (a malformed txn, options that exclude each other)

With --json a command prints one JSON document on stdout and nothing else (a watch: one JSON
document a line); errors stay one line on stderr.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys

from bkcore.extras import require_extra

DEFAULT_SERVER = "127.0.0.1:4181"
EXIT_DONE, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2
EXIT_STATUS_HELP = """\
exit status:
  0  done (a key that is not there too: get prints "(no such key)", or JSON null)
  1  the cluster refused or failed (one line on stderr, with BookKeeper's status code)
  2  bad usage (argparse's; a malformed txn; options that exclude each other)"""
# argparse dest prefixes of the options each level keeps apart (a subcommand's default would
# otherwise hide a value given one level up): the group's (`bk table -s X get`), the command's.
GROUP, COMMAND = "group_", ""


class UsageError(Exception):
    """A mistake in what the user typed (options, a txn's text): exit 2, as argparse's."""


def add_top_level_server_argument(parser) -> None:
    parser.add_argument("-s", "--server", dest="top_server", default=None, metavar="HOST:PORT",
                        help=f"stream storage address for `namespace`, `stream` and `table` ({DEFAULT_SERVER})")


def add_group(commands, name: str, help_text: str):
    """`bk NAME`, with -s and -w of its own; returns its subcommands."""
    group = commands.add_parser(name, help=help_text, epilog=EXIT_STATUS_HELP,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_common_arguments(group, GROUP)
    return group.add_subparsers(dest=f"{name}_command", required=True)


def add_command(subcommands, group: str, name: str, help_text: str, run, *, aliases: tuple[str, ...] = (),
                description: str | None = None):
    """`bk GROUP NAME`: run(client, args) runs it through run_command. `description` is shown
    as written (line breaks kept)."""
    command = subcommands.add_parser(name, help=help_text, aliases=list(aliases), description=description,
                                     epilog=EXIT_STATUS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_common_arguments(command, COMMAND)
    command.set_defaults(run=functools.partial(run_command, run), command_name=f"bk {group} {name}")
    return command


def _add_common_arguments(parser, level: str) -> None:
    parser.add_argument("-s", "--server", dest=f"{level}server", default=None, metavar="HOST:PORT",
                        help=f"stream storage address ({DEFAULT_SERVER})")
    parser.add_argument("-w", "--write-out", dest=f"{level}write_out", choices=("simple", "json"), default=None,
                        help="output format: simple (the default) or json (one JSON document; a watch prints "
                             "one a line)")
    parser.add_argument("--json", dest=f"{level}write_out", action="store_const", const="json",
                        help="the same as -w json")
    parser.add_argument("--tls-ca", dest=f"{level}tls_ca", default=None, metavar="PEM",
                        help="the CA that signed the stream storage servers' certificates: talk TLS to them")
    parser.add_argument("--auth-secret-file", dest=f"{level}auth_secret_file", default=None, metavar="FILE",
                        help="file holding the secret the stream storage servers ask for (or $BK_AUTH_SECRET)")


def server(args) -> str:
    return (getattr(args, f"{COMMAND}server", None) or getattr(args, f"{GROUP}server", None)
            or getattr(args, "top_server", None) or DEFAULT_SERVER)


def tls_ca(args) -> str | None:
    return getattr(args, f"{COMMAND}tls_ca", None) or getattr(args, f"{GROUP}tls_ca", None)


def auth_secret_of(args) -> bytes:
    from bkcli.credentials import auth_secret
    path = getattr(args, f"{COMMAND}auth_secret_file", None) or getattr(args, f"{GROUP}auth_secret_file", None)
    return auth_secret(path, os.environ)


def wants_json(args) -> bool:
    return (getattr(args, f"{COMMAND}write_out", None) or getattr(args, f"{GROUP}write_out", None)) == "json"


def emit(args, document, text: str | list[str] | None) -> None:
    """The command's answer: `document` as one line of JSON with --json, else `text` (a line,
    or lines: none prints nothing)."""
    if wants_json(args):
        print(json.dumps(document), flush=True)
    elif isinstance(text, str):
        print(text, flush=True)
    elif text:
        print("\n".join(text), flush=True)


def split_name(name: str) -> tuple[str, str]:
    """NAME (namespace "default") or NAMESPACE/NAME."""
    namespace, _, stream = name.rpartition("/")
    return namespace or "default", stream


def run_command(run, args) -> int:
    """run(client, args) with a client of the server the options name; its exit status, or 1
    with one line on stderr when the cluster refuses or fails, or 2 for a UsageError."""
    require_extra("grpc", "talking to stream storage over gRPC")
    from bkclient.storage_client import StorageClient, StorageError
    try:
        with StorageClient(server(args), tls_ca=tls_ca(args), auth_secret=auth_secret_of(args)) as client:
            return int(run(client, args) or EXIT_DONE)
    except UsageError as exc:
        print(f"{args.command_name}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (StorageError, ConnectionError, ValueError) as exc:
        print(f"{args.command_name}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
