"""`bk autorecovery`: the autorecovery daemon on its own (BookKeeper's `bin/bookkeeper
autorecovery`), for clusters whose bookies do not run it (autoRecoveryDaemonEnabled=false):
an auditor candidate, which marks the ledgers of bookies gone longer than the delay, and a
replication worker, which copies their fragments elsewhere. Several may run; one audits.

    bk autorecovery --metastore URI [--lost-bookie-recovery-delay S] [--http-port P] [--tls-ca PEM ...]

With --http-port it serves its Prometheus metrics at http://HOST:P/metrics (docs/metrics.md).
"""

from __future__ import annotations

import sys

from bkcli.credentials import CredentialsError, add_security_arguments, client_credentials
from bkcli.defaults import add_metastore_argument, metastore_uri


def add_parser(commands) -> None:
    daemon = commands.add_parser("autorecovery", help="run an autorecovery daemon (auditor candidate and worker)")
    add_metastore_argument(daemon)
    add_security_arguments(daemon)
    daemon.add_argument("--lost-bookie-recovery-delay", type=float, default=0.0, metavar="S",
                        help="seconds a bookie must be gone before its ledgers are re-replicated "
                             "(lostBookieRecoveryDelay: 0)")
    daemon.add_argument("--audit-interval", type=float, default=60.0, metavar="S",
                        help="seconds between full audits (auditorPeriodicCheckInterval: 60)")
    daemon.add_argument("--name", default="", help="how it names itself as the auditor (default: random)")
    daemon.add_argument("--http-port", type=int, default=0,
                        help="serve Prometheus metrics at /metrics on this port (0: off)")
    daemon.add_argument("--http-host", default="127.0.0.1", help="address of the metrics port (127.0.0.1)")
    daemon.set_defaults(run=cmd_autorecovery)


def cmd_autorecovery(args) -> int:
    try:
        credentials = client_credentials(args)
    except CredentialsError as exc:
        print(f"bk autorecovery: {exc}", file=sys.stderr)
        return 2
    from bkcli.signals import run_service
    return run_service("autorecovery", _run, args, credentials)


async def _run(args, credentials) -> int:
    import trio

    from bkcli.signals import cancel_on_stop_signal
    from bkclient.library import connect
    from bktransports.autorecovery import Autorecovery
    from bktransports.metrics import new_registry, start_metrics_port
    registry = new_registry()
    # (its auditor node and replication locks are ephemeral: no session renewal)
    async with connect(metastore_uri(args), renew_session=False, **credentials) as bk:
        daemon = Autorecovery(bk, lost_bookie_recovery_delay_s=args.lost_bookie_recovery_delay,
                              audit_interval_s=args.audit_interval, name=args.name, registry=registry)
        async with trio.open_nursery() as nursery:
            metrics = await start_metrics_port(nursery, registry, host=args.http_host, port=args.http_port)
            print(f"autorecovery {daemon.name} running against {metastore_uri(args)}"
                  + (f" (metrics: {metrics})" if metrics else ""), flush=True)
            nursery.start_soon(daemon.run)
            await cancel_on_stop_signal(nursery)
    return 0
