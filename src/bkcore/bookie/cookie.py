"""Cookies: the identity stamp in every bookie directory (BookKeeper's Cookie).

Each of the journal dir and the ledger dirs holds a small text file COOKIE:

    format: 1
    bookie_id: bookie-3
    instance_id: 5f0c...
    journal_dir: journal
    ledger_dirs: ledgers0,ledgers1
    checksum: 1a2b3c4d

On start every directory must carry the same cookie, naming this bookie and exactly the
configured directories. A brand-new bookie (no data anywhere) writes them, and so does a first
start that crashed half way through writing them.
Anything else stops the start with a message that says what happened and what to do:
a directory without a cookie beside ones with it (wiped, or newly added), a cookie of another
bookie or instance (a swapped disk), a changed directory set, data without any cookie.
The cookie is also registered in the metastore (`registered`, passed in by the driver): that copy
catches what the directories alone cannot — every directory wiped at once, or directories from
an earlier life of this bookie id.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import crc32c

from bkcore.bookie.fs import FileSystem, write_atomically

COOKIE_NAME = "COOKIE"
COOKIE_FORMAT = 1
COOKIE_READ_ATTEMPT_COUNT_MAX = 8


class CookieError(Exception):
    """The bookie's directories do not belong together; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class Cookie:
    bookie_id: str
    instance_id: str
    journal_dir: str
    ledger_dirs: tuple[str, ...]

    def to_text(self) -> str:
        body = (f"format: {COOKIE_FORMAT}\nbookie_id: {self.bookie_id}\ninstance_id: {self.instance_id}\n"
                f"journal_dir: {self.journal_dir}\nledger_dirs: {','.join(self.ledger_dirs)}\n")
        return body + f"checksum: {crc32c.crc32c(body.encode()):08x}\n"

    @staticmethod
    def is_intact(data: bytes) -> bool:
        body, separator, last = data.rstrip(b"\n").rpartition(b"\nchecksum: ")
        try:
            return bool(separator) and int(last, 16) == crc32c.crc32c(body + b"\n")
        except ValueError:
            return False

    @classmethod
    def from_text(cls, text: str, *, path: str) -> Cookie:
        return _parse_cookie(text, path)


# A bookie parses the same few cookie texts at every start (each directory's, and the
# metastore's copy): parsing is a pure function of the text (and the path its errors name), and
# a Cookie is immutable, so successful parses are remembered. Errors are raised anew each time.
@functools.lru_cache(maxsize=64)
def _parse_cookie(text: str, path: str) -> Cookie:
    if not Cookie.is_intact(text.encode("utf-8", "replace")):
        raise CookieError(f"{path}: unreadable cookie (checksum mismatch); restore it from another "
                          f"directory of this bookie or rebuild the bookie")
    fields = {}
    for line in text.splitlines():
        key, separator, value = line.partition(": ")
        if separator:
            fields[key] = value
    try:
        if int(fields["format"]) != COOKIE_FORMAT:
            raise CookieError(f"{path}: cookie format {fields['format']} is not {COOKIE_FORMAT}")
        return Cookie(fields["bookie_id"], fields["instance_id"], fields["journal_dir"],
                      tuple(d for d in fields["ledger_dirs"].split(",") if d))
    except (KeyError, ValueError):
        raise CookieError(f"{path}: unreadable cookie; restore it from another directory of this "
                          f"bookie or rebuild the bookie") from None


def _read(fs: FileSystem, directory: str) -> Cookie | None:
    path = f"{directory}/{COOKIE_NAME}"
    if not fs.exists(path):
        return None
    for _ in range(COOKIE_READ_ATTEMPT_COUNT_MAX):   # a read that fails its checksum is read again
        data = fs.read(path)
        if Cookie.is_intact(data):
            break
    return Cookie.from_text(data.decode("utf-8", "replace"), path=path)


def _has_data(fs: FileSystem, directory: str) -> bool:
    return any(name != COOKIE_NAME and not name.endswith(".tmp") for name in fs.list_dir(directory))


