"""Java .properties files, the format of BookKeeper's bk_server.conf.

    # a comment (or !)
    bookiePort=3181
    journalDirectories : /data/bk/journal
    zkServers localhost:2181
    longValue = first part \\
                second part

A line is `key=value`, `key: value` or `key value`; a backslash at the end of a line continues it
on the next (whose leading blanks are dropped); escapes \\t \\n \\r \\f \\uXXXX and \\<char> (that
character) hold in keys and values. Later lines win over earlier ones with the same key.
"""

from __future__ import annotations

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_SEPARATORS = "=: \t\f"


def parse_properties(text: str) -> dict[str, str]:
    properties: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split(line)
        properties[key] = value
    return properties


def _logical_lines(text: str):
    pending = ""
    for physical in text.splitlines():
        line = physical.lstrip(" \t\f")
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:                      # an unescaped backslash ends it: the next line goes on
            pending += line[:-1]
            continue
        yield pending + line
        pending = ""
    if pending:
        yield pending


def _split(line: str) -> tuple[str, str]:
    index, size = 0, len(line)
    while index < size and line[index] not in _SEPARATORS:
        index += 2 if line[index] == "\\" else 1
    key = line[:index]
    while index < size and line[index] in " \t\f":
        index += 1
    if index < size and line[index] in "=:":
        index += 1
        while index < size and line[index] in " \t\f":
            index += 1
    return _unescape(key), _unescape(line[index:])


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out, index = [], 0
    while index < len(text):
        char = text[index]
        if char != "\\" or index + 1 == len(text):
            out.append(char)
            index += 1
            continue
        escaped = text[index + 1]
        if escaped == "u" and len(text) >= index + 6:
            try:
                out.append(chr(int(text[index + 2:index + 6], 16)))
                index += 6
                continue
            except ValueError:
                pass
        out.append(_ESCAPES.get(escaped, escaped))
        index += 2
    return "".join(out)
