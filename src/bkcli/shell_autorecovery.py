"""`bk shell` commands on autorecovery, BookKeeper's names:

    autorecovery -enable | -disable | -status    the cluster's switch for ledger replication
    lostbookierecoverydelay -get | -set S        the cluster's delay before a gone bookie's
                                                 ledgers are re-replicated (wins over each
                                                 daemon's own lostBookieRecoveryDelay)
    triggeraudit                                 ask the auditor for an audit now
    queryautorecoverystatus                      the ledgers being re-replicated now, by whom
"""

from __future__ import annotations

from bkcli.shell_support import ShellFailure, lines

COMMANDS = ("autorecovery", "lostbookierecoverydelay", "triggeraudit", "queryautorecoverystatus")


def add_parsers(command) -> None:
    switch = command("autorecovery", "switch ledger replication on or off for the cluster, or show the switch")
    which = switch.add_mutually_exclusive_group(required=True)
    which.add_argument("-enable", "--enable", action="store_const", dest="switch", const="enable")
    which.add_argument("-disable", "--disable", action="store_const", dest="switch", const="disable")
    which.add_argument("-status", "--status", action="store_const", dest="switch", const="status")
    delay = command("lostbookierecoverydelay", "get or set the cluster's lost bookie recovery delay")
    which = delay.add_mutually_exclusive_group(required=True)
    which.add_argument("-get", "--get", action="store_true")
    which.add_argument("-set", "--set", type=float, metavar="SECONDS", dest="set_to")
    command("triggeraudit", "ask the auditor for an audit now (it marks what is missing at once)")
    command("queryautorecoverystatus", "the ledgers being re-replicated now, and by which daemon")


async def run(bk, args):
    from bktransports.autorecovery import (
        cluster_recovery_delay, is_replication_enabled, list_underreplicated, request_audit, set_cluster_recovery_delay,
        set_replication_enabled,
    )
    store, layout = bk.store, bk.layout
    if args.shell_command == "autorecovery":
        if args.switch != "status":
            await set_replication_enabled(store, layout, args.switch == "enable")
        enabled = await is_replication_enabled(store, layout)
        return f"ledger replication is {'enabled' if enabled else 'disabled'}\n", {"enabled": enabled}
    if args.shell_command == "lostbookierecoverydelay":
        if args.set_to is not None:
            if args.set_to < 0:
                raise ShellFailure(f"a delay is at least 0 seconds, not {args.set_to:g}\n")
            await set_cluster_recovery_delay(store, layout, args.set_to)
        delay = await cluster_recovery_delay(store, layout)
        if delay is None:
            return ("no cluster-wide delay is set: each autorecovery daemon uses its own\n",
                    {"lostBookieRecoveryDelay": None})
        return f"lostBookieRecoveryDelay: {delay:g} s\n", {"lostBookieRecoveryDelay": delay}
    if args.shell_command == "triggeraudit":
        await request_audit(store, layout)
        return "audit requested\n", {"requested": True}
    return await _recovery_status(bk, list_underreplicated)


async def _recovery_status(bk, list_underreplicated):
    from bkcore.metaops import Children, Get, MetaCode
    locks_path = bk.layout.replication_lock_path(0).rsplit("/", 1)[0]
    result = await bk.store.execute(Children(locks_path))
    marks = await list_underreplicated(bk.store, bk.layout)
    rows = []
    for name in sorted(result.children) if result.code is MetaCode.OK else ():
        if not (name.startswith("urL") and name[3:].isdigit()):
            continue
        ledger_id = int(name[3:])
        holder = await bk.store.execute(Get(f"{locks_path}/{name}"))
        rows.append({"ledger_id": ledger_id, "worker": holder.data.decode("utf-8", "replace")
                     if holder.code is MetaCode.OK else None, "lost_bookies": marks.get(ledger_id, [])})
    text = lines(f"ledger {row['ledger_id']}: {row['worker']} re-replicating from {', '.join(row['lost_bookies'])}"
                 for row in rows) or "no ledger is being re-replicated\n"
    return text, rows
