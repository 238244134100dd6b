"""The HTTP admin API's recovery and decommission over real TCP against an in-process cluster:
a lost bookie's ledgers copied onto others in the background (its entries read back from the
copies), its cookie deleted when asked, and the refusals before anything starts."""

import bkclient
from bkcore.metaops import Get, MetaCode
from inprocess_cluster import free_port
from test_http_admin import URI, call, closed_ledger, wait_until

RECOVER = "/api/v1/autorecovery/bookie"
DECOMMISSION = "/api/v1/autorecovery/decommission"


async def four_bookies(start_cluster):
    cluster = await start_cluster(URI, 0)
    for _ in range(4):
        await cluster.add_bookie(http_port=free_port(), gc_wait_time_s=3600.0)
    return cluster


async def ledger_on(bk, bookies, entries: int = 20):
    ledger = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=3, password=b"pw",
                                    bookies=[bookie.bookie_id for bookie in bookies])
    await ledger.add_many([b"entry %d" % index for index in range(entries)])
    return await ledger.close()


async def ensembles(port: int, ledger_id: int) -> list[list[str]]:
    status, metadata = await call(port, "GET", f"/api/v1/ledger/metadata?ledger_id={ledger_id}")
    assert status == 200
    return list(metadata[str(ledger_id)]["ensembles"].values())


async def finished_jobs(port: int, path: str) -> list[dict]:
    jobs = []

    async def finished() -> bool:
        jobs[:] = (await call(port, "GET", path))[1]
        return bool(jobs) and all(job["state"] != "running" for job in jobs)

    await wait_until(finished)
    return jobs


async def has_cookie(bk, bookie) -> bool:
    return (await bk.store.execute(Get(bk.layout.cookie_path(bookie.bookie_id)))).code is MetaCode.OK


async def test_recover_copies_a_lost_bookies_ledgers_onto_bookie_dest(start_cluster):
    cluster = await four_bookies(start_cluster)
    first, second, victim, spare = cluster.bookies
    port = first.server.http_port
    async with bkclient.connect(URI) as bk:
        ledger = await ledger_on(bk, [first, second, victim])
        await cluster.stop(victim)
        assert await call(port, "PUT", RECOVER, {"bookie_src": [victim.bookie_id], "bookie_dest": [spare.bookie_id],
                                                 "delete_cookie": True}) == (
            200, "Success send recovery request command.\n")
        (job,) = await finished_jobs(port, RECOVER)
        assert (job["state"], job["bookie_src"], job["bookie_dest"], job["failures"]) == (
            "done", [victim.bookie_id], [spare.bookie_id], [])
        assert (job["fragments_copied"], job["entries_copied"], job["cookies_deleted"]) == (1, 20, [victim.bookie_id])
        assert await ensembles(port, ledger.ledger_id) == [[first.bookie_id, second.bookie_id, spare.bookie_id]]
        assert not await has_cookie(bk, victim) and await has_cookie(bk, spare)
    # The copies are real: with the two first bookies gone too, the spare alone serves every entry.
    await cluster.stop(first)
    await cluster.stop(second)
    status, entries = await call(spare.server.http_port, "GET", f"/api/v1/ledger/read?ledger_id={ledger.ledger_id}")
    assert status == 200 and entries == {str(index): f"entry {index}" for index in range(20)}


async def test_a_recovery_with_nowhere_to_copy_fails_and_keeps_the_cookie(start_cluster):
    cluster = await four_bookies(start_cluster)
    first, second, victim, spare = cluster.bookies
    port = second.server.http_port
    async with bkclient.connect(URI) as bk:
        ledger = await ledger_on(bk, [first, second, victim])
        await cluster.stop(victim)
        await cluster.stop(spare)                   # (no writable bookie outside the ensemble is left)
        assert (await call(port, "PUT", RECOVER, {"bookie_src": victim.bookie_id, "delete_cookie": True}))[0] == 200
        (job,) = await finished_jobs(port, RECOVER)
        assert job["state"] == "failed" and job["cookies_deleted"] == []
        assert job["failures"] == [f"ledger {ledger.ledger_id}: no writable bookie outside "
                                   f"{[first.bookie_id, second.bookie_id, victim.bookie_id]}"]
        assert victim.bookie_id in (await ensembles(port, ledger.ledger_id))[0] and await has_cookie(bk, victim)


