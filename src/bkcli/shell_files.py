"""`bk shell` commands that read a bookie's own files, with no cluster: `--data-dir` is the
bookie's dataDir, which they only read (a directory that is not a bookie's is refused, and
nothing is created).

    readjournal         every journal record
    readlog             every entry log record (or one log's, --log-id)
    readlogmetadata     per ledger, the entries and bytes an entry log holds
    lastmark            the LastLogMark of each ledger directory
    listfilesondisc     the journal, entry log and index files (-txn, -log, -idx: only those)
    localconsistencycheck   the index against the entry logs (bkcore.bookie.consistency): every
                        problem with its ledger and entry id; exit status 1 when there is any
"""

from __future__ import annotations

import os

from bkcli.shell_support import ShellFailure, lines


def add_parsers(command) -> None:
    """command(name, help) -> a subparser for a command that needs no cluster."""
    commands = {
        "readjournal": "print the records of a bookie's journals",
        "readlog": "print the records of a bookie's entry logs (all, or --log-id)",
        "readlogmetadata": "per ledger, the entries and bytes in a bookie's entry logs (all, or one)",
        "lastmark": "print a bookie's LastLogMark in each ledger directory",
        "listfilesondisc": "list a bookie's journal, entry log and index files",
        "localconsistencycheck": "check that every entry a stopped bookie's index locates is in its entry log, "
                                 "whole, with the right ids and digest",
    }
    for name, help_text in commands.items():
        parser = command(name, help_text)
        parser.add_argument("--data-dir", required=True, help="the bookie's dataDir")
        if name in ("readlog", "readlogmetadata"):
            parser.add_argument("--log-id", "-l", type=_log_id, default=None, help="one log: its hex id or file name")
        if name == "listfilesondisc":
            parser.add_argument("-txn", "--journal", action="store_true", help="journal files")
            parser.add_argument("-log", "--entrylog", action="store_true", help="entry log files")
            parser.add_argument("-idx", "--index", action="store_true", help="index files")


def _log_id(text: str) -> int:
    return int(text.removesuffix(".log"), 16)


def _local_journal(args):
    from bkcore.bookie.journal_files import Journal, JournalConfig
    from bktransports.filesystem import OsFileSystem
    config = JournalConfig()
    _check_bookie_dir(args.data_dir, config.journal_dir, *config.ledger_dirs)
    return Journal(fs=OsFileSystem(args.data_dir), config=config)


def _check_bookie_dir(data_dir: str, *subdirs: str) -> None:
    """Refuse, creating nothing, a --data-dir that is not a bookie's: it must exist and hold
    the subdirectories a bookie makes there."""
    if not os.path.isdir(data_dir):
        raise ShellFailure(f"{data_dir} is not a directory; give --data-dir the bookie's dataDir\n")
    missing = [name for name in subdirs if not os.path.isdir(os.path.join(data_dir, name))]
    if missing:
        raise ShellFailure(f"{data_dir} holds no bookie data (no {', '.join(missing)} in it); give --data-dir "
                            f"the bookie's dataDir\n")


def _journal_rows(record) -> list[dict]:
    """One row per entry (a batched ENTRIES record shows each of its entries) or other record."""
    from bkcore.bookie.journal import EntriesRecord, EntryRecord
    if type(record) is EntriesRecord:
        return [{"record": "ENTRY", "ledger_id": record.ledger_id, "entry_id": record.first_entry_id + i,
                 "size": len(body), "batch_of": len(record.bodies)} for i, body in enumerate(record.bodies)]
    if type(record) is EntryRecord:
        return [{"record": "ENTRY", "ledger_id": record.ledger_id, "entry_id": record.entry_id,
                 "size": len(record.body)}]
    fields = {name: getattr(record, name) for name in record.__slots__}
    name = type(record).__name__.removesuffix("Record").upper()
    return [{"record": name, **{k: (len(v) if isinstance(v, bytes) else v) for k, v in fields.items()}}]


def _readjournal(_, args):
    journal = _local_journal(args)
    rows = []
    for journal_id in journal.journal_ids():
        scan = journal.scan_journal(journal_id)
        for record in (scan.records if scan is not None else []):
            rows.extend({"journal": f"{journal_id:x}", **row} for row in _journal_rows(record))
        if scan is not None and scan.tail_problem:
            rows.append({"journal": f"{journal_id:x}", "record": "TAIL", "problem": scan.tail_problem})
    text = lines(" ".join(f"{k}={v}" for k, v in row.items()) for row in rows)
    return text, rows


def _readlog(_, args):
    logger = _entry_logger(args)
    rows = []
    for log_id in _log_ids(logger, args):
        for offset, ledger_id, entry_id, size in logger.scan(log_id):
            if ledger_id is None:
                rows.append({"log": f"{log_id:x}", "offset": offset, "problem": size})
            else:
                rows.append({"log": f"{log_id:x}", "offset": offset, "ledger_id": ledger_id,
                             "entry_id": entry_id, "size": size})
    return lines(" ".join(f"{k}={v}" for k, v in row.items()) for row in rows), rows


