"""`bk metastore`: run one raft-lite node until Ctrl-C or SIGTERM.

    bk metastore --node-id 1 --peers 1=127.0.0.1:2281,2=127.0.0.1:2282,3=127.0.0.1:2283 --data-dir D
                 [--http-port 8010]

Every node of a cluster gets the same --peers; a 1-node cluster is --peers 1=HOST:PORT.
Clients use raft://127.0.0.1:2281,127.0.0.1:2282,127.0.0.1:2283. With --http-port the node serves
its Prometheus metrics at http://HOST:PORT/metrics (docs/metrics.md).
"""

from __future__ import annotations

import sys


def add_parser(commands) -> None:
    node = commands.add_parser("metastore", help="run one raft-lite metastore node")
    node.add_argument("--node-id", type=int, required=True)
    node.add_argument("--peers", required=True, help="ID=HOST:PORT,... for every node, this one included")
    node.add_argument("--data-dir", required=True, help="where this node keeps its term, vote, log and snapshot")
    node.add_argument("--session-timeout-ms", type=int, default=10_000,
                      help="how long a silent client session lives (10000)")
    node.add_argument("--http-port", type=int, default=0,
                      help="serve Prometheus metrics at /metrics on this port, on the node's host (0: off)")
    node.set_defaults(run=cmd_metastore)


def cmd_metastore(args) -> int:
    from transports.raftlite_server import parse_peers
    try:
        peers = parse_peers(args.peers)
    except ValueError as exc:
        print(f"bk metastore: {exc}", file=sys.stderr)
        return 2
    if args.node_id not in peers:
        print(f"bk metastore: --node-id {args.node_id} is not in --peers ({sorted(peers)})", file=sys.stderr)
        return 2
    from bkcli.signals import run_service
    return run_service("metastore", _serve, args, peers)


async def _serve(args, peers) -> int:
    import trio

    from bkcli.signals import cancel_on_stop_signal
    from metastore.raftlite.core import MS, RaftConfig
    from transports.raftlite_server import run_raft_node

    config = RaftConfig(session_timeout_ns=args.session_timeout_ms * MS)
    host, port = peers[args.node_id]
    async with trio.open_nursery() as nursery:
        _, http_port = await nursery.start(lambda task_status: run_raft_node(
            node_id=args.node_id, peers=peers, data_dir=args.data_dir, config=config, http_port=args.http_port,
            task_status=task_status))
        metrics = f" (metrics: http://{host}:{http_port}/metrics)" if http_port else ""
        print(f"metastore node {args.node_id} listening on {host}:{port}{metrics}", flush=True)
        await cancel_on_stop_signal(nursery)
    return 0
