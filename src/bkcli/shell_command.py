"""`bk shell <command>`: BookKeeper's admin shell against a running cluster (or a bookie's files).

Cluster commands connect through the library to the metastore named by --metastore (default:
the local standalone). Human-readable output by default, `--json` for scripts. Commands that
read a bookie's own files (readjournal, lastmark) take --data-dir and need no cluster.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from bkcli.credentials import add_security_arguments, client_credentials
from bkcli import shell_autorecovery, shell_bookie_ids, shell_cluster, shell_cookies, shell_files
from bkcli.defaults import add_metastore_argument, metastore_uri, nobody_listening, positive_int
from bkcli.shell_support import ShellFailure as _ShellFailure
from bkcli.shell_support import add_confirmation_arguments, confirm
from bkcli.shell_support import lines as _lines


def add_parser(commands) -> None:
    shell = commands.add_parser("shell", help="admin commands (listbookies, simpletest, readledger, ...)")
    sub = shell.add_subparsers(dest="shell_command", required=True)

    def command(name: str, help_text: str, *, needs_cluster: bool = True) -> argparse.ArgumentParser:
        parser = sub.add_parser(name, help=help_text)
        if needs_cluster:
            add_metastore_argument(parser)
            add_security_arguments(parser)
        parser.add_argument("--json", action="store_true", help="print JSON instead of text")
        parser.set_defaults(run=cmd_shell)
        return parser

    listing = command("listbookies", "bookies registered as writable (-rw, the default), readonly (-ro) or both (-a)")
    which = listing.add_mutually_exclusive_group()
    which.add_argument("-rw", "--readwrite", action="store_const", dest="which", const="readwrite",
                       help="the writable ones (the default)")
    which.add_argument("-ro", "--readonly", action="store_const", dest="which", const="readonly",
                       help="the readonly ones")
    which.add_argument("-a", "--all", action="store_const", dest="which", const="all",
                       help="both, the readonly ones marked")
    ledgers = command("listledgers", "ids of every ledger (-m: with its metadata; -id: only those on one bookie)")
    ledgers.add_argument("-m", "--meta", action="store_true", help="print each ledger's metadata too")
    ledgers.add_argument("-id", "--bookieid", metavar="BOOKIE", help="only ledgers with an ensemble on this bookie")
    command("bookieinfo", "disk space, state and ledger count of every registered bookie")
    metadata = command("ledgermetadata", "one ledger's metadata (or dump it to a file, or restore it from one)")
    _add_ledger_id(metadata)
    saving = metadata.add_mutually_exclusive_group()
    saving.add_argument("-d", "--dumptofile", metavar="FILE", help="write the stored metadata, as it is, to FILE")
    saving.add_argument("-r", "--restorefromfile", metavar="FILE",
                        help="store FILE (a dump) as the ledger's metadata, replacing what is there")
    read = command("readledger", "print a ledger's entries up to its LAC (-r: recover it first, fencing its "
                                 "writer, as BookKeeper's readledger -r)")
    _add_ledger_id(read)
    read.add_argument("-fe", "--firstentryid", "--first", type=int, default=0, dest="first",
                      help="first entry to print (0)")
    read.add_argument("-le", "--lastentryid", "--last", type=int, default=None, dest="last",
                      help="last entry to print (the LAC)")
    read.add_argument("-m", "--msg", action="store_true", help="print each entry's payload too")
    read.add_argument("-r", "--force-recovery", action="store_true", dest="recover",
                      help="recover the ledger first (fence it and close it at its last entry), so its end is final")
    read.add_argument("--password", default="", help="ledger password (text)")
    delete = command("deleteledger", "delete a ledger (bookies reclaim its space at GC; asks first)")
    delete.add_argument("ledger_id", type=int)
    add_confirmation_arguments(delete)
    fence = command("fence", "fence and close a ledger (recovery): its writer can add no more")
    fence.add_argument("ledger_id", type=int)
    fence.add_argument("--password", default="")
    simple = command("simpletest", "write entries to a new ledger, read them back, delete it")
    simple.add_argument("--ensemble", type=positive_int, default=3)
    simple.add_argument("--write-quorum", type=positive_int, default=2)
    simple.add_argument("--ack-quorum", type=positive_int, default=2)
    simple.add_argument("--num-entries", type=positive_int, default=100)
    sanity = command("bookiesanity", "write and read a ledger on every writable bookie, one at a time")
    sanity.add_argument("--num-entries", type=positive_int, default=10)
    marked = command("listunderreplicated", "ledgers marked under-replicated and their lost bookies")
    marked.add_argument("-mr", "--missingreplica", metavar="BOOKIE", help="only those whose lost bookies include it")
    marked.add_argument("-emr", "--excludingmissingreplica", metavar="BOOKIE",
                        help="only those whose lost bookies do not include it")
    marked.add_argument("-prw", "--printreplicationworkerid", action="store_true",
                        help="also the worker re-replicating each now, if one is")
    _add_recovery_parsers(command)
    shell_cookies.add_parsers(command)
    shell_cluster.add_parsers(command)
    shell_bookie_ids.add_parsers(command)
    shell_autorecovery.add_parsers(command)
    shell_files.add_parsers(lambda name, help_text: command(name, help_text, needs_cluster=False))


def _add_recovery_parsers(command) -> None:
    """recover and decommission: a lost bookie's fragments copied elsewhere."""
    recover = command("recover", "copy a lost bookie's ledger fragments to other bookies (asks first)")
    recover.add_argument("bookie", help="host:port of the lost bookie")
    recover.add_argument("-dr", "--dryrun", "--dry-run", action="store_true", dest="dry_run",
                         help="only count what would be copied")
    recover.add_argument("-q", "--query", action="store_true",
                         help="only list the ledgers with fragments on the bookie (copies nothing)")
    recover.add_argument("-l", "--ledger", type=int, action="append", dest="ledgers", metavar="ID",
                         help="only this ledger (again for more)")
    recover.add_argument("-sk", "--skipOpenLedgers", "--skip-open-ledgers", action="store_true", dest="skip_open",
                         help="leave ledgers still being written alone")
    recover.add_argument("-d", "--deletecookie", "--delete-cookie", action="store_true", dest="delete_cookie",
                         help="once everything is copied, delete the bookie's cookie (it may then join afresh)")
    add_confirmation_arguments(recover, force_help="recover without asking (-q and -dr never ask)")
    decommission = command("decommission", "recover a stopped bookie's data elsewhere, then forget its cookie "
                                           "(asks first)")
    decommission.add_argument("bookie", help="host:port of the bookie (it must be stopped)")
    add_confirmation_arguments(decommission)


