"""`bk shell` commands that rename bookies in ledger metadata, after BookKeeper's UpdateLedgerOp:

    updatebookieinledger -bs OLD -bd NEW   a bookie that moved to a new address with its data
    updateledgers -b hostname|ip           bookies that now go by their hostname (or by their IP):
                                           each registered bookie whose id has that form takes
                                           the place of its other forms in ledger metadata

Both rewrite every ledger that names an old id through one loop (rename_in_ledgers): the
ledger's metadata is read, renamed and written back by compare-and-set on its version (a
concurrent change is re-read and retried). BookKeeper's flags pace it: -s ledgers updated per
second (5), -r metadata reads in flight (5 x -s), -l at most this many ledgers read, -v a line on
stderr every -p seconds (10) saying how far it got. On a terminal a bar shows progress as well.

Safety, as BookKeeper's: an old id must not be registered (its bookie runs under the new id now)
and a new one must be. Unlike BookKeeper's, a ledger whose ensemble would then name one bookie
twice is refused: two copies on one bookie would count as two.

updateledgers finds the other forms of a bookie's host by name resolution: a hostname's IPv4
addresses, an IP's name and aliases (reverse lookup). BookKeeper's runs on one bookie and flips
that bookie's id by its configuration; this one flips every registered bookie it can.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import socket
import sys
import time

from bkcli.defaults import positive_int
from bkcli.progress import Progress
from bkcli.shell_support import ShellFailure, lines

COMMANDS = ("updatebookieinledger", "updateledgers")
UPDATES_PER_S_DEFAULT = 5
METADATA_ATTEMPT_COUNT_MAX = 10     # compare-and-set tries on one ledger before giving up


def add_parsers(command) -> None:
    update = command("updatebookieinledger", "name a bookie's new address wherever ledger metadata names its old one")
    update.add_argument("-bs", "-sb", "-bookieSrc", "--bookieSrc", "--srcBookie", "--bookie-src", dest="source",
                        required=True, metavar="OLD")
    update.add_argument("-bd", "-db", "-bookieDest", "--bookieDest", "--destBookie", "--bookie-dest",
                        dest="destination", required=True, metavar="NEW")
    _add_pacing_arguments(update)
    flip = command("updateledgers", "rename bookies in every ledger's metadata from their IP to their hostname "
                                    "(-b hostname) or back (-b ip)")
    flip.add_argument("-b", "-bookieId", "--bookieId", required=True, choices=("hostname", "ip"), dest="form",
                      help="the form the ids take: each registered bookie whose id has it replaces its other forms")
    _add_pacing_arguments(flip)


def _add_pacing_arguments(parser) -> None:
    parser.add_argument("-s", "-updatespersec", "--updatespersec", "--updatepersec", type=positive_int,
                        default=UPDATES_PER_S_DEFAULT, dest="updates_per_s", metavar="N",
                        help=f"ledgers updated per second ({UPDATES_PER_S_DEFAULT})")
    parser.add_argument("-r", "-maxOutstandingReads", "--maxOutstandingReads", type=positive_int, default=None,
                        dest="reads_in_flight_max", metavar="N", help="ledger metadata reads in flight (5 x --updatespersec)")
    parser.add_argument("-l", "-limit", "--limit", type=positive_int, default=None, metavar="N",
                        help="read at most this many ledgers (no limit)")
    parser.add_argument("-v", "-verbose", "--verbose", type=_boolean, nargs="?", const=True, default=False,
                        help="print how far it got every --printprogress seconds (BookKeeper's -v true works too)")
    parser.add_argument("-p", "-printprogress", "--printprogress", type=float, default=10.0, dest="print_every_s",
                        metavar="SECONDS", help="seconds between those lines (10)")


def _boolean(text: str) -> bool:
    import argparse
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"{text!r} is neither true nor false")
    return text.lower() == "true"


async def run(bk, args):
    if args.shell_command == "updatebookieinledger":
        renames = await _checked_move(bk, args.source, args.destination)
    else:
        renames = await _flips(bk, args.form)
    report = await rename_in_ledgers(bk, renames, pacing=args)
    data = {"renames": renames, "ledgers": report.updated, "ledgers_read": report.read_count}
    if args.shell_command == "updatebookieinledger":
        data |= {"source": args.source, "destination": args.destination}
    text = lines(f"{old} -> {new}" for old, new in renames.items()) or "no registered bookie has an id to replace\n"
    return text + f"updated {len(report.updated)} of {report.read_count} ledgers read\n", data


async def _registered(bk) -> set[str]:
    return {*await bk.list_bookies(), *await bk.list_bookies(readonly=True)}


async def _checked_move(bk, source: str, destination: str) -> dict[str, str]:
    if source == destination:
        raise ShellFailure("the two addresses are the same; nothing to do\n")
    registered = await _registered(bk)
    if source in registered:
        raise ShellFailure(f"{source} is registered (running): stop it first; its data now serves as {destination}\n")
    if destination not in registered:
        raise ShellFailure(f"{destination} is not a registered bookie: start the moved bookie there first\n")
    return {source: destination}


async def _flips(bk, form: str) -> dict[str, str]:
    """old id -> registered id, for every registered bookie whose host has `form`: its host's
    other forms, where no bookie is registered under them."""
    import trio
    registered = await _registered(bk)
    renames: dict[str, str] = {}
    for bookie in sorted(registered):
        host, _, port = bookie.rpartition(":")
        if _is_ip(host) != (form == "ip"):
            continue
        for other in await trio.to_thread.run_sync(_other_forms, host):
            old = f"{other}:{port}"
            if old in registered or old == bookie:
                continue
            if renames.setdefault(old, bookie) != bookie:
                raise ShellFailure(f"{old} could be {renames[old]} or {bookie}; rename it with updatebookieinledger\n")
    return renames


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def _other_forms(host: str) -> list[str]:
    """A hostname's IPv4 addresses, or an IP's names (none where it does not resolve)."""
    try:
        if _is_ip(host):
            name, aliases, _ = socket.gethostbyaddr(host)
            return [name, *aliases]
        return socket.gethostbyname_ex(host)[2]
    except OSError:
        return []


@dataclasses.dataclass
class RenameReport:
    read_count: int = 0                                         # ledgers whose metadata was read
    updated: list[int] = dataclasses.field(default_factory=list)
    failures: list[str] = dataclasses.field(default_factory=list)


class _Pacer:
    """BookKeeper's RateLimiter for updates: the first goes at once, each next 1/rate later."""

    def __init__(self, per_s: float) -> None:
        self.interval_s = 1 / per_s
        self.next_at: float | None = None

    async def wait(self) -> None:
        import trio
        now = trio.current_time()
        at = now if self.next_at is None else max(now, self.next_at)
        self.next_at = at + self.interval_s
        await trio.sleep_until(at)