def _lastmark(_, args):
    journal = _local_journal(args)
    marks = dict(zip(journal.config.ledger_dirs, journal.read_last_marks()))
    data = {d: {"journal_id": f"{m.journal_id:x}", "position": m.position} for d, m in marks.items()}
    return lines(f"{d}\tjournal {v['journal_id']} position {v['position']}" for d, v in data.items()), data


def _entry_logger(args):
    from bkcore.bookie.entrylog import EntryLogger
    from bktransports.filesystem import OsFileSystem
    _check_bookie_dir(args.data_dir, "ledgers")
    return EntryLogger(fs=OsFileSystem(args.data_dir), ledger_dir="ledgers", entry_log_size_max=1)


def _log_ids(logger, args) -> list[int]:
    known = logger.log_ids()
    if args.log_id is None:
        return known
    if args.log_id not in known:
        raise ShellFailure(f"no entry log {args.log_id:x} in {args.data_dir}/ledgers "
                           f"(there: {', '.join(f'{i:x}' for i in known) or 'none'})\n")
    return [args.log_id]


def _readlogmetadata(_, args):
    logger = _entry_logger(args)
    rows = []
    for log_id in _log_ids(logger, args):
        ledgers: dict[int, list[int]] = {}
        problems = 0
        for _, ledger_id, _, size in logger.scan(log_id):
            if ledger_id is None:
                problems += 1
                continue
            count_and_bytes = ledgers.setdefault(ledger_id, [0, 0])
            count_and_bytes[0] += 1
            count_and_bytes[1] += size
        rows += [{"log": f"{log_id:x}", "ledger_id": ledger_id, "entries": count, "bytes": size}
                 for ledger_id, (count, size) in sorted(ledgers.items())]
        if problems:
            rows.append({"log": f"{log_id:x}", "unreadable_records": problems})
    return lines(" ".join(f"{k}={v}" for k, v in row.items()) for row in rows), rows


def _listfilesondisc(_, args):
    from bkcore.bookie.journal_files import JournalConfig
    from bktransports.filesystem import FILE_KINDS, bookie_files
    config = JournalConfig()
    _check_bookie_dir(args.data_dir, config.journal_dir, *config.ledger_dirs)
    chosen = tuple(kind for kind, flag in zip(FILE_KINDS, (args.journal, args.entrylog, args.index)) if flag)
    rows = bookie_files(args.data_dir, config, chosen or FILE_KINDS)
    return lines(f"{row['kind']}\t{row['file']}\t{row['size']}" for row in rows), rows


def _localconsistencycheck(_, args):
    """BookKeeper's localconsistencycheck, over the bookie's index and entry logs, read only."""
    import lmdb

    from bkcli.progress import Progress
    from bkcore.bookie.consistency import check_local_consistency
    from bktransports.lmdb_index import LmdbIndexStore
    _check_bookie_dir(args.data_dir, "ledgers", "index")
    logger = _entry_logger(args)
    try:
        index = LmdbIndexStore(os.path.join(args.data_dir, "index"), readonly=True)
    except lmdb.Error as exc:
        raise ShellFailure(f"cannot open the index in {args.data_dir}/index: {exc}\n") from None
    try:
        with Progress("entries checked") as progress:
            report = check_local_consistency(index=index, entry_logger=logger, progress=progress.update)
    finally:
        index.close()
    problems = [{"ledger_id": i.ledger_id, "entry_id": i.entry_id, "problem": i.problem}
                for i in report.inconsistencies]
    data = {"ledgers": report.ledger_count, "entries": report.entry_count,
            "digests_checked": report.digest_checked_count, "digests_unchecked": report.digest_unchecked_count,
            "inconsistencies": problems, "inconsistencies_not_listed": report.inconsistency_dropped_count}
    summary = (f"checked {report.entry_count} entries of {report.ledger_count} ledgers "
               f"({report.digest_checked_count} CRC32C digests verified, {report.digest_unchecked_count} not "
               f"checkable without the ledger's password)")
    if report.inconsistency_count == 0:
        return f"{summary}: no inconsistency\n", data
    listed = lines(f"ledger {p['ledger_id']} entry {p['entry_id']}: {p['problem']}" for p in problems)
    more = f"... and {report.inconsistency_dropped_count} more\n" if report.inconsistency_dropped_count else ""
    raise ShellFailure(f"{summary}: {report.inconsistency_count} inconsistencies\n", result=(listed + more, data))


HANDLERS = {"readjournal": _readjournal, "readlog": _readlog, "readlogmetadata": _readlogmetadata,
            "lastmark": _lastmark, "listfilesondisc": _listfilesondisc,
            "localconsistencycheck": _localconsistencycheck}
