"""`bk shell` commands on the cluster's metadata as a whole, BookKeeper's names:

    initnewcluster           make the metadata skeleton (registrations, cookies, id generator,
                             under-replication, instance id) where it is missing; clusters here
                             also make it on first use, so this is for scripts that expect it
    metaformat               delete every ledger's metadata, cookie, registration and mark, keeping
                             the recorded ledger layout, and give the cluster a new instance id: it
                             starts afresh (its bookies' data becomes garbage; format them too, or
                             they refuse to start)
    nukeexistingcluster      delete everything under the ledger root, the layout included
                             (-i ID: only if ID is the cluster's instance id, asking nothing)
    whatisinstanceid         the cluster's instance id
    whoisauditor             the autorecovery daemon auditing the cluster now
    clusterinfo              BookKeeper's cluster info: bookies by state, auditor, under-replication

Both deletions are refused while a bookie is registered, and ask first (shell_support.confirm).
"""

from __future__ import annotations

from bkcli.shell_support import ShellFailure, add_confirmation_arguments, confirm

COMMANDS = ("initnewcluster", "metaformat", "nukeexistingcluster", "whoisauditor", "clusterinfo",
            "whatisinstanceid")


def add_parsers(command) -> None:
    command("whoisauditor", "the autorecovery daemon auditing the cluster now")
    command("clusterinfo", "the cluster at a glance: bookies by state, the auditor, under-replication")
    command("whatisinstanceid", "the cluster's instance id (made with it, renewed by metaformat)")
    command("initnewcluster", "make the cluster's metadata skeleton where it is missing")
    metaformat = command("metaformat", "delete all of the cluster's metadata but its ledger layout (refused while "
                                       "bookies run; asks first)")
    add_confirmation_arguments(metaformat, with_non_interactive=True)
    nuke = command("nukeexistingcluster", "delete everything under the cluster's ledger root (refused while "
                                          "bookies run; asks first)")
    which = nuke.add_mutually_exclusive_group()
    which.add_argument("-f", "--force", action="store_true", help="do it without asking")
    which.add_argument("-i", "--instanceid", metavar="ID",
                       help="do it without asking, but only if ID is the cluster's instance id (whatisinstanceid)")


async def run(bk, args):
    if args.shell_command in ("metaformat", "nukeexistingcluster"):
        return await _delete_cluster(bk, args)
    if args.shell_command == "clusterinfo":
        from bktransports.cluster_state import cluster_info
        info = await cluster_info(bk.store, bk.layout)
        return "".join(f"{key}: {str(value).lower() if type(value) is bool else value}\n"
                       for key, value in info.items()), info
    if args.shell_command == "whoisauditor":
        from bktransports.cluster_state import auditor
        elected = await auditor(bk.store, bk.layout)
        if elected is None:
            raise ShellFailure("no auditor is elected (is an autorecovery daemon running? bk autorecovery, or "
                               "autoRecoveryDaemonEnabled on a bookie)\n")
        return f"{elected}\n", {"auditor": elected}
    if args.shell_command == "whatisinstanceid":
        from bkmetastore.instance_id import read_instance_id
        instance_id = await read_instance_id(bk.store, bk.layout)
        if instance_id is None:
            raise ShellFailure(f"no instance id is recorded at {bk.layout.instance_id_path} (a cluster made before "
                               f"they were); bk shell initnewcluster records one\n")
        return f"{instance_id}\n", {"instanceId": instance_id, "root": bk.layout.root}
    return await _init_new_cluster(bk)


async def _init_new_cluster(bk):
    from bkcore.metaops import Create, MetaCode
    from bkmetastore.instance_id import ensure_instance_id
    root = bk.layout.root
    made = []
    for path in (bk.layout.available_path, bk.layout.readonly_path, f"{root}/cookies", f"{root}/idgen",
                 bk.layout.underreplicated_path.rsplit("/", 1)[0], bk.layout.underreplicated_path):
        if (await bk.store.execute(Create(path, b""))).code is MetaCode.OK:
            made.append(path)
    instance_id, is_new = await ensure_instance_id(bk.store, bk.layout)
    if is_new:
        made.append(bk.layout.instance_id_path)
    text = f"initialized {root}: made {', '.join(made)}\n" if made else f"{root} was initialized already\n"
    return text + f"instance id {instance_id}\n", {"root": root, "made": made, "instanceId": instance_id}


async def _delete_cluster(bk, args):
    """metaformat or nukeexistingcluster: checks, the question, then the deletion."""
    from bkcore.metaops import Children, MetaCode
    from bkmetastore.instance_id import read_instance_id, renew_instance_id
    from bkmetastore.layout_node import layout_node_path
    root = bk.layout.root
    running = sorted({*await bk.list_bookies(), *await bk.list_bookies(readonly=True)})
    if running:
        raise ShellFailure(f"bookies are registered ({', '.join(running)}): stop every bookie first\n")
    is_nuke = args.shell_command == "nukeexistingcluster"
    if is_nuke and args.instanceid is not None:
        recorded = await read_instance_id(bk.store, bk.layout)
        if recorded != args.instanceid:
            raise ShellFailure(f"the cluster at {root} has instance id {recorded or '(none recorded)'}, not "
                               f"{args.instanceid}: nothing was deleted\n")
    elif is_nuke:
        await confirm(args, f"Are you sure to delete everything under {root}, its layout and instance id "
                            f"included? This may cause data loss.")
    else:
        await confirm(args, f"Ledger root {root} already exists. Are you sure to format bookkeeper metadata? "
                            f"This may cause data loss.")
    keep = set() if is_nuke else {layout_node_path(root)}
    result = await bk.store.execute(Children(root))
    deleted = 0
    for child in sorted(result.children) if result.code is MetaCode.OK else ():
        path = f"{root}/{child}"
        if path not in keep:
            deleted += await delete_tree(bk.store, path)
    if is_nuke:
        deleted += await delete_tree(bk.store, root)
        return f"nukeexistingcluster: deleted {deleted} nodes under {root}\n", {"root": root, "deleted": deleted}
    instance_id = await renew_instance_id(bk.store, bk.layout)
    return (f"metaformat: deleted {deleted} nodes under {root}; new instance id {instance_id}\n",
            {"root": root, "deleted": deleted, "instanceId": instance_id})


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
