"""What the `bk shell` command modules share: the failure a command raises when it ran but did
not do what it was asked (its text is printed, the exit status is 1), and text helpers."""

from __future__ import annotations


class ShellFailure(Exception):
    """A command that ran but did not achieve its purpose; the text says what is left."""


def lines(items) -> str:
    """One item per line."""
    return "".join(f"{item}\n" for item in items)
