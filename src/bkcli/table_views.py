"""How `bk table` shows what the table service answered: each answer as a line of text and as
a JSON-ready document, one function per kind of answer, for every command that prints one
(get, range, put, del, incr, watch, and a txn's operations).

Keys and values are shown as UTF-8 text (bytes that are not UTF-8 as backslash escapes); a
counter's value is its number. Versions are BookKeeper's (a key's first version is 0); a
revision is the key's mod revision.
"""

from __future__ import annotations

NO_SUCH_KEY = "(no such key)"


def text_of(data: bytes) -> str:
    return data.decode("utf-8", "backslashreplace")


def kv_text(kv, *, keys_only: bool = False) -> str:
    """`key = value  (version V, revision R)`; "(no such key)" for None; the key alone with
    keys_only."""
    if kv is None:
        return NO_SUCH_KEY
    if keys_only:
        return text_of(kv.key)
    return f"{text_of(kv.key)} = {_value(kv.is_number, kv.number_value, kv.value)}  (version {kv.version}, " \
           f"revision {kv.mod_revision})"


def kv_document(kv, *, keys_only: bool = False) -> dict | None:
    if kv is None:
        return None
    document = {"key": text_of(kv.key)}
    if not keys_only:
        document.update(value=_value(kv.is_number, kv.number_value, kv.value), is_number=kv.is_number)
    document.update(version=kv.version, create_revision=kv.create_revision, mod_revision=kv.mod_revision,
                    expire_time_ms=kv.expire_time or None)
    return document


def _value(is_number: bool, number: int, value: bytes) -> int | str:
    return number if is_number else text_of(value)


def kvs_view(kvs: list, *, more: bool = False, keys_only: bool = False) -> tuple[dict, list[str]]:
    """A range's keys: one line each; {"kvs", "count", "more"}."""
    return ({"kvs": [kv_document(kv, keys_only=keys_only) for kv in kvs], "count": len(kvs), "more": more},
            [kv_text(kv, keys_only=keys_only) for kv in kvs])


def count_view(count: int) -> tuple[dict, str]:
    return {"count": count}, str(count)


def put_view(key: bytes, ttl_s: int = 0) -> tuple[dict, str]:
    expiry = f" (expires in {ttl_s} s)" if ttl_s else ""
    return {"key": text_of(key), "put": True, "ttl_s": ttl_s or None}, f"put {text_of(key)}{expiry}"


def deleted_view(count: int) -> tuple[dict, str]:
    return {"deleted": count}, f"deleted {count} key(s)"


def total_view(key: bytes, total: int) -> tuple[dict, str]:
    return {"key": text_of(key), "total": total}, f"{text_of(key)} = {total}"


def event_view(event: dict) -> tuple[dict, str]:
    """A watch's change: `key = value  (version V, revision R)` or `key deleted  (revision R)`."""
    key = text_of(event["key"])
    if event["type"] == "delete":
        return {"type": "delete", "key": key, "revision": event["revision"]}, \
            f"{key} deleted  (revision {event['revision']})"
    value = _value(event["is_number"], event["number"], event["value"])
    return ({"type": "put", "key": key, "value": value, "is_number": event["is_number"], "version": event["version"],
             "revision": event["revision"]},
            f"{key} = {value}  (version {event['version']}, revision {event['revision']})")


def txn_view(response, ops: tuple, status_name) -> tuple[dict, list[str], bool]:
    """etcdctl's layout: SUCCESS or FAILURE, then each operation's result after a blank line
    (put: as `bk table put`, get: the key or "(no such key)", del: the count). Returns the
    document, the lines, and whether the server refused an operation (its status_name(code)
    shown in its place)."""
    lines = ["SUCCESS" if response.succeeded else "FAILURE"]
    documents = []
    any_refused = False
    for op, result in zip(ops, response.responses):
        answer = getattr(result, result.WhichOneof("response"))
        if answer.header.code:
            any_refused = True
            document, text = ({"op": op.kind, "key": text_of(op.key), "refused": status_name(answer.header.code)},
                              f"{op.kind} {text_of(op.key)} refused ({status_name(answer.header.code)})")
        elif op.kind == "put":
            document, text = put_view(op.key)
        elif op.kind == "get":
            kv = answer.kvs[0] if answer.kvs else None
            document, text = {"kv": kv_document(kv)}, kv_text(kv)
        else:
            document, text = deleted_view(answer.deleted)
        documents.append({"op": op.kind, **document})
        lines += ["", text]
    return {"succeeded": response.succeeded, "responses": documents}, lines, any_refused
