"""Ledgers from Python: write, tail, recover. Run against `bk standalone` (the default URI) or
any cluster:  python examples/ledger_basics.py [METASTORE_URI]"""

import sys

import trio

import bkclient


async def main(uri: str) -> None:
    async with bkclient.connect(uri) as bk:
        # A ledger on 3 bookies; each entry on all 3; acknowledged once 2 have it on disk.
        ledger = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"secret")
        print(f"created ledger {ledger.ledger_id} on {', '.join(ledger.metadata.last_ensemble)}")

        # A reader that follows the ledger while it is written (no recovery: it does not fence).
        follower = await bk.open_ledger(ledger.ledger_id, password=b"secret", recovery=False)
        seen = []

        async def follow() -> None:
            async for entry_id, payload in follower.tail():
                seen.append(payload)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow)
            await ledger.add(b"hello")                                        # one at a time
            ids = await ledger.add_many([b"event %d" % i for i in range(99)])  # pipelined
            print(f"appended entries 0..{ids[-1]}; last add confirmed: {ledger.last_add_confirmed}")
            await ledger.close()
            with trio.fail_after(10):
                while len(seen) < 100:
                    await trio.sleep(0.01)
        print(f"the tailing reader saw {len(seen)} entries, the last {seen[-1]!r}")

        # Opening with recovery fences the ledger: its writer (if any) can add no more.
        reader = await bk.open_ledger(ledger.ledger_id, password=b"secret")
        first, last = await reader.read(0, 0), await reader.read(99, 99)
        print(f"recovered: closed={reader.is_closed}, entry 0 = {first[0]!r}, entry 99 = {last[0]!r}")
        await bk.delete_ledger(ledger.ledger_id)


if __name__ == "__main__":
    from bkcli.defaults import default_metastore_uri
    trio.run(main, sys.argv[1] if len(sys.argv) > 1 else default_metastore_uri())
