"""`bk metastore`: run one raft-lite node until Ctrl-C or SIGTERM.

    bk metastore --node-id 1 --peers 1=127.0.0.1:2281,2=127.0.0.1:2282,3=127.0.0.1:2283 --data-dir D
                 [--http-port 8010]

Every node of a cluster gets the same --peers; a 1-node cluster is --peers 1=HOST:PORT.
Clients use raft://127.0.0.1:2281,127.0.0.1:2282,127.0.0.1:2283. With --http-port the node serves
its Prometheus metrics at http://HOST:PORT/metrics (docs/metrics.md).

Secured (every member the same way):

    bk metastore ... --tls-cert node.pem --tls-key node.key --tls-ca ca.pem --auth-secret-file secret.txt

serves TLS only, dials the other members over TLS trusting ca.pem, and asks every connection,
client or member, for the secret. Clients then use raft+tls://... with the credentials they show
the bookies (--tls-ca, --auth-secret-file or BK_AUTH_SECRET; a bookie its tlsTrustStore and
bookieAuthSecret). A member's own secret comes from its file only, never from BK_AUTH_SECRET: a
client's environment must not secure a server by accident.
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
    node.add_argument("--tls-cert", metavar="PEM",
                      help="serve TLS only, with this certificate chain (its address in the subject alternative "
                           "name); it also dials the other members over TLS")
    node.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert")
    node.add_argument("--tls-ca", metavar="PEM",
                      help="CA certificate(s) that signed the members' certificates, trusted when dialling them "
                           "(default: the system's)")
    node.add_argument("--auth-secret-file", metavar="FILE",
                      help="ask every connection, client or member, for the shared secret on this file's first "
                           "line, and show it to the members")
    node.set_defaults(run=cmd_metastore)


def cmd_metastore(args) -> int:
    from bkcli.credentials import CredentialsError
    from bktransports.raftlite_server import parse_peers
    try:
        peers = parse_peers(args.peers)
        security = member_security(args)
    except (ValueError, CredentialsError) as exc:
        print(f"bk metastore: {exc}", file=sys.stderr)
        return 2
    if args.node_id not in peers:
        print(f"bk metastore: --node-id {args.node_id} is not in --peers ({sorted(peers)})", file=sys.stderr)
        return 2
    from bkcli.signals import run_service
    return run_service("metastore", _serve, args, peers, security)


def member_security(args):
    """The RaftSecurity the arguments ask for (CredentialsError naming a file that will not do)."""
    from bkcli.credentials import CredentialsError, auth_secret, server_tls_context, tls_context
    from bktransports.raftlite_server import RaftSecurity
    if args.tls_ca and not args.tls_cert:
        raise CredentialsError("--tls-ca needs --tls-cert (a member dials the others over TLS only when it serves "
                               "TLS itself)")
    return RaftSecurity(tls=server_tls_context(args.tls_cert, args.tls_key, flag="--tls", alpn=()),
                        peer_tls=tls_context(args.tls_ca), auth_secret=auth_secret(args.auth_secret_file, {}))


async def _serve(args, peers, security) -> int:
    import trio

    from bkcli.signals import cancel_on_stop_signal
    from bkmetastore.raftlite.core import MS, RaftConfig
    from bktransports.raftlite_server import run_raft_node

    config = RaftConfig(session_timeout_ns=args.session_timeout_ms * MS)
    host, port = peers[args.node_id]
    async with trio.open_nursery() as nursery:
        _, http_port = await nursery.start(lambda task_status: run_raft_node(
            node_id=args.node_id, peers=peers, data_dir=args.data_dir, config=config, http_port=args.http_port,
            security=security, task_status=task_status))
        secured = ", ".join(what for what, on in (("TLS", security.tls), ("auth secret", security.auth_secret)) if on)
        metrics = f"metrics: http://{host}:{http_port}/metrics" if http_port else ""
        notes = ", ".join(note for note in (secured, metrics) if note)
        print(f"metastore node {args.node_id} listening on {host}:{port}" + (f" ({notes})" if notes else ""),
              flush=True)
        await cancel_on_stop_signal(nursery)
    return 0