def check_cookies(fs: FileSystem, *, bookie_id: str, journal_dir: str, ledger_dirs: tuple[str, ...],
                  new_instance_id: str, registered: Cookie | None = None) -> Cookie:
    """Verify the cookies of every directory against each other and against the metastore's
    copy (`registered`), or stamp a brand-new bookie. Raises CookieError. The driver registers
    the returned cookie in the metastore when it had none."""
    if registered is not None and all(_read(fs, d) is None for d in (journal_dir, *ledger_dirs)):
        # The metastore copy is written only after every directory has its cookie.
        raise CookieError(f"bookie {bookie_id} is registered (instance {registered.instance_id}) but none of "
                          f"its directories has a cookie: every directory was wiped and its data is gone — "
                          f"decommission the bookie (re-replicating its ledgers) before starting it empty")
    cookie = _check_directories(fs, bookie_id=bookie_id, journal_dir=journal_dir, ledger_dirs=ledger_dirs,
                                new_instance_id=new_instance_id)
    if registered is not None and cookie != registered:
        raise CookieError(f"bookie {bookie_id}'s directories say instance {cookie.instance_id} "
                          f"(journal {cookie.journal_dir}, ledgers {','.join(cookie.ledger_dirs)}) but the "
                          f"metastore registered instance {registered.instance_id} (journal "
                          f"{registered.journal_dir}, ledgers {','.join(registered.ledger_dirs)}): directories "
                          f"from another life of this bookie id were mounted")
    return cookie


def _check_directories(fs: FileSystem, *, bookie_id: str, journal_dir: str, ledger_dirs: tuple[str, ...],
                       new_instance_id: str) -> Cookie:
    directories = (journal_dir, *ledger_dirs)
    for directory in directories:
        fs.makedirs(directory)
    found = {directory: _read(fs, directory) for directory in directories}
    present = {d: c for d, c in found.items() if c is not None}
    with_data = [d for d in directories if _has_data(fs, d)]
    if not with_data and len(present) < len(directories):
        # A brand-new bookie, or a first start that crashed while stamping (no data is written
        # before every directory has its cookie, so nothing can have been lost): stamp them all.
        instance_id = next(iter(present.values())).instance_id if present else new_instance_id
        cookie = Cookie(bookie_id, instance_id, journal_dir, tuple(ledger_dirs))
        if all(c == cookie for c in present.values()):
            for directory in directories:
                if found[directory] is None:
                    write_atomically(fs, f"{directory}/{COOKIE_NAME}", cookie.to_text().encode())
            return cookie
    if not present:
        raise CookieError(f"{', '.join(with_data)} hold bookie data but no cookie: these directories "
                          f"were not made by this bookie or lost their cookies; move the data away or "
                          f"restore the cookies")
    reference_dir, reference = next(iter(present.items()))
    for directory, cookie in found.items():
        if cookie is None:
            raise CookieError(f"{directory} has no cookie but {reference_dir} does: it was wiped, or added to "
                              f"the configuration; a wiped directory lost its data — decommission and "
                              f"rebuild this bookie (or remove the new directory from the configuration)")
    for directory, cookie in found.items():
        if cookie.bookie_id != bookie_id:
            raise CookieError(f"{directory} belongs to bookie {cookie.bookie_id}, this is {bookie_id}: "
                              f"a disk from another bookie was mounted here")
        if cookie.instance_id != reference.instance_id:
            raise CookieError(f"{directory} belongs to another instance of {bookie_id} ({cookie.instance_id}, "
                              f"{reference_dir} has {reference.instance_id}): directories were swapped")
        if (cookie.journal_dir, cookie.ledger_dirs) != (journal_dir, tuple(ledger_dirs)):
            raise CookieError(f"the directory set changed: {directory}'s cookie lists journal "
                              f"{cookie.journal_dir} and ledgers {','.join(cookie.ledger_dirs)}, the "
                              f"configuration lists {journal_dir} and {','.join(ledger_dirs)}")
    return reference
