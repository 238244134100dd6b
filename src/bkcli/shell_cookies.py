"""`bk shell cookie_*`: the metastore copies of bookies' cookies, as BookKeeper's shell keeps them.

    cookie_list                     the bookies that have one
    cookie_get BOOKIE               its text
    cookie_create BOOKIE -cf FILE   register a cookie (a bookie's dataDir holds its own copy)
    cookie_update BOOKIE -cf FILE   replace the registered one
    cookie_delete BOOKIE [-f]       forget it (asks first; refused while the bookie is registered,
                                    unless -f)
    bookieformat --data-dir D [-d]  empty a stopped bookie's directories (asks first; -d: and forget
                                    its registered cookie, so that it joins again as a new bookie)

A cookie ties a bookie's id to its directories and instance: a bookie whose directories do not
match the registered cookie refuses to start, so these are for repairs (a bookie moved to new
disks, one decommissioned by hand).
"""

from __future__ import annotations

from bkcli.shell_support import ShellFailure, add_confirmation_arguments, confirm, lines

COMMANDS = ("cookie_list", "cookie_get", "cookie_create", "cookie_update", "cookie_delete", "bookieformat")


def add_parsers(command) -> None:
    """command(name, help) -> a subparser that already has the cluster's arguments."""
    command("cookie_list", "the bookies with a registered cookie")
    command("cookie_get", "print a bookie's registered cookie").add_argument("bookie", help="host:port")
    for name, verb in (("cookie_create", "register"), ("cookie_update", "replace")):
        parser = command(name, f"{verb} a bookie's cookie from a file (its text, as cookie_get prints it)")
        parser.add_argument("bookie", help="host:port")
        parser.add_argument("-cf", "--cookie-file", required=True, metavar="FILE")
    formatting = command("bookieformat", "empty a stopped bookie's journal, ledger and index directories (asks "
                                         "first)")
    formatting.add_argument("--data-dir", required=True, help="the bookie's dataDir")
    add_confirmation_arguments(formatting, with_non_interactive=True)
    formatting.add_argument("-d", "--deleteCookie", "--delete-cookie", action="store_true", dest="delete_cookie",
                            help="also forget its registered cookie")
    delete = command("cookie_delete", "forget a bookie's registered cookie (asks first)")
    delete.add_argument("bookie", help="host:port")
    add_confirmation_arguments(delete, force_help="without asking, even while the bookie is registered")


async def run(bk, args):
    from bkcore.metaops import Children, Create, Delete, Get, MetaCode, SetData
    name, bookie = args.shell_command, getattr(args, "bookie", None)
    if name == "bookieformat":
        return await _format_bookie(bk, args)
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
        await confirm(args, f"Are you sure you want to delete {bookie}'s cookie from the metadata store?")
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


async def _format_bookie(bk, args):
    """bookieformat: the directories of a stopped bookie emptied (its id read from its cookie)."""
    import os
    import shutil

    from bkcore.bookie.cookie import COOKIE_NAME, Cookie, CookieError
    from bkcore.metaops import Delete, MetaCode
    directories = [os.path.join(args.data_dir, name) for name in ("journal", "ledgers", "index")]
    cookie_file = os.path.join(args.data_dir, "journal", COOKIE_NAME)
    try:
        with open(cookie_file, encoding="utf-8") as file:
            bookie = Cookie.from_text(file.read(), path=cookie_file).bookie_id
    except (OSError, CookieError) as exc:
        raise ShellFailure(f"{args.data_dir} holds no readable bookie cookie ({cookie_file}: "
                           f"{getattr(exc, 'strerror', None) or exc}); give --data-dir the bookie's dataDir\n") from None
    if bookie in {*await bk.list_bookies(), *await bk.list_bookies(readonly=True)}:
        raise ShellFailure(f"{bookie} is registered (running): stop it first\n")
    await confirm(args, f"Are you sure to format bookie {bookie}'s data under {args.data_dir}?")
    for directory in directories:
        shutil.rmtree(directory, ignore_errors=True)
    text = f"formatted bookie {bookie}: {', '.join(directories)} emptied\n"
    if args.delete_cookie:
        result = await bk.store.execute(Delete(bk.layout.cookie_path(bookie)))
        if result.code not in (MetaCode.OK, MetaCode.NO_NODE):
            raise ShellFailure(text + f"its registered cookie could not be deleted ({result.code.name}); "
                                      f"bk shell cookie_delete {bookie}\n")
        text += f"its registered cookie is deleted: it joins again as a new bookie\n"
    else:
        text += (f"its registered cookie is kept: the bookie will not start on the empty directories until "
                 f"bk shell cookie_delete {bookie}\n")
    return text, {"bookie": bookie, "formatted": directories, "cookie_deleted": args.delete_cookie}
