"""CookieTest in spirit: a new bookie stamps its directories; a wiped, swapped, added or foreign
directory makes it refuse to start with a message that says why."""

import pytest

from bkcore.bookie.cookie import COOKIE_NAME, Cookie, CookieError, check_cookies

LEDGER_DIRS = ("ledgers0", "ledgers1")


def check(fs, *, bookie_id="bookie-1", journal_dir="journal", ledger_dirs=LEDGER_DIRS, instance="i-1"):
    return check_cookies(fs, bookie_id=bookie_id, journal_dir=journal_dir, ledger_dirs=ledger_dirs,
                         new_instance_id=instance)


def establish(fs):
    """A bookie that has run: cookies everywhere and data beside them."""
    cookie = check(fs)
    fs.append("journal/1.txn", b"journal data")
    for directory in LEDGER_DIRS:
        fs.append(f"{directory}/1.log", b"entry log data")
    return cookie


def wipe(fs, directory):
    for name in fs.list_dir(directory):
        fs.delete(f"{directory}/{name}")


def test_a_new_bookie_stamps_every_directory_and_restarts_cleanly(fs):
    first = establish(fs)
    assert all(fs.exists(f"{d}/{COOKIE_NAME}") for d in ("journal", *LEDGER_DIRS))
    assert check(fs, instance="ignored") == first


def test_a_wiped_ledger_directory_is_refused(fs):
    establish(fs)
    wipe(fs, "ledgers1")
    with pytest.raises(CookieError, match="ledgers1 has no cookie.*wiped"):
        check(fs)


def test_a_wiped_journal_directory_is_refused(fs):
    establish(fs)
    wipe(fs, "journal")
    with pytest.raises(CookieError, match="journal has no cookie"):
        check(fs)


def test_a_directory_from_another_bookie_is_refused(fs):
    establish(fs)
    check(fs, bookie_id="bookie-2", journal_dir="j2", ledger_dirs=("l2",), instance="i-2")
    fs.delete(f"ledgers1/{COOKIE_NAME}")
    fs.rename(f"l2/{COOKIE_NAME}", f"ledgers1/{COOKIE_NAME}")
    with pytest.raises(CookieError, match="belongs to bookie bookie-2"):
        check(fs)


def test_directories_of_another_instance_are_refused(fs):
    establish(fs)
    fs.delete(f"ledgers1/{COOKIE_NAME}")
    other = Cookie("bookie-1", "i-9", "journal", LEDGER_DIRS)
    fs.append(f"ledgers1/{COOKIE_NAME}", other.to_text().encode())
    with pytest.raises(CookieError, match="another instance"):
        check(fs)


def test_adding_a_ledger_directory_is_refused(fs):
    establish(fs)
    with pytest.raises(CookieError, match="ledgers2 has no cookie"):
        check(fs, ledger_dirs=(*LEDGER_DIRS, "ledgers2"))


def test_removing_a_ledger_directory_changes_the_set(fs):
    establish(fs)
    with pytest.raises(CookieError, match="directory set changed"):
        check(fs, ledger_dirs=("ledgers0",))


def test_data_without_any_cookie_is_refused(fs):
    fs.makedirs("ledgers0")
    fs.append("ledgers0/1.log", b"old data")
    with pytest.raises(CookieError, match="hold bookie data but no cookie"):
        check(fs)


def test_an_unreadable_cookie_is_refused(fs):
    establish(fs)
    fs.delete(f"ledgers0/{COOKIE_NAME}")
    fs.append(f"ledgers0/{COOKIE_NAME}", b"garbage")
    with pytest.raises(CookieError, match="unreadable cookie"):
        check(fs)


def test_a_first_start_that_crashed_while_stamping_completes_it(fs):
    check(fs)
    for directory in LEDGER_DIRS:
        fs.delete(f"{directory}/{COOKIE_NAME}")   # as if the crash came after the journal's cookie
    cookie = check(fs, instance="i-other")
    assert cookie.instance_id == "i-1"
    assert all(fs.exists(f"{d}/{COOKIE_NAME}") for d in LEDGER_DIRS)


def test_a_bookie_whose_every_directory_was_wiped_is_refused(fs):
    registered = establish(fs)
    for directory in ("journal", *LEDGER_DIRS):
        wipe(fs, directory)
    with pytest.raises(CookieError, match="every directory was wiped"):
        check_cookies(fs, bookie_id="bookie-1", journal_dir="journal", ledger_dirs=LEDGER_DIRS,
                      new_instance_id="i-2", registered=registered)
    # Without the metastore's copy the same empty directories look like a new bookie.
    assert check(fs, instance="i-2").instance_id == "i-2"


def test_directories_from_an_earlier_life_of_the_bookie_id_are_refused(fs):
    establish(fs)
    registered = Cookie("bookie-1", "i-newer", "journal", LEDGER_DIRS)
    with pytest.raises(CookieError, match="metastore registered instance i-newer"):
        check_cookies(fs, bookie_id="bookie-1", journal_dir="journal", ledger_dirs=LEDGER_DIRS,
                      new_instance_id="x", registered=registered)


def test_a_matching_registration_passes(fs):
    registered = establish(fs)
    assert check_cookies(fs, bookie_id="bookie-1", journal_dir="journal", ledger_dirs=LEDGER_DIRS,
                         new_instance_id="x", registered=registered) == registered