def cmd_shell(args) -> int:
    import trio
    if getattr(args, "metastore", "absent") != "absent":
        nobody = nobody_listening(metastore_uri(args))
        if nobody is not None:
            print(f"bk shell {args.shell_command}: {nobody}", file=sys.stderr)
            return 1
    try:
        return trio.run(run_shell, args, sys.stdout)
    except (OSError, ConnectionError) as exc:
        from bkmetastore.api import MetastoreRefused
        is_said = isinstance(exc, MetastoreRefused) or "running?" in str(exc)
        hint = "" if is_said else "; is the cluster running? (bk standalone, or --metastore URI)"
        print(f"bk shell {args.shell_command}: {exc}{hint}", file=sys.stderr)
        return 1


async def run_shell(args, out) -> int:
    """Run one parsed shell command, writing to `out`; returns the exit status."""
    from bkcore.errors import BKException

    handler = _HANDLERS[args.shell_command]
    try:
        if getattr(args, "metastore", "absent") == "absent":
            result = handler(None, args)
        else:
            import bkclient
            async with bkclient.connect(metastore_uri(args), **client_credentials(args)) as bk:
                result = await handler(bk, args)
    except BKException as exc:
        print(f"bk shell {args.shell_command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:          # what the arguments ask cannot be (a quorum above the ensemble)
        print(f"bk shell {args.shell_command}: {exc}", file=sys.stderr)
        return 2
    except _ShellFailure as exc:
        if exc.result is not None:
            _write_result(out, args, *exc.result)
        sys.stderr.write(f"bk shell {args.shell_command}: {exc}")
        return 1
    _write_result(out, args, *result)
    return 0


def _write_result(out, args, text: str, data) -> None:
    out.write(json.dumps(data, indent=None, sort_keys=True) + "\n" if args.json else text)


async def _listbookies(bk, args):
    which = args.which or "readwrite"
    if which != "all":
        bookies = await bk.list_bookies(readonly=which == "readonly")
        return _lines(bookies), bookies
    writable, readonly = await bk.list_bookies(), await bk.list_bookies(readonly=True)
    return (_lines([*writable, *(f"{bookie}\treadonly" for bookie in readonly)]),
            {"readwrite": writable, "readonly": readonly})


async def _bookieinfo(bk, args):
    rows = [await bk.bookie_info(b) for b in sorted(await bk.list_bookies() + await bk.list_bookies(readonly=True))]
    gib = 1024 ** 3
    text = _lines(f"{r['bookie']}\t{'readonly' if r['readonly'] else 'writable'}\t"
                  f"free {r['free_disk_space'] / gib:.1f} of {r['total_disk_space'] / gib:.1f} GiB\t"
                  f"{r['ledgers']} ledgers" for r in rows)
    return text, rows


async def _listledgers(bk, args):
    from bkcore.errors import NoSuchLedger
    ledger_ids = await bk.list_ledgers()
    if not (args.meta or args.bookieid):
        return _lines(ledger_ids), ledger_ids
    summaries = []
    for ledger_id in ledger_ids:
        try:
            summary = (await bk.ledger_metadata(ledger_id)).summary()
        except NoSuchLedger:
            continue                  # (deleted meanwhile)
        if args.bookieid is None or any(args.bookieid in bookies for bookies in summary["ensembles"].values()):
            summaries.append(summary)
    if not args.meta:
        chosen = [summary["ledger_id"] for summary in summaries]
        return _lines(chosen), chosen
    text = _lines(f"{s['ledger_id']}\t{s['state']}\tE{s['ensemble_size']} Qw{s['write_quorum_size']} "
                  f"Qa{s['ack_quorum_size']}\tlast entry {s['last_entry_id']}\tlength {s['length']}\t"
                  f"ensembles {s['ensembles']}" for s in summaries)
    return text, summaries


def _add_ledger_id(parser) -> None:
    """A ledger id given as an argument, or with BookKeeper's -l/--ledgerid."""
    parser.add_argument("ledger_id", type=int, nargs="?", help="the ledger (or -l)")
    parser.add_argument("-l", "--ledgerid", type=int, dest="ledger_id_flag", help="the ledger (BookKeeper's spelling)")


def _ledger_id(args) -> int:
    ledger_id = args.ledger_id if args.ledger_id is not None else args.ledger_id_flag
    if ledger_id is None:
        raise _ShellFailure("which ledger? give its id (or -l ID)\n")
    return ledger_id


async def _ledgermetadata(bk, args):
    ledger_id = _ledger_id(args)
    if args.restorefromfile:
        return await _restore_metadata(bk, ledger_id, args.restorefromfile)
    metadata = await bk.ledger_metadata(ledger_id)
    if args.dumptofile:
        with open(args.dumptofile, "wb") as file:
            file.write(metadata.to_bytes())
        return (f"ledger {ledger_id}'s metadata written to {args.dumptofile}\n",
                {"ledger_id": ledger_id, "file": args.dumptofile})
    data = metadata.summary()
    text = _lines(f"{key}: {value}" for key, value in data.items())
    return text, data


async def _restore_metadata(bk, ledger_id: int, path: str):
    """BookKeeper's ledgermetadata -restorefromfile: a dump of this ledger's metadata stored as
    it (once it reads as this ledger's), created if the ledger has none."""
    from bkcore.ledger.metadata import LedgerMetadata
    from bkcore.metaops import Create, Get, MetaCode, SetData
    try:
        with open(path, "rb") as file:
            data = file.read()
        restored = LedgerMetadata.from_bytes(data, version=0)
    except OSError as exc:
        raise _ShellFailure(f"cannot read {path}: {exc.strerror}\n") from None
    except Exception as exc:     # noqa: BLE001 - whatever the file holds, it is not metadata
        raise _ShellFailure(f"{path} is not a ledger metadata dump: {exc}\n") from None
    if restored.ledger_id != ledger_id:
        raise _ShellFailure(f"{path} holds the metadata of ledger {restored.ledger_id}, not {ledger_id}\n")
    ledger_path = bk.layout.ledger_path(ledger_id)
    current = await bk.store.execute(Get(ledger_path))
    if current.code is MetaCode.NO_NODE:
        result = await bk.store.execute(Create(ledger_path, data))
    else:
        result = await bk.store.execute(SetData(ledger_path, data, current.version))
    if result.code is not MetaCode.OK:
        raise _ShellFailure(f"restoring ledger {ledger_id}'s metadata failed ({result.code.name}); try again\n")
    return (f"ledger {ledger_id}'s metadata restored from {path}\n",
            {"ledger_id": ledger_id, "file": path, "state": restored.state.name})


def _show(payload: bytes) -> str:
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        return payload.hex()


async def _readledger(bk, args):
    ledger_id = _ledger_id(args)
    reader = await bk.open_ledger(ledger_id, password=args.password.encode(), recovery=args.recover)
    last = reader.last_add_confirmed if args.last is None else min(args.last, reader.last_add_confirmed)
    entries = []
    first = args.first
    while first <= last:
        chunk_last = min(last, first + 999)
        entries += [(first + i, payload) for i, payload in enumerate(await reader.read(first, chunk_last))]
        first = chunk_last + 1
    text = _lines(f"{entry_id}\t{len(payload)} bytes" + (f"\t{_show(payload)}" if args.msg else "")
                  for entry_id, payload in entries)
    return text, [{"entry_id": entry_id, "size": len(payload), **({"payload_hex": payload.hex()} if args.msg else {})}
                  for entry_id, payload in entries]


async def _deleteledger(bk, args):
    await bk.ledger_metadata(args.ledger_id)          # NoSuchLedger before any question
    await confirm(args, f"Are you sure to delete ledger {args.ledger_id}?")
    await bk.delete_ledger(args.ledger_id)
    return f"deleted ledger {args.ledger_id}\n", {"deleted": args.ledger_id}


async def _fence(bk, args):
    reader = await bk.open_ledger(args.ledger_id, password=args.password.encode(), recovery=True)
    return (f"ledger {args.ledger_id} fenced and closed at entry {reader.last_add_confirmed}\n",
            {"ledger_id": args.ledger_id, "last_entry_id": reader.last_add_confirmed})


async def _write_and_verify(bk, *, ensemble: int, write_quorum: int, ack_quorum: int, count: int) -> dict:
    started = time.perf_counter()
    ledger = await bk.create_ledger(ensemble=ensemble, write_quorum=write_quorum, ack_quorum=ack_quorum,
                                    password=b"simpletest")
    payloads = [b"simpletest entry %d" % i for i in range(count)]
    await ledger.add_many(payloads)
    await ledger.close()
    reader = await bk.open_ledger(ledger.ledger_id, password=b"simpletest", recovery=False)
    read_back = await reader.read(0, count - 1) if count else []
    if read_back != payloads:
        raise AssertionError(f"ledger {ledger.ledger_id}: read back differs from what was written")
    await bk.delete_ledger(ledger.ledger_id)
    return {"ledger_id": ledger.ledger_id, "entries": count, "ensemble": list(ledger.metadata.ensembles[0][1]),
            "seconds": round(time.perf_counter() - started, 4)}


async def _simpletest(bk, args):
    report = await _write_and_verify(bk, ensemble=args.ensemble, write_quorum=args.write_quorum,
                                     ack_quorum=args.ack_quorum, count=args.num_entries)
    text = (f"simpletest: wrote, read back and deleted {report['entries']} entries in ledger {report['ledger_id']} "
            f"on {', '.join(report['ensemble'])} in {report['seconds']:.3f}s: OK\n")
    return text, report


async def _bookiesanity(bk, args):
    """Every writable bookie, alone in an ensemble of one, takes and returns entries."""
    from bktransports.admin_ops import bookie_sanity
    reports = [{"bookie": bookie, "ok": await bookie_sanity(bk, bookie, entry_count=args.num_entries)}
               for bookie in await bk.list_bookies()]
    text = _lines(f"{r['bookie']}\t{'OK' if r['ok'] else 'FAILED'}" for r in reports)
    return text, reports


async def _listunderreplicated(bk, args):
    from bkcore.metaops import Get, MetaCode
    from bktransports.cluster_state import chosen_underreplicated
    marks = await chosen_underreplicated(bk.store, bk.layout, missing=args.missingreplica,
                                         excluding=args.excludingmissingreplica)
    workers = {}
    if args.printreplicationworkerid:
        for ledger_id in marks:
            lock = await bk.store.execute(Get(bk.layout.replication_lock_path(ledger_id)))
            workers[ledger_id] = lock.data.decode("utf-8", "replace") if lock.code is MetaCode.OK else None
    text = _lines(f"{ledger_id}\t{','.join(lost)}" + (f"\t{workers[ledger_id] or '-'}" if workers else "")
                  for ledger_id, lost in marks.items())
    if workers:
        return text, {str(k): {"lost": v, "worker": workers[k]} for k, v in marks.items()}
    return text, {str(k): v for k, v in marks.items()}


async def _refusing(check, bk, bookie: str) -> None:
    """check(bk, bookie) from bktransports.admin_ops, its refusal as this command's failure."""
    from bktransports.admin_ops import NotOfCluster, RecoveryRefused
    try:
        await check(bk, bookie)
    except RecoveryRefused as exc:
        hint = "; bk shell listbookies -a lists the registered ones" if isinstance(exc, NotOfCluster) else ""
        raise _ShellFailure(f"{exc}{hint}\n") from None


async def _recover(bk, args):
    from bkcli.progress import Progress
    from bktransports.admin_ops import check_cluster_bookie, recover
    await _refusing(check_cluster_bookie, bk, args.bookie)
    dry_run = args.dry_run or args.query
    if not dry_run:
        await confirm(args, f"Are you sure to recover {args.bookie}'s ledger fragments onto other bookies?")
    with Progress("ledgers") as progress:
        report = await recover(bk, args.bookie, delete_cookie_after=args.delete_cookie, dry_run=dry_run,
                               ledger_ids=args.ledgers, skip_open=args.skip_open, progress=progress)
    if args.query:
        return (_lines(f"{ledger_id}" for ledger_id in report.ledgers_on_lost),
                {"bookie": args.bookie, "ledgers": report.ledgers_on_lost})
    verb = "would copy" if dry_run else "copied"
    text = (f"{args.bookie}: {verb} {report.fragments_copied} fragments ({report.entries_copied} entries) "
            f"of {report.ledgers_checked} ledgers"
            + (f"; {len(report.ledgers_skipped)} open ledgers left alone" if report.ledgers_skipped else "") + "\n"
            + _lines(f"FAILED: {f}" for f in report.failures))
    data = {"bookie": args.bookie, "dry_run": dry_run, "ledgers_checked": report.ledgers_checked,
            "fragments": report.fragments_copied, "entries": report.entries_copied, "failures": report.failures,
            "ledgers_skipped": report.ledgers_skipped}
    if report.failures:
        raise _ShellFailure(text)
    if report.cookie_deleted:
        text += f"{args.bookie}'s cookie removed\n"
    return text, data


async def _decommission(bk, args):
    from bkcli.progress import Progress
    from bktransports.admin_ops import check_decommissionable, decommission
    await _refusing(check_decommissionable, bk, args.bookie)
    await confirm(args, f"Are you sure to decommission {args.bookie} (its ledgers copied elsewhere, its cookie "
                        f"deleted)?")
    with Progress("ledgers") as progress:
        report = await decommission(bk, args.bookie, progress=progress)
    if report.failures:
        raise _ShellFailure("".join(f"FAILED: {f}\n" for f in report.failures) + "its cookie is kept\n")
    text = f"{args.bookie} decommissioned: {report.fragments_copied} fragments copied, cookie removed\n"
    return text, {"bookie": args.bookie, "fragments": report.fragments_copied}


_HANDLERS = {
    "listbookies": _listbookies, "listledgers": _listledgers, "bookieinfo": _bookieinfo, "ledgermetadata": _ledgermetadata,
    "readledger": _readledger, "deleteledger": _deleteledger, "fence": _fence, "simpletest": _simpletest,
    "bookiesanity": _bookiesanity, **shell_files.HANDLERS,
    "listunderreplicated": _listunderreplicated, "recover": _recover, "decommission": _decommission,
    **dict.fromkeys(shell_cookies.COMMANDS, shell_cookies.run),
    **dict.fromkeys(shell_cluster.COMMANDS, shell_cluster.run),
    **dict.fromkeys(shell_bookie_ids.COMMANDS, shell_bookie_ids.run),
    **dict.fromkeys(shell_autorecovery.COMMANDS, shell_autorecovery.run),
}


