"""`bk bookie --config FILE`: run one bookie until Ctrl-C or SIGTERM."""

from __future__ import annotations

import functools
import os
import signal
import sys


GIL_SWITCH_INTERVAL_S = 0.0005


def add_parser(commands) -> None:
    bookie = commands.add_parser("bookie", help="run one bookie")
    bookie.add_argument("--config", help="bookie config: TOML, or BookKeeper's bk_server.conf (Java properties, "
                                         "*.conf); BK_<key> environment variables override it (docs/operations.md)")
    bookie.add_argument("--print-config-reference", action="store_true",
                        help="print every config option as a Markdown table and exit")
    bookie.set_defaults(run=cmd_bookie)


def cmd_bookie(args) -> int:
    from bkcli.bookie_config import ConfigError, config_reference, load_bookie_config
    if args.print_config_reference:
        print(config_reference())
        return 0
    if not args.config:
        print("bk bookie: --config FILE is required (see --print-config-reference)", file=sys.stderr)
        return 2
    try:
        uri, config, notes = load_bookie_config(args.config)
    except ConfigError as exc:
        print(f"bk bookie: {exc}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"bk bookie: {note}", file=sys.stderr)
    import trio
    try:
        return trio.run(run_bookie, uri, config)
    except ConnectionError as exc:          # the metastore is not there, or refuses this bookie
        print(f"bk bookie: {exc}", file=sys.stderr)
        return 1
    except BaseExceptionGroup as group:
        stop = first_system_exit(group)
        if stop is None:
            raise
        print(f"bk bookie: {stop}", file=sys.stderr)     # e.g. a full journal disk: what to free
        return 1


def first_system_exit(error: BaseException) -> SystemExit | None:
    """The SystemExit a task raised to stop the bookie, out of the exception groups its
    nurseries wrapped it in (None if there is none)."""
    from bkcli.signals import first_exception
    return first_exception(error, SystemExit)


async def run_bookie(uri: str, config) -> int:
    import trio

    from bkcli.signals import cancel_on_stop_signal
    from bkmetastore.layout_node import resolve_layout
    from bkmetastore.uri import open_metastore, parse_metastore_uri
    from bktransports.bookie_server import BookieServer
    from bktransports.credentials import bookie_client_credentials
    from bktransports.gc_tuning import tune_gc

    parsed = parse_metastore_uri(uri)
    credentials = bookie_client_credentials(config)
    async with await open_metastore(parsed, **credentials) as store:
        layout = await resolve_layout(store, parsed)
        server = BookieServer(config, store, layout, reopen_store=lambda: open_metastore(parsed, **credentials))
        async with trio.open_nursery() as nursery:
            port = await nursery.start(server.serve)
            tune_gc()      # what startup made (replayed journals included) leaves the collector's sight
            # A checkpoint's Python work in its worker thread holds the GIL until asked to drop
            # it: with CPython's 5 ms default, the loop waited up to that long to answer anything
            # during checkpoints (a 1 ms timer overslept by 5.4 ms at p50, against 0.85 ms here).
            sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
            print(f"bookie {config.bookie_id} listening on {config.host}:{port}", flush=True)
            if config.autorecovery:
                nursery.start_soon(run_autorecovery, uri, config, server)
            if config.stream_storage:
                await nursery.start(stream_storage_in_bookie, uri, config, server.registry)

            async def shut_down(signum: int) -> None:
                print(f"bookie {config.bookie_id}: {signal.Signals(signum).name}, shutting down", flush=True)
                await server.shutdown()

            await cancel_on_stop_signal(nursery, shut_down)
    return 0


async def run_autorecovery(uri: str, config, server) -> None:
    """The autorecovery daemon of this bookie: an auditor candidate and a replication worker. It
    is named by the bookie id, which the auditor node then holds (as BookKeeper's does), and
    handed to the server for its admin endpoint (who is the auditor, trigger an audit). Its
    metrics are the bookie's too, under BookKeeper's replication_ scope."""
    from bktransports.autorecovery import Autorecovery
    from bktransports.autorecovery_metrics import IN_BOOKIE_SCOPE
    from bktransports.credentials import bookie_client_credentials
    from bkclient.library import connect
    # (its auditor node and locks are ephemeral: no session renewal)
    async with connect(uri, renew_session=False, **bookie_client_credentials(config)) as bk:
        recovery = Autorecovery(bk, lost_bookie_recovery_delay_s=config.lost_bookie_recovery_delay_s,
                                audit_interval_s=config.audit_interval_s, name=config.bookie_id,
                                registry=server.registry, metrics_scope=IN_BOOKIE_SCOPE)
        server.autorecovery = recovery
        await recovery.run()


async def stream_storage_in_bookie(uri: str, config, registry, task_status) -> None:
    """Stream storage inside the bookie process: its own client of the cluster, the gRPC endpoint
    (over TLS, with the bookie's certificate, when the bookie speaks TLS; asking for the bookie's
    secret, when it has one); its metrics in the bookie's registry."""
    import trio

    from bkcli.credentials import server_tls_context

    from streamstorage.server import run_stream_storage
    from bktransports.credentials import bookie_client_credentials
    async with trio.open_nursery() as nursery:
        gateway = await nursery.start(functools.partial(
            run_stream_storage, uri, host=config.host, port=config.stream_storage_port,
            index_dir=os.path.join(config.data_dir, "stream-storage", "table-indexes"),
            serve_tls=server_tls_context(config.tls_cert_file or None, config.tls_key_file or None),
            serve_auth_secret=config.auth_secret, registry=registry,
            **bookie_client_credentials(config)))
        print(f"bookie {config.bookie_id}: stream storage listening on {gateway.host}:{gateway.port}", flush=True)
        task_status.started()