async def test_decommission_moves_a_stopped_bookies_data_and_forgets_it(start_cluster):
    cluster = await four_bookies(start_cluster)
    first, second, victim, spare = cluster.bookies
    port = spare.server.http_port
    async with bkclient.connect(URI) as bk:
        ledgers = [await ledger_on(bk, [first, second, victim]), await ledger_on(bk, [victim, second, spare], 5)]
        status, text = await call(port, "PUT", DECOMMISSION, {"bookie_src": victim.bookie_id})
        assert (status, text) == (400, f"{victim.bookie_id} is still registered: stop it before decommissioning it\n")
        await cluster.stop(victim)
        assert await call(port, "PUT", DECOMMISSION, {"bookie_src": victim.bookie_id, "delete_cookie": True}) == (
            200, f"Success send decommission Bookie command {victim.bookie_id}\n")
        (job,) = await finished_jobs(port, DECOMMISSION)
        assert (job["kind"], job["state"], job["fragments_copied"], job["entries_copied"]) == (
            "decommission", "done", 2, 25)
        for ledger in ledgers:
            assert all(victim.bookie_id not in ensemble for ensemble in await ensembles(port, ledger.ledger_id))
        assert not await has_cookie(bk, victim)
        assert await call(port, "GET", RECOVER) == (200, [])           # (each path lists its own jobs)


async def test_recovery_and_decommission_refuse_bad_requests_before_starting(start_cluster):
    cluster = await four_bookies(start_cluster)
    first, _, victim, _ = cluster.bookies
    port = first.server.http_port
    await cluster.stop(victim)
    for path, body, status, line in [
            (RECOVER, None, 400, 'bookie_src is required: a text or a list of them (in a JSON body: "bookie_src": '),
            (RECOVER, {"bookie_src": []}, 400, "bookie_src must be a text or a list of them"),
            (RECOVER, {"bookie_src": [7]}, 400, "bookie_src must be a text or a list of them"),
            (RECOVER, {"bookie_src": "bookie-seven"}, 400, "bookie_src must name bookies as host:port, not "
                                                          "'bookie-seven'\n"),
            (RECOVER, {"bookie_src": "127.0.0.1:1"}, 404, "127.0.0.1:1 is not a bookie of this cluster (no cookie at "),
            (RECOVER, {"bookie_src": victim.bookie_id, "bookie_dest": victim.bookie_id}, 400,
             f"bookie_dest names ['{victim.bookie_id}'], which bookie_src recovers from\n"),
            (RECOVER, {"bookie_src": victim.bookie_id, "bookie_dest": "127.0.0.1:1"}, 400,
             "bookie_dest 127.0.0.1:1 is not a writable bookie of this cluster; the writable ones: "),
            (RECOVER, {"bookie_src": victim.bookie_id, "delete_cookie": "soon"}, 400,
             'delete_cookie must be true or false, not "soon"\n'),
            (DECOMMISSION, None, 400, "bookie_src is required\n"),
            (DECOMMISSION, {"bookie_src": [victim.bookie_id]}, 400, "bookie_src must be text, not ["),
            (DECOMMISSION, {"bookie_src": "127.0.0.1:1"}, 404, "127.0.0.1:1 is not a bookie of this cluster")]:
        answer_status, text = await call(port, "PUT", path, body)
        assert answer_status == status and text.startswith(line) and text.count("\n") == 1, (body, text)
    assert await call(port, "GET", RECOVER) == (200, []) and await call(port, "GET", DECOMMISSION) == (200, [])
    assert (await call(port, "POST", RECOVER))[0] == 405
