"""`bk table`: the keys of a table (a stream used as a table), through stream storage's gRPC
endpoint, with etcdctl's spellings where BookKeeper has none.

    bk table put -t TABLE -k KEY -v VALUE [--ttl SECONDS]
    bk table get -t TABLE -k KEY [--prefix] [--limit N] [--keys-only] [--count-only] [--watch]
    bk table incr -t TABLE -k KEY -a AMOUNT
    bk table del -t TABLE -k KEY [--prefix]            (`delete` too)
    bk table range -t TABLE -p PKEY [--from KEY] [--to KEY] [--prefix P] [--limit N] [--keys-only] [--count-only]
    bk table watch -t TABLE -k KEY [--prefix] [--rev N]
    bk table txn -t TABLE [-p PKEY] [-i]              etcdctl's txn text on stdin (bkcli.txn_text)

A key belongs to a pkey (BookKeeper's partition key, -p; by default the key itself, which is
how a plain table keys); ranges, prefixes and txns stay within one pkey, as BookKeeper's do.
Output, --json and exit status: bkcli.storage_cli; how answers print: bkcli.table_views.
"""

from __future__ import annotations

import sys

from bkcli.defaults import positive_int
from bkcli.storage_cli import EXIT_REFUSED, UsageError, add_command, add_group, emit, split_name
from bkcli.table_views import (
    count_view, deleted_view, event_view, kv_document, kv_text, kvs_view, put_view, total_view, txn_view,
)

PKEY_HELP = "the key's pkey (BookKeeper's partition key; default: the key itself, as a plain table keys)"
TXN_DESCRIPTION = """\
Reads a txn from stdin in etcdctl's format: the compares, a blank line, the operations to run
when every compare holds, a blank line, the operations to run otherwise; one a line:

  value("k") = "v"        TARGET("KEY") OP "OPERAND": value|val, version|ver, create|c, mod|m;
  version("k") > "0"      =, !=, <, >; versions are BookKeeper's (a key's first is 0)

  put k "a new value"     put KEY VALUE, get KEY, del KEY (quote what has spaces)
  get k

  put k created

Prints SUCCESS or FAILURE, then each operation's result after a blank line. value("k") = ""
holds only for a missing key; comparing a missing key's version or revision refuses the whole
txn (KEY_NOT_FOUND). A line that does not parse refuses it too, naming the line (exit 2)."""


def add_parser(commands) -> None:
    table = add_group(commands, "table", "put, get, increment, delete, list and watch table keys; run txns")

    put = _key_command(table, "put", "set a key's value", cmd_put)
    put.add_argument("-v", "--value", required=True)
    put.add_argument("--ttl", type=positive_int, default=0, metavar="SECONDS",
                     help="the key expires that many seconds after the put (a put without --ttl keeps it)")

    get = _key_command(table, "get", "print a key's value, or with --prefix every key starting with it", cmd_get)
    get.add_argument("--prefix", action="store_true", help="every key of the pkey starting with KEY")
    _add_read_options(get)
    get.add_argument("--watch", action="store_true", help="then print every change until Ctrl-C")

    incr = _key_command(table, "incr", "add to a counter (a missing key counts 0)", cmd_incr)
    incr.add_argument("-a", "--amount", type=int, required=True)

    delete = _key_command(table, "del", "delete a key, or with --prefix every key starting with it; print how many",
                          cmd_del, aliases=("delete",))
    delete.add_argument("--prefix", action="store_true", help="every key of the pkey starting with KEY")

    ranged = add_command(table, "table", "range", "list the keys of one pkey", cmd_range)
    _add_table_argument(ranged)
    ranged.add_argument("-p", "--pkey", required=True)
    ranged.add_argument("--from", dest="start", default="", help="first key (default: the pkey's first)")
    ranged.add_argument("--to", dest="end", default="",
                        help="last key, included as BookKeeper's range ends are (default: the pkey's end)")
    ranged.add_argument("--prefix", default=None, metavar="P", help="the keys starting with P (not with --from/--to)")
    _add_read_options(ranged)

    watch = _key_command(table, "watch", "print every change of a key (or keys, with --prefix) until Ctrl-C",
                         cmd_watch)
    watch.add_argument("--prefix", action="store_true", help="every key of the pkey starting with KEY")
    watch.add_argument("--rev", type=positive_int, default=0, metavar="N",
                       help="from revision N on (the changes since then first; default: from now on)")

    txn = add_command(table, "table", "txn", "run a txn read from stdin (etcdctl's format)", cmd_txn,
                      description=TXN_DESCRIPTION)
    _add_table_argument(txn)
    txn.add_argument("-p", "--pkey", default=None,
                     help="the pkey every key of the txn belongs to (default: its one key, as a plain table keys)")
    txn.add_argument("-i", "--interactive", action="store_true", help="prompt for each part (on stderr)")


def _add_table_argument(parser) -> None:
    parser.add_argument("-t", "--table", required=True, help="NAME or NAMESPACE/NAME (a stream)")


