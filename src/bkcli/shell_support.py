"""What the `bk shell` command modules share: the failure a command raises when it ran but did
not do what it was asked (its text is printed, the exit status is 1), text helpers, and the
one confirmation every destructive command asks for.

Confirmation, as BookKeeper's IOUtils.confirmPrompt: "<question> (Y or N) " until the answer is
y/yes or n/no. Here it is asked only on a terminal (stdin), after the command's own checks and
before it changes anything; -f (--force) skips it; with no terminal and no -f the command
refuses in one line that names -f (a script never hangs on a question nobody sees). Commands
that take BookKeeper's -n (--nonInteractive) never ask: -n without -f refuses, -n -f goes ahead,
as BookKeeper's format commands do. Unlike BookKeeper's, -f alone never asks either (its meaning
in every other command here).
"""

from __future__ import annotations

import sys

from bkcli.progress import is_terminal

ANSWER_ATTEMPT_COUNT_MAX = 5       # unreadable answers before giving up (the input is a person's)


class ShellFailure(Exception):
    """A command that ran but did not achieve its purpose; the text says what is left. A
    command that found problems it was asked to look for gives its findings as `result`
    ((text, data), as a handler returns them): they are printed as a success's would be, and
    the exit status is still 1."""

    def __init__(self, text: str, *, result: tuple[str, object] | None = None) -> None:
        super().__init__(text)
        self.result = result


def lines(items) -> str:
    """One item per line."""
    return "".join(f"{item}\n" for item in items)


def add_confirmation_arguments(parser, *, force_help: str = "do it without asking",
                               with_non_interactive: bool = False) -> None:
    """-f, and BookKeeper's -n for the commands that have it."""
    parser.add_argument("-f", "--force", action="store_true", help=force_help)
    if with_non_interactive:
        parser.add_argument("-n", "--nonInteractive", "--non-interactive", action="store_true",
                            dest="non_interactive", help="ask nothing: without -f, do nothing")


async def confirm(args, question: str) -> None:
    """Return when the user confirmed `question` (or gave -f); raise ShellFailure otherwise.
    The answer is read in a worker thread, so the command's metastore session lives on while a
    person thinks."""
    import trio
    if args.force:
        return
    if getattr(args, "non_interactive", False):
        raise ShellFailure(f"{question} -n asks nothing, so nothing was done: give -f as well to do it\n")
    if not is_terminal(sys.stdin):
        raise ShellFailure(f"{question} There is no terminal to ask on: give -f to do it\n")
    if not await trio.to_thread.run_sync(_ask, question, sys.stdin, sys.stderr, abandon_on_cancel=True):
        raise ShellFailure("not confirmed; nothing was done\n")


def _ask(question: str, answers, out) -> bool:
    """BookKeeper's confirmPrompt: True for y/yes, False for n/no, an end of input or too many
    answers that are neither."""
    for _ in range(ANSWER_ATTEMPT_COUNT_MAX):
        out.write(f"{question} (Y or N) ")
        out.flush()
        try:
            line = answers.readline()
        except OSError:             # the terminal went away (a pty's other end closed)
            line = ""
        if not line:
            out.write("\n")
            return False
        answer = line.strip().lower()
        if answer in ("y", "yes"):
            return True
        if answer in ("n", "no"):
            return False
        out.write(f"Invalid input: {answer}\n")
    return False