async def rename_in_ledgers(bk, renames: dict[str, str], *, pacing) -> RenameReport:
    """Name renames[old] wherever a ledger's metadata names old. `pacing` has updates_per_s,
    reads_in_flight_max (None: 5 x updates_per_s), limit (None: every ledger), verbose and
    print_every_s. Raises ShellFailure, after the updates in flight end, if any ledger failed."""
    import trio
    report = RenameReport()
    ledger_ids = await bk.list_ledgers() if renames else []
    ledger_ids = ledger_ids[:pacing.limit] if pacing.limit is not None else ledger_ids
    pacer = _Pacer(pacing.updates_per_s)
    reads = trio.Semaphore(pacing.reads_in_flight_max or 5 * pacing.updates_per_s)
    shown = _Shown(len(ledger_ids), report, every_s=pacing.print_every_s if pacing.verbose else None)
    with shown.progress:
        async with trio.open_nursery() as nursery:
            for ledger_id in ledger_ids:
                await reads.acquire()
                if report.failures:
                    reads.release()
                    break
                nursery.start_soon(_rename_one, bk, ledger_id, renames, pacer, report, reads, shown)
    shown.line()
    if report.failures:
        raise ShellFailure(f"{'; '.join(report.failures)} (updated so far: {sorted(report.updated)})\n")
    report.updated.sort()
    return report


async def _rename_one(bk, ledger_id: int, renames: dict[str, str], pacer: _Pacer, report: RenameReport,
                      reads, shown) -> None:
    from bkcore.errors import BKException, NoSuchLedger
    from bkcore.metaops import MetaCode, SetData
    try:
        for _ in range(METADATA_ATTEMPT_COUNT_MAX):
            metadata = await bk.ledger_metadata(ledger_id)
            renamed = renamed_metadata(metadata, renames)
            if renamed is None:
                return
            await pacer.wait()
            result = await bk.store.execute(SetData(bk.layout.ledger_path(ledger_id), renamed.to_bytes(),
                                                    metadata.version))
            if result.code is MetaCode.OK:
                report.updated.append(ledger_id)
                return
            if result.code not in (MetaCode.BAD_VERSION, MetaCode.CONNECTION_LOSS, MetaCode.NO_NODE):
                report.failures.append(f"ledger {ledger_id}: the metastore answered {result.code.name}")
                return
        report.failures.append(f"ledger {ledger_id}: its metadata changed {METADATA_ATTEMPT_COUNT_MAX} times "
                               f"under the update; run the command again")
    except NoSuchLedger:
        pass                                     # deleted meanwhile
    except (BKException, ShellFailure, OSError) as exc:      # (a lost metastore: ConnectionError)
        report.failures.append(f"ledger {ledger_id}: {str(exc).strip()}" if isinstance(exc, OSError)
                               else str(exc).strip())
    finally:
        report.read_count += 1
        reads.release()
        shown.update()


def renamed_metadata(metadata, renames: dict[str, str]):
    """The metadata with each old bookie id replaced by its new one; None when it names no old
    one. Raises ShellFailure when an ensemble would then name one bookie twice."""
    if not any(bookie in renames for bookie in metadata.all_bookies()):
        return None
    ensembles = []
    for first_entry_id, bookies in metadata.ensembles:
        renamed = tuple(renames.get(bookie, bookie) for bookie in bookies)
        if len(set(renamed)) < len(renamed):
            old = next(bookie for bookie in bookies if bookie in renames and renames[bookie] in bookies)
            raise ShellFailure(f"ledger {metadata.ledger_id} names both {old} and {renames[old]} (its ensemble "
                               f"from entry {first_entry_id}); renaming one to the other would put two copies "
                               f"on one bookie")
        ensembles.append((first_entry_id, renamed))
    return dataclasses.replace(metadata, ensembles=tuple(ensembles))


class _Shown:
    """How far a rename got: the bar on a terminal; with -v, a line every print_every_s too."""

    def __init__(self, total: int, report: RenameReport, *, every_s: float | None) -> None:
        self.total = total
        self.report = report
        self.every_s = every_s
        self.progress = Progress("ledgers")
        self.printed_at = time.monotonic()

    def update(self) -> None:
        done, updated = self.report.read_count, len(self.report.updated)
        self.progress.update(done, self.total, note=f"{updated} updated")
        if self.every_s is not None and time.monotonic() - self.printed_at >= self.every_s:
            self.line()

    def line(self) -> None:
        if self.every_s is None:
            return
        self.progress.clear()
        print(f"{self.report.read_count} of {self.total} ledgers read, {len(self.report.updated)} updated",
              file=sys.stderr, flush=True)
        self.printed_at = time.monotonic()
