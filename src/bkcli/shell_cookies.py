"""`bk shell cookie_*`: the metastore copies of bookies' cookies, as BookKeeper's shell keeps them.

    cookie_list                     the bookies that have one
    cookie_get BOOKIE               its text
    cookie_create BOOKIE -cf FILE   register a cookie (a bookie's dataDir holds its own copy)
    cookie_update BOOKIE -cf FILE   replace the registered one
    cookie_delete BOOKIE [-f]       forget it (refused while the bookie is registered, unless -f)

A cookie ties a bookie's id to its directories and instance: a bookie whose directories do not
match the registered cookie refuses to start, so these are for repairs (a bookie moved to new
disks, one decommissioned by hand).
"""

from __future__ import annotations

from bkcli.shell_support import ShellFailure, lines

COMMANDS = ("cookie_list", "cookie_get", "cookie_create", "cookie_update", "cookie_delete")


def add_parsers(command) -> None:
    """command(name, help) -> a subparser that already has the cluster's arguments."""
    command("cookie_list", "the bookies with a registered cookie")
    command("cookie_get", "print a bookie's registered cookie").add_argument("bookie", help="host:port")
    for name, verb in (("cookie_create", "register"), ("cookie_update", "replace")):
        parser = command(name, f"{verb} a bookie's cookie from a file (its text, as cookie_get prints it)")
        parser.add_argument("bookie", help="host:port")
        parser.add_argument("-cf", "--cookie-file", required=True, metavar="FILE")
    delete = command("cookie_delete", "forget a bookie's registered cookie")
    delete.add_argument("bookie", help="host:port")
    delete.add_argument("-f", "--force", action="store_true", help="even while the bookie is registered")


async def run(bk, args):
    from bkcore.metaops import Children, Create, Delete, Get, MetaCode, SetData
    name, bookie = args.shell_command, getattr(args, "bookie", None)
    if name == "cookie_list":
        result = await bk.store.execute(Children(bk.layout.cookie_path("")[:-1]))
        bookies = sorted(result.children) if result.code is MetaCode.OK else []
        return lines(bookies), bookies
    path = bk.layout.cookie_path(bookie)
    current = await bk.store.execute(Get(path))
    if name == "cookie_get":
        if current.code is MetaCode.NO_NODE:
            raise ShellFailure(f"{bookie} has no registered cookie (cookie_list lists those that do)\n")
        text = current.data.decode("utf-8", "replace")
        return text if text.endswith("\n") else text + "\n", {"bookie": bookie, "cookie": text}
    if name == "cookie_delete":
        if current.code is MetaCode.NO_NODE:
            raise ShellFailure(f"{bookie} has no registered cookie\n")
        if not args.force and bookie in {*await bk.list_bookies(), *await bk.list_bookies(readonly=True)}:
            raise ShellFailure(f"{bookie} is registered (running): stop it first, or give -f\n")
        await bk.store.execute(Delete(path, current.version))
        return f"deleted {bookie}'s cookie\n", {"deleted": bookie}
    text = _cookie_file_text(args.cookie_file, bookie)
    if name == "cookie_create":
        if current.code is MetaCode.OK:
            raise ShellFailure(f"{bookie} already has a registered cookie; cookie_update replaces it\n")
        result = await bk.store.execute(Create(path, text.encode()))
    else:
        if current.code is MetaCode.NO_NODE:
            raise ShellFailure(f"{bookie} has no registered cookie; cookie_create registers one\n")
        result = await bk.store.execute(SetData(path, text.encode(), current.version))
    if result.code is not MetaCode.OK:
        raise ShellFailure(f"{name} {bookie}: the metastore answered {result.code.name}; try again\n")
    verb = "registered" if name == "cookie_create" else "replaced"
    return f"{verb} {bookie}'s cookie\n", {"bookie": bookie, verb: True}


def _cookie_file_text(path: str, bookie: str) -> str:
    """The file's text, once it reads as a cookie of `bookie` (a bad one is refused, not stored)."""
    from bkcore.bookie.cookie import Cookie, CookieError
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ShellFailure(f"cannot read the cookie file {path}: {getattr(exc, 'strerror', None) or exc}\n") from None
    try:
        cookie = Cookie.from_text(text, path=path)
    except CookieError as exc:
        raise ShellFailure(f"{exc}\n") from None
    if cookie.bookie_id != bookie:
        raise ShellFailure(f"{path} is the cookie of {cookie.bookie_id}, not of {bookie}\n")
    return text
