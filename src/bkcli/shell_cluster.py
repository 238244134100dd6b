"""`bk shell` commands on the cluster's metadata as a whole, BookKeeper's names:

    initnewcluster           make the metadata skeleton (registrations, cookies, id generator,
                             under-replication) where it is missing; clusters here also make it
                             on first use, so this is for scripts that expect it
    metaformat -f            delete every ledger's metadata, cookie, registration and mark, keeping
                             the recorded ledger layout: the cluster starts afresh (its bookies'
                             data becomes garbage; format them too, or they refuse to start)
    nukeexistingcluster -f   delete everything under the ledger root, the layout included
    whoisauditor             the autorecovery daemon auditing the cluster now
    clusterinfo              BookKeeper's cluster info: bookies by state, auditor, under-replication
    updatebookieinledger -bs OLD -bd NEW
                             name NEW wherever ledger metadata names OLD (a bookie that moved to a
                             new address with its data): OLD must be down and NEW registered

Both deletions are refused while a bookie is registered, and without -f (nothing here asks).
"""

from __future__ import annotations

from bkcli.shell_support import ShellFailure

COMMANDS = ("initnewcluster", "metaformat", "nukeexistingcluster", "whoisauditor", "clusterinfo",
            "updatebookieinledger")


def add_parsers(command) -> None:
    command("whoisauditor", "the autorecovery daemon auditing the cluster now")
    command("clusterinfo", "the cluster at a glance: bookies by state, the auditor, under-replication")
    update = command("updatebookieinledger", "name a bookie's new address wherever ledger metadata names its old one")
    update.add_argument("-bs", "--bookieSrc", "--bookie-src", dest="source", required=True, metavar="OLD")
    update.add_argument("-bd", "--bookieDest", "--bookie-dest", dest="destination", required=True, metavar="NEW")
    command("initnewcluster", "make the cluster's metadata skeleton where it is missing")
    for name, what in (("metaformat", "delete all of the cluster's metadata but its ledger layout"),
                       ("nukeexistingcluster", "delete everything under the cluster's ledger root")):
        parser = command(name, f"{what} (refused while bookies run)")
        parser.add_argument("-f", "--force", action="store_true", help="really do it")
        parser.add_argument("-n", "--nonInteractive", "--non-interactive", action="store_true",
                            help="accepted for BookKeeper's scripts: nothing here asks")


async def run(bk, args):
    from bkcore.metaops import Children, Create, MetaCode
    from metastore.layout_node import layout_node_path
    root = bk.layout.root
    if args.shell_command == "updatebookieinledger":
        return await _update_bookie_in_ledgers(bk, args.source, args.destination)
    if args.shell_command == "clusterinfo":
        from transports.cluster_state import cluster_info
        info = await cluster_info(bk.store, bk.layout)
        return "".join(f"{key}: {str(value).lower() if type(value) is bool else value}\n"
                       for key, value in info.items()), info
    if args.shell_command == "whoisauditor":
        from transports.cluster_state import auditor
        elected = await auditor(bk.store, bk.layout)
        if elected is None:
            raise ShellFailure("no auditor is elected (is an autorecovery daemon running? bk autorecovery, or "
                               "autoRecoveryDaemonEnabled on a bookie)\n")
        return f"{elected}\n", {"auditor": elected}
    if args.shell_command == "initnewcluster":
        made = []
        for path in (bk.layout.available_path, bk.layout.readonly_path, f"{root}/cookies", f"{root}/idgen",
                     bk.layout.underreplicated_path.rsplit("/", 1)[0], bk.layout.underreplicated_path):
            if (await bk.store.execute(Create(path, b""))).code is MetaCode.OK:
                made.append(path)
        text = f"initialized {root}: made {', '.join(made)}\n" if made else f"{root} was initialized already\n"
        return text, {"root": root, "made": made}
    if not args.force:
        raise ShellFailure(f"this deletes the metadata of every ledger under {root}; give -f to do it\n")
    running = sorted({*await bk.list_bookies(), *await bk.list_bookies(readonly=True)})
    if running:
        raise ShellFailure(f"bookies are registered ({', '.join(running)}): stop every bookie first\n")
    keep = {layout_node_path(root)} if args.shell_command == "metaformat" else set()
    result = await bk.store.execute(Children(root))
    deleted = 0
    for child in sorted(result.children) if result.code is MetaCode.OK else ():
        path = f"{root}/{child}"
        if path not in keep:
            deleted += await delete_tree(bk.store, path)
    if args.shell_command == "nukeexistingcluster":
        deleted += await delete_tree(bk.store, root)
    return f"{args.shell_command}: deleted {deleted} nodes under {root}\n", {"root": root, "deleted": deleted}


async def delete_tree(store, path: str) -> int:
    """Delete `path` and everything under it, leaves first; returns how many nodes went."""
    from bkcore.metaops import Children, Delete, MetaCode
    result = await store.execute(Children(path))
    if result.code is MetaCode.NO_NODE:
        return 0
    if result.code is not MetaCode.OK:
        raise ShellFailure(f"listing {path} failed ({result.code.name}); nothing more was deleted\n")
    deleted = 0
    for child in sorted(result.children):
        deleted += await delete_tree(store, f"{path}/{child}")
    gone = await store.execute(Delete(path))
    if gone.code not in (MetaCode.OK, MetaCode.NO_NODE):
        raise ShellFailure(f"deleting {path} failed ({gone.code.name}); {deleted} nodes under it were deleted\n")
    return deleted + (gone.code is MetaCode.OK)


async def _update_bookie_in_ledgers(bk, source: str, destination: str):
    """Rewrite every ledger's metadata that names `source` to name `destination` instead, each
    with its version (a concurrent change is read again and retried)."""
    import dataclasses

    from bkcore.errors import NoSuchLedger
    from bkcore.metaops import MetaCode, SetData
    if source == destination:
        raise ShellFailure("the two addresses are the same; nothing to do\n")
    writable, readonly = await bk.list_bookies(), await bk.list_bookies(readonly=True)
    if source in writable or source in readonly:
        raise ShellFailure(f"{source} is registered (running): stop it first; its data now serves as {destination}\n")
    if destination not in writable and destination not in readonly:
        raise ShellFailure(f"{destination} is not a registered bookie: start the moved bookie there first\n")
    updated = []
    for ledger_id in await bk.list_ledgers():
        for _ in range(10):
            try:
                metadata = await bk.ledger_metadata(ledger_id)
            except NoSuchLedger:
                break
            if source not in metadata.all_bookies():
                break
            if destination in metadata.all_bookies():
                raise ShellFailure(f"ledger {ledger_id} names both {source} and {destination}; renaming one to the "
                                   f"other would put two copies on one bookie (updated so far: {updated})\n")
            renamed = dataclasses.replace(metadata, ensembles=tuple(
                (first, tuple(destination if bookie == source else bookie for bookie in ensemble))
                for first, ensemble in metadata.ensembles))
            result = await bk.store.execute(SetData(bk.layout.ledger_path(ledger_id), renamed.to_bytes(),
                                                    metadata.version))
            if result.code is MetaCode.OK:
                updated.append(ledger_id)
                break
            if result.code is not MetaCode.BAD_VERSION:
                raise ShellFailure(f"ledger {ledger_id}: the metastore answered {result.code.name} (updated so far: "
                                   f"{updated})\n")
    return (f"{source} -> {destination} in {len(updated)} ledgers\n",
            {"source": source, "destination": destination, "ledgers": updated})
