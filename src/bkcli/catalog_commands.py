"""`bk namespace` and `bk stream`: the catalog of stream storage, through its gRPC endpoint.

    bk namespace create|get|delete NAME     (BookKeeper's bkctl spelling)
    bk namespace list
    bk stream create|get|delete --stream NAME    NAME or NAMESPACE/NAME
    bk stream list [-n NAMESPACE]                the streams of a namespace (default)
    bk stream namespace --name NAME              the seed's spelling of `bk namespace create`

Listing is ours (BookKeeper's RootRangeService has no list call: streamstorage serves
bk.storage.Catalog for it). Output, --json and exit status: bkcli.storage_cli.
"""

from __future__ import annotations

from bkcli.storage_cli import add_command, add_group, emit, split_name


def add_parser(commands) -> None:
    namespace = add_group(commands, "namespace", "create, inspect, delete and list namespaces (via stream storage)")
    for name, help_text, run in [("create", "create a namespace", create_namespace),
                                 ("get", "show a namespace and the settings its streams start with", get_namespace),
                                 ("delete", "delete a namespace (it must have no streams left)", delete_namespace)]:
        add_command(namespace, "namespace", name, help_text, run).add_argument("name", metavar="NAME")
    add_command(namespace, "namespace", "list",
                "list the namespaces (__tables holds the tables' journals and checkpoints)", list_namespaces)

    stream = add_group(commands, "stream", "create, inspect, delete and list streams (via stream storage)")
    for name, help_text, run in [("create", "create a stream (a table, too)", create_stream),
                                 ("get", "show a stream's properties", get_stream),
                                 ("delete", "delete a stream and its data", delete_stream)]:
        add_command(stream, "stream", name, help_text, run).add_argument(
            "--stream", required=True, help="NAME or NAMESPACE/NAME")
    listing = add_command(stream, "stream", "list", "list the streams of a namespace", list_streams)
    listing.add_argument("-n", "--namespace", default="default", help="whose streams (default)")
    legacy = add_command(stream, "stream", "namespace", "create a namespace (as `bk namespace create`)",
                         create_namespace)
    legacy.add_argument("--name", required=True)


# -- namespaces ---------------------------------------------------------------------------------

def create_namespace(client, args) -> None:
    props = client.create_namespace(args.name)
    emit(args, namespace_document(props), f"created namespace {args.name}")


def get_namespace(client, args) -> None:
    props = client.get_namespace(args.name)
    conf = props.default_stream_conf
    emit(args, namespace_document(props),
         f"namespace {props.namespace_name}: id {props.namespace_id}; its streams start with "
         f"{conf.initial_num_ranges} ranges, segments rolling at {conf.rolling_policy.size_policy.max_segment_size} "
         f"bytes")


def delete_namespace(client, args) -> None:
    client.delete_namespace(args.name)
    emit(args, {"namespace": args.name, "deleted": True}, f"deleted namespace {args.name}")


def list_namespaces(client, args) -> None:
    names = client.list_namespaces()
    emit(args, {"namespaces": names}, names)


def namespace_document(props) -> dict:
    return {"namespace": props.namespace_name, "id": props.namespace_id,
            "default_stream_conf": conf_document(props.default_stream_conf)}


# -- streams ------------------------------------------------------------------------------------

def create_stream(client, args) -> None:
    namespace, stream = split_name(args.stream)
    props = client.create_stream(namespace, stream)
    emit(args, stream_document(namespace, props), f"created stream {namespace}/{stream} (id {props.stream_id}, "
                                                  f"{props.stream_conf.initial_num_ranges} ranges)")


def get_stream(client, args) -> None:
    namespace, stream = split_name(args.stream)
    props = client.get_stream(namespace, stream)
    emit(args, stream_document(namespace, props),
         f"stream {namespace}/{stream}: id {props.stream_id}, {props.stream_conf.initial_num_ranges} ranges, "
         f"segments roll at {props.stream_conf.rolling_policy.size_policy.max_segment_size} bytes")


def delete_stream(client, args) -> None:
    namespace, stream = split_name(args.stream)
    client.delete_stream(namespace, stream)
    emit(args, {"namespace": namespace, "stream": stream, "deleted": True}, f"deleted stream {namespace}/{stream}")


def list_streams(client, args) -> None:
    names = client.list_streams(args.namespace)
    emit(args, {"namespace": args.namespace, "streams": names}, names)


def stream_document(namespace: str, props) -> dict:
    return {"namespace": namespace, "stream": props.stream_name, "id": props.stream_id,
            **conf_document(props.stream_conf)}


def conf_document(conf) -> dict:
    """A StreamConfiguration's settings that this server keeps."""
    return {"ranges": conf.initial_num_ranges,
            "max_segment_size": conf.rolling_policy.size_policy.max_segment_size,
            "segment_rolling_interval_s": conf.rolling_policy.time_policy.interval_seconds,
            "retention_minutes": conf.retention_policy.time_policy.retention_minutes}