def _key_command(table, name: str, help_text: str, run, *, aliases: tuple[str, ...] = ()):
    command = add_command(table, "table", name, help_text, run, aliases=aliases)
    _add_table_argument(command)
    command.add_argument("-k", "--key", required=True)
    command.add_argument("-p", "--pkey", default=None, help=PKEY_HELP)
    return command


def _add_read_options(parser) -> None:
    parser.add_argument("--limit", type=positive_int, default=0, metavar="N", help="at most N keys (default: all)")
    parser.add_argument("--keys-only", action="store_true", help="the keys without their values")
    parser.add_argument("--count-only", action="store_true",
                        help="only how many keys there are (every one: --limit does not cap the count)")


def _table(client, args):
    return client.table(*split_name(args.table))


def _key_and_pkey(args) -> tuple[bytes, bytes | None]:
    return args.key.encode(), args.pkey.encode() if args.pkey is not None else None


# -- the commands -------------------------------------------------------------------------------

def cmd_put(client, args) -> None:
    key, pkey = _key_and_pkey(args)
    _table(client, args).put(key, args.value.encode(), pkey=pkey, ttl_ms=args.ttl * 1000)
    emit(args, *put_view(key, args.ttl))


def cmd_incr(client, args) -> None:
    key, pkey = _key_and_pkey(args)
    emit(args, *total_view(key, _table(client, args).increment(key, args.amount, pkey=pkey)))


def cmd_del(client, args) -> None:
    key, pkey = _key_and_pkey(args)
    emit(args, *deleted_view(_table(client, args).delete(key, pkey=pkey, prefix=args.prefix)))


def cmd_get(client, args) -> int:
    key, pkey = _key_and_pkey(args)
    table = _table(client, args)
    if args.prefix:
        kvs = _print_range(args, table, key, b"", pkey=pkey or key, prefix=True)
    else:
        kv = table.get(key, pkey=pkey)
        kvs = [kv] if kv is not None else []
        if args.count_only:
            emit(args, *count_view(len(kvs)))
        else:
            emit(args, kv_document(kv, keys_only=args.keys_only), kv_text(kv, keys_only=args.keys_only))
    if not args.watch:
        return 0
    # From the revision after the newest change printed (a missing key: from now on).
    start = max(kv.mod_revision for kv in kvs) + 1 if kvs else 0
    return _print_changes(args, table.watch(key, pkey=pkey, start_revision=start, prefix=args.prefix))


def cmd_range(client, args) -> None:
    if args.prefix is not None and (args.start or args.end):
        raise UsageError("--prefix names the keys itself: give it without --from and --to")
    start = (args.prefix if args.prefix is not None else args.start).encode()
    _print_range(args, _table(client, args), start, args.end.encode(), pkey=args.pkey.encode(),
                 prefix=args.prefix is not None)


def _print_range(args, table, key: bytes, end: bytes, *, pkey: bytes, prefix: bool) -> list:
    """Print a range's keys (or their count) as --limit, --keys-only and --count-only say;
    returns the kvs it read."""
    if args.count_only:
        kvs = table.range(key, end, pkey=pkey, prefix=prefix)
        emit(args, *count_view(len(kvs)))
        return kvs
    answer = table.range_response(key, end, pkey=pkey, limit=args.limit, prefix=prefix)
    emit(args, *kvs_view(list(answer.kvs), more=answer.more, keys_only=args.keys_only))
    return list(answer.kvs)


def cmd_watch(client, args) -> int:
    key, pkey = _key_and_pkey(args)
    return _print_changes(args, _table(client, args).watch(key, pkey=pkey, start_revision=args.rev,
                                                           prefix=args.prefix))


def _print_changes(args, changes) -> int:
    """Each change as it comes (--json: one document a line) until Ctrl-C (exit 0)."""
    try:
        for change in changes:
            emit(args, *event_view(change))
    except KeyboardInterrupt:
        changes.cancel()
    return 0


def cmd_txn(client, args) -> int:
    from bkclient.storage_client import status_name
    from bkcli.txn_text import parse_txn

    prompt = (lambda text: print(text, file=sys.stderr, flush=True)) if args.interactive else None
    txn = parse_txn(iter(sys.stdin.readline, ""), prompt=prompt)
    pkey = _txn_pkey(args, txn.keys())
    response = _table(client, args).txn(list(txn.compares), list(txn.success), list(txn.failure), pkey=pkey)
    document, lines, any_refused = txn_view(response, txn.success if response.succeeded else txn.failure,
                                            status_name)
    emit(args, document, lines)
    return EXIT_REFUSED if any_refused else 0


def _txn_pkey(args, keys: set[bytes]) -> bytes:
    """-p, or the txn's one key (a plain table's txn is on one key: BookKeeper's txns stay
    within one routing key)."""
    if args.pkey is not None:
        return args.pkey.encode()
    if len(keys) != 1:
        named = ", ".join(repr(key.decode("utf-8", "backslashreplace")) for key in sorted(keys)) or "none"
        raise UsageError(f"a txn runs within one pkey, and without -p PKEY that is its one key; it names {named}: "
                         f"give -p PKEY for keys of one pkey")
    return next(iter(keys))
