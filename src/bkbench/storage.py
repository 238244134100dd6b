"""`bk bench table` and `bk bench stream`: stream storage on a local multi-process cluster (a
raft-lite metastore, bookies with journal fdatasync, and for tables the gRPC server process).

    table   N client threads, each with its own gRPC channel: puts of distinct keys, gets of
            existing keys, increments of shared counters (ops/s, p50/p99 latency); then the
            delay from sending a put to a watcher seeing it (p50/p99), and one put and one get
            at a time (their p50/p99: the floor under any load); each phase also reports
            the CPU the client process and the server process spent per operation. --ceiling
            adds the same put/get load on dict-backed gRPC servers (bkbench.table_ceiling): what
            Python gRPC itself allows here
    stream  one writer appending records through the library (several write_many batches in
            flight), then a reader reading them all back from the start (records/s)
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import threading
import time

from bkbench import announce
from bkbench.journal import MIB, percentile


def _cluster(args, *, with_stream_storage: bool, servers: int = 1):
    from bklocal.processes import free_ports
    from bklocal.standalone import StandaloneCluster
    root = tempfile.mkdtemp(dir=args.dir, prefix="bench-storage-")
    cluster = StandaloneCluster.on_free_ports(root, bookie_count=args.bookies, metastore_count=1,
                                              with_stream_storage=with_stream_storage,
                                              stream_storage_server_count=servers,
                                              http_ports=free_ports(args.bookies))
    return root, cluster


# What the bookies' /metrics say about a phase, summed over them: entries added, journal
# fdatasyncs, explicit LAC writes (sample name and labels: bktransports.bookie_metrics).
BOOKIE_COUNTERS = {"entries": ("bookkeeper_server_ADD_ENTRY_REQUEST_count", {"success": "true"}),
                   "journal_syncs": ("bookie_journal_JOURNAL_SYNC_count", {"success": "true"}),
                   "lac_writes": ("bookie_lac_writes_total", {})}


def _bookie_counters(cluster) -> dict[str, int] | None:
    """BOOKIE_COUNTERS so far, summed over the cluster's bookies; None if one cannot be read
    (their HTTP admin ports ask for the cluster's secret when the bookies have one)."""
    from bktransports.http_admin_client import admin_request
    from bktransports.metrics import read_samples, sample_value
    secret = str(cluster.bookie_extra.get("bookieAuthSecret", "")).encode()
    totals = dict.fromkeys(BOOKIE_COUNTERS, 0)
    for port in cluster.http_ports:
        try:
            status, text = admin_request(f"http://127.0.0.1:{port}/metrics", auth_secret=secret)
        except OSError:
            return None
        if status != 200:
            return None
        samples = read_samples(text)
        for key, (name, labels) in BOOKIE_COUNTERS.items():
            totals[key] += int(sample_value(samples, name, **labels) or 0)
    return totals


def _per_replica_per_op(before: dict[str, int] | None, after: dict[str, int] | None, replicas: int,
                        ops: int) -> dict:
    """{"bookie_<counter>_per_op": ...}: each bookie's share of a counter's growth per operation."""
    if before is None or after is None or not ops:
        return {}
    return {f"bookie_{key}_per_op": round((after[key] - before[key]) / replicas / ops, 3) for key in BOOKIE_COUNTERS}


def _summary(latencies: list[float], elapsed: float, errors: int) -> dict:
    return {"ops": len(latencies), "ops_per_second": round(len(latencies) / elapsed) if elapsed else 0,
            "latency_p50_ms": round(percentile(latencies, 0.5) * 1e3, 3) if latencies else None,
            "latency_p99_ms": round(percentile(latencies, 0.99) * 1e3, 3) if latencies else None,
            "errors": errors}


def _run_clients(address: str, args, name: str, value: bytes, *, keys_per_client: int = 1,
                 processes: dict[str, list[int]] | None = None, clients=None) -> dict:
    """One phase: every client does operation `name` until the time is up (in threads here, or
    in the client processes `clients`); also the CPU microseconds per operation of the client
    side and of each named group of `processes` (their pids), measured from the moment every
    client is connected (setting up is not counted)."""
    from bkbench.client_processes import operation, run_client_threads
    from bkbench.cpu_usage import CpuMeter
    groups = dict(processes or {})
    if clients is not None:
        groups["client_processes"] = clients.pids
    meter = CpuMeter(groups)
    if clients is None:
        latencies, errors, elapsed = run_client_threads(address, 0, args.clients, args.seconds,
                                                        operation(name, value, keys_per_client),
                                                        before_start=meter.restart)
    else:
        latencies, errors, elapsed = clients.run(address, args.clients, args.seconds, name, value, keys_per_client,
                                                 before_start=meter.restart)
    summary = _summary(latencies, elapsed, errors)
    summary.update(meter.per_operation(summary["ops"], "op"))
    return summary


def _watch_latency(address: str, samples: int = 300) -> dict:
    from bkclient.storage_client import StorageClient
    delays: list[float] = []
    put_at: dict[bytes, float] = {}
    ready = threading.Event()

    def watch() -> None:
        with StorageClient(address) as storage:
            events = storage.table("default", "bench").watch(b"watched")
            ready.set()
            for event in events:
                seen = time.perf_counter()
                if event["value"] in put_at:
                    delays.append(seen - put_at[event["value"]])
                if len(delays) >= samples:
                    return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    ready.wait()
    time.sleep(0.5)
    with StorageClient(address) as storage:
        table = storage.table("default", "bench")
        for i in range(samples):
            value = b"%d" % i
            put_at[value] = time.perf_counter()     # the watcher may see it before put() returns
            table.put(b"watched", value)
            time.sleep(0.005)
    watcher.join(30)
    return _watch_summary(delays)


def _watch_summary(delays: list[float]) -> dict:
    def ms(fraction: float) -> float | None:
        return round(percentile(delays, fraction) * 1e3, 3) if delays else None
    return {"events": len(delays), "measured_from": "put sent", "watch_latency_p50_ms": ms(0.5),
            "watch_latency_p99_ms": ms(0.99)}


def bench_table(args) -> int:
    from bkclient.storage_client import StorageClient
    from bkbench.client_processes import ClientProcesses
    root, cluster = _cluster(args, with_stream_storage=True, servers=args.servers)
    value = os.urandom(args.value_size)
    clients = ClientProcesses(args.client_processes) if args.client_processes > 1 else None
    try:
        try:
            announce("starting the cluster")
            cluster.start(log=lambda line: None)
            address = f"127.0.0.1:{cluster.stream_storage_port}"
            with StorageClient(address) as storage:
                storage.create_stream("default", "bench", ranges=args.ranges)
                table = storage.table("default", "bench")
                for index in range(16 * (args.ranges or 4)):        # open every range before timing
                    table.put(b"warm-%d" % index, value)
            processes = {"server": [server.process.pid for server in cluster.stream_storage_servers],
                         "bookies": [bookie.process.pid for bookie in cluster.bookies],
                         "metastore": [node.process.pid for node in cluster.metastore_nodes]}
            counted = _bookie_counters(cluster)
            announce("puts")
            puts = _run_clients(address, args, "put", value, processes=processes, clients=clients)
            puts.update(_per_replica_per_op(counted, _bookie_counters(cluster), args.bookies, puts["ops"]))
            announce("gets")
            gets = _gets_of_puts(address, args, value, puts, processes, clients)
            announce("increments")
            increments = _run_clients(address, args, "increment", value, processes=processes, clients=clients)
            announce("watch latency")
            watch = _watch_latency(address)
            watch["asyncio_client"] = _aio_watch_latency(address)
            announce("one call at a time")
            one_at_a_time = _aio_one_at_a_time(address)
            cluster.stop()                  # (the disk to itself for the raw loop)
            announce("the disk's fdatasync floor")
            puts.update(_fdatasync_floor(root, puts, args.bookies))
        finally:
            cluster.stop()
            shutil.rmtree(root, ignore_errors=True)
        if args.ceiling:
            announce("dict-backed gRPC ceilings")
        ceiling = {"ceiling": _ceiling(args, value, clients)} if args.ceiling else {}
    finally:
        if clients is not None:
            clients.close()
    if args.peers:
        announce("etcd")
    peers = {"etcd": _in_fresh_process(_etcd_table, args.seconds, args.clients, args.dir, value)} if args.peers else {}
    if peers and "put" in peers["etcd"]:
        etcd_watch_ms = peers["etcd"]["watch"]["watch_latency_p50_ms"]
        def over_etcd(ms: float | None) -> float | None:
            return round(ms / etcd_watch_ms, 2) if etcd_watch_ms and ms else None
        peers["ratios"] = {"puts_over_etcd": round(puts["ops_per_second"] / peers["etcd"]["put"]["ops_per_second"], 2),
                           "gets_over_etcd": round(gets["ops_per_second"] / peers["etcd"]["get"]["ops_per_second"], 2),
                           "watch_p50_over_etcd": over_etcd(watch["watch_latency_p50_ms"]),
                           # (both measured from one asyncio loop through grpc.aio)
                           "watch_p50_over_etcd_same_client_kind":
                               over_etcd(watch["asyncio_client"]["watch_latency_p50_ms"]),
                           **{f"one_at_a_time_{name}_p50_over_etcd":
                              round(one_at_a_time[f"{name}_p50_ms"] / peers["etcd"]["one_at_a_time"][f"{name}_p50_ms"], 2)
                              for name in ("put", "get")}}
    print(json.dumps({"benchmark": "table", "servers": args.servers, "clients": args.clients,
                      "client_processes": args.client_processes,
                      "value_size": args.value_size, "ranges": args.ranges or "default",
                      "bookies": args.bookies, "put": puts, "get": gets, "increment": increments, "watch": watch,
                      "one_at_a_time": one_at_a_time,
                      **ceiling,
                      **({"peers": peers} if peers else {}),
                      "targets": {"puts_per_second": 20_000, "gets_per_second": 50_000, "watch_latency_p50_ms": 2}},
                     indent=2))
    return 0


def _fdatasync_floor(directory: str, puts: dict, bookies: int) -> dict:
    """What the bookies' journal fdatasyncs alone cost per put: a write+fdatasync loop on the
    same disk gives the CPU of one (mostly the kernel's), times the syncs the bookies did per
    put. No bookie spends less per put than this, whatever its code, unless more puts share
    a sync."""
    from bkbench.journal import raw_fdatasync
    syncs_per_put = puts.get("bookie_journal_syncs_per_op")
    if syncs_per_put is None:
        return {}
    raw = raw_fdatasync(directory, 2.0)
    return {"raw_write_and_sync_cpu_us": raw["cpu_us_per_write_and_sync"],
            "bookies_fdatasync_cpu_us_per_op": round(syncs_per_put * bookies * raw["cpu_us_per_write_and_sync"], 1)}


def _puts_then_gets(address: str, args, value: bytes, processes: dict[str, list[int]],
                    clients=None) -> tuple[dict, dict]:
    """Puts of distinct keys, then gets of keys the puts wrote."""
    puts = _run_clients(address, args, "put", value, processes=processes, clients=clients)
    return puts, _gets_of_puts(address, args, value, puts, processes, clients)


def _gets_of_puts(address: str, args, value: bytes, puts: dict, processes: dict[str, list[int]],
                  clients=None) -> dict:
    """Gets of keys the put phase `puts` wrote."""
    per_client = max(1, puts["ops"] // args.clients)
    return _run_clients(address, args, "get", value, keys_per_client=per_client, processes=processes,
                        clients=clients)


def _ceiling(args, value: bytes, clients=None) -> dict:
    """The put/get load on each kind of dict-backed server (see bkbench.table_ceiling)."""
    from bkbench.table_ceiling import CEILING_KINDS, CeilingServer
    results = {}
    for kind in CEILING_KINDS:
        with CeilingServer(kind) as server:
            puts, gets = _puts_then_gets(server.address, args, value, {"server": [server.pid]}, clients)
            results[kind] = {"put": puts, "get": gets}
    return results


def _in_fresh_process(function, *args):
    """Run function(*args) in a new interpreter: aetcd's and BookKeeper's generated protos both
    define kv.proto, which one process's protobuf registry cannot hold twice."""
    import multiprocessing
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(function, args)


def _etcd_table(seconds: float, clients: int, directory: str | None, value: bytes) -> dict:
    """etcd (3 members, from bkbench.peers) under the same load: puts of distinct keys, then gets;
    each phase also reports the CPU the members spent per operation, summed (etcd_cpu_us_per_op:
    beside the table service's server and bookies, what a peer spends on the same replicated,
    fsync'd put)."""
    import asyncio

    from bkbench.cpu_usage import CpuMeter
    from bkbench.peers import PEERS, etcd_cluster, skip_reason
    members: list[int] = []
    etcd = next(peer for peer in PEERS if peer.name == "etcd")
    reason = skip_reason(etcd)
    if reason is not None:
        return {"skipped": reason}

    async def measure(leader_url: str) -> dict:
        import aetcd
        host, port = leader_url.removeprefix("http://").rsplit(":", 1)
        async with aetcd.Client(host=host, port=int(port)) as client:
            async def phase(operation) -> dict:
                latencies: list[float] = []
                meter = CpuMeter({"etcd": members})
                began = time.perf_counter()

                async def worker(index: int) -> None:
                    n = 0
                    while (now := time.perf_counter()) < began + seconds:
                        await operation(index, n)
                        latencies.append(time.perf_counter() - now)
                        n += 1
                await asyncio.gather(*(worker(i) for i in range(clients)))
                summary = _summary(latencies, time.perf_counter() - began, 0)
                summary.update(meter.per_operation(summary["ops"], "op"))
                return summary
            await client.put(b"warm", value)
            put = await phase(lambda i, n: client.put(b"key-%d-%d" % (i, n), value))
            written = put["ops"] // clients
            get = await phase(lambda i, n: client.get(b"key-%d-%d" % (i, random.randrange(max(1, written)))))
            watch = await _etcd_watch_latency(client)
            one_at_a_time = await _async_one_at_a_time(lambda value: client.put(b"lone", value),
                                                       lambda: client.get(b"lone"))
            return {"members": 3, "client": "aetcd", "put": put, "get": get, "watch": watch,
                    "one_at_a_time": one_at_a_time}

    root = tempfile.mkdtemp(dir=directory, prefix="bench-etcd-")
    try:
        with etcd_cluster(root, members) as leader_url:
            return asyncio.run(measure(leader_url))
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def _etcd_watch_latency(client) -> dict:
    """As _watch_latency does for the table, with etcd's aetcd client."""
    watch = await client.watch(b"watched")
    return await _async_watch_latency(lambda value: client.put(b"watched", value),
                                      (event.kv.value async for event in watch))


def _aio_watch_latency(address: str) -> dict:
    """_watch_latency measured as etcd's is (_etcd_watch_latency): puts and the watch on one
    asyncio loop through grpc.aio, the library aetcd is built on, rather than StorageClient's
    blocking calls in two threads. The requests are StorageClient's."""
    import msgpack

    from bkcore.table.watch_rpc import WATCH_METHOD

    async def measure(channel, put, get, stream_id: int) -> dict:
        watch = channel.unary_stream(WATCH_METHOD, request_serializer=msgpack.packb,
                                     response_deserializer=lambda data: msgpack.unpackb(data, raw=False))
        call = watch({"stream_id": stream_id, "pkey": b"watched", "key": b"watched", "start_revision": 0})
        values = (event["value"] async for event in call if "value" in event)    # (not "created", errors)
        try:
            return await _async_watch_latency(put, values)
        finally:
            call.cancel()
    return _on_aio_table(address, measure)


def _aio_one_at_a_time(address: str) -> dict:
    """_async_one_at_a_time through grpc.aio, as etcd's is measured (aetcd, on grpc.aio)."""
    async def measure(channel, put, get, stream_id: int) -> dict:
        return await _async_one_at_a_time(put, get)
    return _on_aio_table(address, measure)


def _on_aio_table(address: str, measure) -> dict:
    """asyncio.run(measure(channel, put, get, stream_id)): a grpc.aio channel to the table
    service, with put(value) and get() of the key b"watched" in the bench's table, as
    StorageClient sends them (put asks for the previous value, as the watch bench's always did)."""
    import asyncio

    import grpc
    from bookkeeper.proto import kv_rpc_pb2, kv_rpc_pb2_grpc, storage_pb2

    from bkcore.stream.segments import stream_id_of

    async def run() -> dict:
        stream_id = stream_id_of("default", "bench")
        async with grpc.aio.insecure_channel(address) as channel:
            table = kv_rpc_pb2_grpc.TableServiceStub(channel)
            header = kv_rpc_pb2.RoutingHeader(stream_id=stream_id, r_key=b"watched")

            async def put(value: bytes) -> None:
                answer = await table.Put(kv_rpc_pb2.PutRequest(key=b"watched", value=value, prev_kv=True, header=header))
                if answer.header.code != storage_pb2.SUCCESS:
                    raise RuntimeError(f"a put of the watched key answered {answer.header.code}")

            async def get() -> None:
                answer = await table.Range(kv_rpc_pb2.RangeRequest(key=b"watched", header=header))
                if answer.header.code != storage_pb2.SUCCESS:
                    raise RuntimeError(f"a get of the watched key answered {answer.header.code}")
            return await measure(channel, put, get, stream_id)
    return asyncio.run(run())


async def _async_one_at_a_time(put, get, samples: int = 300) -> dict:
    """One client, one call at a time, 2 ms apart: the latency of a put (await put(value)), then
    of a get (await get()), with nothing else in flight. Under a closed-loop load of N clients
    no call is faster than this, and a watch event follows a lone put."""
    import asyncio

    async def timed(call) -> list[float]:
        latencies = []
        for i in range(samples):
            began = time.perf_counter()
            await call(i)
            latencies.append(time.perf_counter() - began)
            await asyncio.sleep(0.002)
        return latencies

    def ms(latencies: list[float], fraction: float) -> float:
        return round(percentile(latencies, fraction) * 1e3, 3)
    puts = await timed(lambda i: put(b"lone-%d" % i))
    gets = await timed(lambda i: get())
    return {"samples": samples, "put_p50_ms": ms(puts, 0.5), "put_p99_ms": ms(puts, 0.99),
            "get_p50_ms": ms(gets, 0.5), "get_p99_ms": ms(gets, 0.99)}


async def _async_watch_latency(put, values, samples: int = 300) -> dict:
    """The delay from sending a put of the watched key (await put(value)) to the watcher seeing
    its value (from the async iterator `values`), one put every 5 ms."""
    import asyncio
    put_at: dict[bytes, float] = {}
    delays: list[float] = []

    async def follow() -> None:
        async for value in values:
            seen = time.perf_counter()
            if value in put_at:
                delays.append(seen - put_at[value])
            if len(delays) >= samples:
                return

    follower = asyncio.ensure_future(follow())
    await asyncio.sleep(0.5)
    for i in range(samples):
        value = b"%d" % i
        put_at[value] = time.perf_counter()
        await put(value)
        await asyncio.sleep(0.005)
    try:
        await asyncio.wait_for(follower, 30)
    except asyncio.TimeoutError:
        pass
    return _watch_summary(delays)


def bench_stream(args) -> int:
    import trio

    from bkclient.library import connect
    root, cluster = _cluster(args, with_stream_storage=False)
    payload = os.urandom(args.record_size)
    try:
        announce("starting the cluster")
        cluster.start(log=lambda line: None)

        async def measure() -> dict:
            async with connect(cluster.metastore_uri) as bk:
                await bk.streams.create_namespace("bench")
                await bk.streams.create_stream("bench", "s")
                written = [0]
                announce("appends")
                async with bk.streams.open_writer("bench", "s") as writer:
                    began = time.perf_counter()
                    deadline = began + args.seconds

                    async def append() -> None:
                        while time.perf_counter() < deadline:
                            await writer.write_many([payload] * args.batch)
                            written[0] += args.batch

                    async with trio.open_nursery() as nursery:
                        for _ in range(args.batches_in_flight):
                            nursery.start_soon(append)
                    append_seconds = time.perf_counter() - began
                read = 0
                announce("reading back")
                began = time.perf_counter()
                async with bk.streams.open_reader("bench", "s", "earliest", read_ahead_entries=256) as reader:
                    while read < written[0]:
                        await reader.read_next()
                        read += 1
                read_seconds = time.perf_counter() - began
            return {"append": {"records": written[0], "records_per_second": round(written[0] / append_seconds),
                               "mib_per_second": round(written[0] * args.record_size / MIB / append_seconds, 2)},
                    "read_back": {"records": read, "records_per_second": round(read / read_seconds)}}

        results = trio.run(measure)
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({"benchmark": "stream", "record_size": args.record_size, "bookies": args.bookies, **results},
                     indent=2))
    return 0
