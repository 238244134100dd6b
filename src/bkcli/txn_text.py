"""etcdctl's txn text, as `bk table txn` reads it (from stdin; with -i, prompted part by part):
three parts separated by blank lines, each one item a line.

    mod("visits") < "5"             compares: TARGET("KEY") OP "OPERAND"
    value("greeting") = "hello"         TARGET: value|val, version|ver, create|c, mod|m
                                        OP: =, !=, <, >; KEY and OPERAND in double quotes
                                        (JSON escapes) or backquotes
    put greeting "hello again"      success operations: put KEY VALUE, get KEY, del KEY
    get visits                          (words split as a shell would: quote what has spaces)

    put greeting hello              failure operations

The end of the input ends any part. Versions and revisions are the ones `bk table get` shows
(BookKeeper's: a key's first version is 0); `value("k") = ""` holds only for a missing key
(bkclient.table_txn). A line that does not parse refuses the whole txn, naming the line
(TxnSyntaxError, a UsageError: exit 2).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import Callable, Iterable

from bkclient.table_txn import TXN_OP_KINDS, TxnCompare, TxnOp
from bkcli.storage_cli import UsageError
from bkcore.table.commands import CompareResult, CompareTarget

PART_PROMPTS = ("compares:", "success requests (get, put, del):", "failure requests (get, put, del):")
_TARGETS = {"value": CompareTarget.VALUE, "val": CompareTarget.VALUE,
            "version": CompareTarget.VERSION, "ver": CompareTarget.VERSION,
            "create": CompareTarget.CREATE_REVISION, "c": CompareTarget.CREATE_REVISION,
            "mod": CompareTarget.MOD_REVISION, "m": CompareTarget.MOD_REVISION}
_QUOTED = r'"(?:[^"\\]|\\.)*"|`[^`]*`'
_COMPARE = re.compile(rf"^(?P<target>\w+)\(\s*(?P<key>{_QUOTED})\s*\)\s*(?P<op>!=|=|<|>)\s*(?P<operand>{_QUOTED})$")


class TxnSyntaxError(UsageError):
    def __init__(self, line_number: int, message: str) -> None:
        super().__init__(f"line {line_number}: {message}")


@dataclass(frozen=True, slots=True)
class TxnText:
    compares: tuple[TxnCompare, ...]
    success: tuple[TxnOp, ...]
    failure: tuple[TxnOp, ...]

    def keys(self) -> set[bytes]:
        return {item.key for item in (*self.compares, *self.success, *self.failure)}


def parse_txn(lines: Iterable[str], *, prompt: Callable[[str], None] | None = None) -> TxnText:
    """The txn in `lines`. With `prompt` (interactive), prompt(text) comes before each part and
    nothing after the third part's blank line is read; otherwise text after it is refused."""
    numbered = enumerate(lines, start=1)
    parts: list[list] = [[], [], []]
    for part, parse_line, prompt_text in zip(parts, (_compare, _op, _op), PART_PROMPTS):
        if prompt is not None:
            prompt(prompt_text)
        for number, line in numbered:
            if not line.strip():
                break
            part.append(parse_line(line.strip(), number))
    if prompt is None:
        for number, line in numbered:
            if line.strip():
                raise TxnSyntaxError(number, "text after the failure operations (a txn has three parts: compares, "
                                             "success and failure operations, separated by blank lines)")
    return TxnText(*(tuple(part) for part in parts))


def _compare(line: str, number: int) -> TxnCompare:
    match = _COMPARE.match(line)
    if match is None:
        raise TxnSyntaxError(number, f"malformed comparison {line!r}: expected TARGET(\"KEY\") OP \"OPERAND\", "
                                     f"e.g. value(\"k\") = \"v\"")
    name = match["target"]
    target = _TARGETS.get(name)
    if target is None:
        why = " (this table has no leases: put --ttl instead)" if name == "lease" else ""
        raise TxnSyntaxError(number, f"unknown compare target {name!r}{why}; one of {', '.join(_TARGETS)}")
    key, operand = _unquoted(match["key"], number), _unquoted(match["operand"], number)
    if target is CompareTarget.VALUE:
        return TxnCompare(target, key.encode(), CompareResult(match["op"]), operand.encode())
    try:
        return TxnCompare(target, key.encode(), CompareResult(match["op"]), int(operand))
    except ValueError:
        raise TxnSyntaxError(number, f"{name}(...) compares with a whole number, not {operand!r}") from None


def _unquoted(quoted: str, number: int) -> str:
    if quoted.startswith("`"):
        return quoted[1:-1]
    try:
        return json.loads(quoted)
    except json.JSONDecodeError:
        raise TxnSyntaxError(number, f"{quoted} is not a quoted string (JSON escapes, or backquotes)") from None


def _op(line: str, number: int) -> TxnOp:
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise TxnSyntaxError(number, f"malformed operation {line!r}: {exc}") from None
    kind, arguments = words[0], words[1:]
    wanted = {"put": 2, "get": 1, "del": 1}.get(kind)
    if wanted is None:
        raise TxnSyntaxError(number, f"unknown operation {kind!r}; one of {', '.join(TXN_OP_KINDS)}")
    if any(word.startswith("--") for word in arguments):
        raise TxnSyntaxError(number, f"options are not taken inside a txn: {line!r}")
    if len(arguments) != wanted:
        usage = "put KEY VALUE" if kind == "put" else f"{kind} KEY"
        raise TxnSyntaxError(number, f"malformed operation {line!r}: expected {usage}")
    return TxnOp(kind, arguments[0].encode(), arguments[1].encode() if kind == "put" else b"")
