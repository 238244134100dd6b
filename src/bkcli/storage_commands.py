"""`bk stream-storage`, `bk stream` and `bk table`: the stream storage server and its CLI.

    bk stream-storage [--metastore URI] [--port 4181]      serve the gRPC endpoint
    bk -s 127.0.0.1:4181 stream create --stream NAME       (the seed's streamstorage-cli forms;
    bk table put -t TABLE -k KEY -v VALUE                    -s may also follow the subcommand)
    bk table get -t TABLE -k KEY [--watch]
    bk table incr -t TABLE -k KEY -a AMOUNT
    bk table delete -t TABLE -k KEY
    bk table range -t TABLE -p PKEY [--from KEY] [--to KEY]

Names are NAME (namespace "default") or NAMESPACE/NAME. Versions count from 0 and range ends
are inclusive, as in BookKeeper. A refusal prints one line (what failed, the server's reason
naming the key and the rule, and BookKeeper's status code) and exits 1.
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile

from bkcore.extras import require_extra
from bkcli.credentials import CredentialsError, add_security_arguments, client_credentials
from bkcli.defaults import add_metastore_argument, metastore_uri

DEFAULT_SERVER = "127.0.0.1:4181"


def add_parser(commands) -> None:
    server = commands.add_parser("stream-storage", help="serve streams and tables over gRPC (port 4181)")
    add_metastore_argument(server)
    server.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    server.add_argument("--port", type=int, default=4181,
                        help="this server's own gRPC port (4181); it names the server among the others")
    server.add_argument("--shared-port", type=int, default=None,
                        help="a port every stream storage server of the cluster also listens on (SO_REUSEPORT), "
                             "so clients given one address are spread over the servers")
    server.add_argument("--peer-port", type=int, default=0,
                        help="where the other stream storage servers send this one the table calls for the "
                             "ranges it owns (default: a free port, announced in the metastore)")
    add_security_arguments(server)
    server.add_argument("--data-dir", default=None,
                        help="where the table indexes (lmdb) live; rebuilt from the range journals when "
                             "a range is opened (default: bk-stream-storage-PORT in the temp directory)")
    server.set_defaults(run=cmd_stream_storage)

    stream = commands.add_parser("stream", help="create, inspect and delete streams (via stream storage)")
    _add_server_argument(stream, "group_server")
    stream_commands = stream.add_subparsers(dest="stream_command", required=True)
    for name, help_text in [("create", "create a stream (a table, too)"), ("get", "show a stream's properties"),
                            ("delete", "delete a stream and its data")]:
        command = stream_commands.add_parser(name, help=help_text)
        _add_server_argument(command)
        command.add_argument("--stream", required=True, help="NAME or NAMESPACE/NAME")
        command.set_defaults(run=cmd_stream, action=name)
    namespace = stream_commands.add_parser("namespace", help="create a namespace")
    _add_server_argument(namespace)
    namespace.add_argument("--name", required=True)
    namespace.set_defaults(run=cmd_stream, action="namespace")

    table = commands.add_parser("table", help="put, get, increment, delete and watch table keys")
    _add_server_argument(table, "group_server")
    table_commands = table.add_subparsers(dest="table_command", required=True)
    specs = {
        "put": ("set a key's value", [("-v", "--value", {"required": True})]),
        "get": ("print a key's value", [("--watch", None, {"action": "store_true",
                                                          "help": "then print every change until Ctrl-C"})]),
        "incr": ("add to a counter", [("-a", "--amount", {"type": int, "required": True})]),
        "delete": ("delete a key", []),
    }
    for name, (help_text, options) in specs.items():
        command = table_commands.add_parser(name, help=help_text)
        _add_table_arguments(command)
        command.add_argument("-k", "--key", required=True)
        for short, long, kwargs in options:
            command.add_argument(*(flag for flag in (short, long) if flag), **kwargs)
        command.set_defaults(run=cmd_table, action=name)
    ranged = table_commands.add_parser("range", help="list the keys of one pkey")
    _add_table_arguments(ranged)
    ranged.add_argument("-p", "--pkey", required=True)
    ranged.add_argument("--from", dest="start", default="", help="first key (default: the pkey's first)")
    ranged.add_argument("--to", dest="end", default="",
                        help="last key, included as BookKeeper's range ends are (default: the pkey's end)")
    ranged.set_defaults(run=cmd_table, action="range")


def add_top_level_server_argument(parser) -> None:
    parser.add_argument("-s", "--server", dest="top_server", default=None, metavar="HOST:PORT",
                        help=f"stream storage address for `stream` and `table` ({DEFAULT_SERVER})")


def _add_server_argument(parser, dest: str = "server") -> None:
    # Each level keeps its own dest: argparse would let a subcommand's default hide a value
    # given one level up.
    parser.add_argument("-s", "--server", dest=dest, default=None, metavar="HOST:PORT",
                        help=f"stream storage address ({DEFAULT_SERVER})")


def _add_table_arguments(parser) -> None:
    _add_server_argument(parser)
    parser.add_argument("-t", "--table", required=True, help="NAME or NAMESPACE/NAME (a stream)")


def _server(args) -> str:
    return args.server or getattr(args, "group_server", None) or getattr(args, "top_server", None) or DEFAULT_SERVER


def split_name(name: str) -> tuple[str, str]:
    namespace, _, stream = name.rpartition("/")
    return namespace or "default", stream


def cmd_stream_storage(args) -> int:
    require_extra("grpc", "serving streams and tables over gRPC")
    try:
        args.credentials = client_credentials(args)
    except CredentialsError as exc:
        print(f"bk stream-storage: {exc}", file=sys.stderr)
        return 2
    import trio
    return trio.run(_serve, args)


async def _serve(args) -> int:
    import trio

    from bkcli.signals import cancel_on_stop_signal
    from streamstorage.server import run_stream_storage
    from transports.gc_tuning import tune_gc

    data_dir = args.data_dir or os.path.join(tempfile.gettempdir(), f"bk-stream-storage-{args.port}")
    async with trio.open_nursery() as nursery:
        gateway = await nursery.start(functools.partial(
            run_stream_storage, metastore_uri(args), host=args.host, port=args.port,
            index_dir=os.path.join(data_dir, "table-indexes"), shared_port=args.shared_port,
            peer_port=args.peer_port, **args.credentials))
        tune_gc()      # what startup made leaves the collector's sight, as in a bookie
        shared = f" (and the shared port {gateway.shared_port})" if gateway.shared_port else ""
        print(f"stream storage listening on {gateway.host}:{gateway.port}{shared}", flush=True)
        await cancel_on_stop_signal(nursery)
    return 0


def _client(args):
    from bkclient.storage_client import StorageClient
    return StorageClient(_server(args))


def cmd_stream(args) -> int:
    require_extra("grpc", "talking to stream storage over gRPC")
    from bkclient.storage_client import StorageError
    try:
        with _client(args) as client:
            if args.action == "namespace":
                client.create_namespace(args.name)
                print(f"created namespace {args.name}")
                return 0
            namespace, stream = split_name(args.stream)
            if args.action == "create":
                props = client.create_stream(namespace, stream)
                print(f"created stream {namespace}/{stream} (id {props.stream_id}, "
                      f"{props.stream_conf.initial_num_ranges} ranges)")
            elif args.action == "get":
                props = client.get_stream(namespace, stream)
                print(f"stream {namespace}/{stream}: id {props.stream_id}, {props.stream_conf.initial_num_ranges} "
                      f"ranges, segments roll at {props.stream_conf.rolling_policy.size_policy.max_segment_size} bytes")
            else:
                client.delete_stream(namespace, stream)
                print(f"deleted stream {namespace}/{stream}")
    except (StorageError, ConnectionError, ValueError) as exc:
        print(f"bk stream {args.action}: {exc}", file=sys.stderr)
        return 1
    return 0


def _show(kv) -> str:
    if kv is None:
        return "(no such key)"
    shown = str(kv.number_value) if kv.is_number else kv.value.decode("utf-8", "backslashreplace")
    return f"{kv.key.decode('utf-8', 'backslashreplace')} = {shown}  (version {kv.version}, revision {kv.mod_revision})"


def cmd_table(args) -> int:
    require_extra("grpc", "talking to stream storage over gRPC")
    from bkclient.storage_client import StorageError
    namespace, stream = split_name(args.table)
    try:
        with _client(args) as client:
            table = client.table(namespace, stream)
            if args.action == "range":
                for kv in table.range(args.start.encode(), args.end.encode(), pkey=args.pkey.encode()):
                    print(_show(kv))
                return 0
            key = args.key.encode()
            if args.action == "put":
                table.put(key, args.value.encode())
                print(f"put {args.key}")
            elif args.action == "incr":
                print(f"{args.key} = {table.increment(key, args.amount)}")
            elif args.action == "delete":
                print(f"deleted {table.delete(key)} key(s)")
            else:
                kv = table.get(key)
                print(_show(kv), flush=True)
                if args.watch:
                    return _watch(table, key, (kv.mod_revision + 1) if kv else 0)
    except (StorageError, ConnectionError, ValueError) as exc:
        print(f"bk table {args.action}: {exc}", file=sys.stderr)
        return 1
    return 0


def _watch(table, key: bytes, start_revision: int) -> int:
    try:
        for event in table.watch(key, start_revision=start_revision):
            if event["type"] == "delete":
                print(f"{key.decode('utf-8', 'backslashreplace')} deleted  (revision {event['revision']})", flush=True)
            else:
                shown = event["number"] if event["is_number"] else event["value"].decode("utf-8", "backslashreplace")
                print(f"{key.decode('utf-8', 'backslashreplace')} = {shown}  (version {event['version']}, "
                      f"revision {event['revision']})", flush=True)
    except KeyboardInterrupt:
        pass
    return 0
