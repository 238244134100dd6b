"""The blocking API for scripts:  python examples/sync_script.py [METASTORE_URI]"""

import sys

from bkclient.sync import connect


def main(uri: str) -> None:
    with connect(uri) as bk:
        print("bookies:", ", ".join(bk.list_bookies()))
        ledger = bk.create_ledger(password=b"pw")
        for line in ("one", "two", "three"):
            ledger.add(line.encode())
        ledger.close()
        reader = bk.open_ledger(ledger.ledger_id, password=b"pw")
        print([payload.decode() for payload in reader.read(0, reader.last_add_confirmed)])
        bk.delete_ledger(ledger.ledger_id)


if __name__ == "__main__":
    from bkcli.defaults import default_metastore_uri
    main(sys.argv[1] if len(sys.argv) > 1 else default_metastore_uri())
