"""Scenario ``scale``: thousands of partitions on a 3-broker cluster, RF 3 (issue 26).

For each size (1,000 / 5,000 / 10,000 partitions, in topics of 20; ``--quick``: 1,000) a fresh
cluster of three brokers on the bench's ZooKeeper (with ``auto.leader.rebalance.enable=false``, so
leadership moves only when the scenario moves it) is measured, in this order:

- **create**: CreateTopics of every topic, 10 at a time, until the brokers' metadata lists every
  partition with a leader and a full ISR; seconds per 1,000 partitions;
- **metadata**: a Metadata request (v7) for all topics, from the request's first byte sent to the
  response's last byte received on one connection, median of 10, ms (the goal's figure); and the
  same through confluent-kafka's ``list_topics`` (librdkafka parsing the answer and the binding
  building a Python object per partition), median of 10, ms;
- **idle**: each broker's CPU (% of one core) and RSS over 10 s with no traffic: what the replica
  fetchers and the ISR maintenance cost when nothing happens;
- **controller failover**: ``kill -9`` of the controller until the survivors' metadata shows a
  live leader for every partition (the ZooKeeper session timeout, 6 s, is part of it);
- **restart after kill -9**: the killed broker started again (log recovery, registration) until
  it is back in the ISR of every partition it hosts;
- **controlled shutdown**: SIGTERM to a broker that is not the controller until its process exits
  (leadership moved off it first).

The goals (10,000 partitions, this 2-core machine): failover <= 10 s, controlled shutdown <= 10 s,
restart <= 30 s, idle CPU <= 5 % of a core and RSS <= 500 MiB per broker, Metadata <= 50 ms.
"""

from __future__ import annotations

import socket
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from headwater.bench.context import Bench
from headwater.bench.procmon import cpu_seconds, rss_bytes
from headwater.bench.report import Goal, Row
from headwater.protocol.apis import METADATA
from headwater.protocol.frames import encode_request
from headwater.testing.cluster import LocalCluster
from headwater.testing.wire import read_frame

NAME = "scale"
PER_TOPIC = 20
SIZES = (1_000, 5_000, 10_000)
QUICK_SIZES = (1_000,)
GOAL_SIZE = 10_000
IDLE_SECONDS = 10.0
OVERRIDES = {"auto.leader.rebalance.enable": "false"}


@dataclass
class ScaleResult:
    partitions: int
    create_s: float = float("nan")
    metadata_ms: float = float("nan")
    list_topics_ms: float = float("nan")
    idle_cpu_pct: list[float] = field(default_factory=list)
    idle_rss_mib: list[float] = field(default_factory=list)
    failover_s: float = float("nan")
    restart_s: float = float("nan")
    controlled_shutdown_s: float = float("nan")


def metadata_round_trips(bootstrap: str, count: int) -> list[float]:
    """Seconds from sending a Metadata v7 request for all topics to holding the whole response,
    ``count`` times on one connection (after one unmeasured request)."""
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    with socket.create_connection((host, int(port)), timeout=120) as sock:
        times = []
        for i in range(count + 1):
            request = encode_request(
                METADATA, 7, i, "headwater-bench", {"topics": None, "allow_auto_topic_creation": False}
            )
            start = time.monotonic()
            sock.sendall(request)
            read_frame(sock)
            if i:
                times.append(time.monotonic() - start)
        return times


def _admin(bootstrap: str) -> object:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 300_000})


def partitions_seen(bootstrap: str, prefix: str) -> list[tuple[int, int, int]]:
    """(leader, ISR size, replicas) of every partition of the topics named ``prefix*``, as the broker
    at ``bootstrap`` answers Metadata."""
    md = _admin(bootstrap).list_topics(timeout=60)  # type: ignore[attr-defined]
    return [
        (p.leader, len(p.isrs), len(p.replicas))
        for name, t in md.topics.items()
        if name.startswith(prefix)
        for p in t.partitions.values()
    ]


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Seconds until ``condition()`` held (polled); raises TimeoutError naming ``what``."""
    start = time.monotonic()
    while not _holds(condition):
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.2)
    return time.monotonic() - start


def _holds(condition: Callable[[], bool]) -> bool:
    try:
        return condition()
    except Exception:  # a broker that is down, a metadata request that timed out: not yet
        return False


def create_topics(bootstrap: str, prefix: str, partitions: int, log: Callable[[str], None]) -> float:
    """Create ``partitions`` in topics of PER_TOPIC (RF 3); seconds until every one has a full ISR."""
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    admin = _admin(bootstrap)
    names = [f"{prefix}{i:05d}" for i in range(partitions // PER_TOPIC)]
    start = time.monotonic()
    for i in range(0, len(names), 10):
        futures = admin.create_topics(  # type: ignore[attr-defined]
            [NewTopic(n, PER_TOPIC, 3) for n in names[i : i + 10]], request_timeout=300
        )
        for f in futures.values():
            f.result()
        if (i // 10) % 25 == 24:
            log(f"[scale] {i + 10} of {len(names)} topics created")

    def full() -> bool:
        seen = partitions_seen(bootstrap, prefix)
        return len(seen) == partitions and all(leader >= 0 and isr == 3 for leader, isr, _ in seen)

    wait_until(full, 600, "every partition with a leader and a full ISR")
    return time.monotonic() - start


def measure(workdir: Path, zk_connect: str, partitions: int, log: Callable[[str], None]) -> ScaleResult:
    """Every figure of one size, on a fresh 3-broker cluster under ``zk_connect``."""
    result = ScaleResult(partitions)
    prefix = "scale-"
    with LocalCluster(workdir, 3, zk_connect=zk_connect, overrides=OVERRIDES) as cluster:
        log(f"[scale] {partitions:,} partitions: creating topics")
        result.create_s = create_topics(cluster.bootstrap, prefix, partitions, log)
        admin = _admin(cluster.brokers[0].bootstrap)
        samples = []
        for _ in range(10):
            t = time.monotonic()
            admin.list_topics(timeout=60)  # type: ignore[attr-defined]
            samples.append(time.monotonic() - t)
        result.list_topics_ms = statistics.median(samples) * 1000
        result.metadata_ms = statistics.median(metadata_round_trips(cluster.brokers[0].bootstrap, 10)) * 1000
        pids = [b.pid for b in cluster.brokers]
        before = [cpu_seconds(p) for p in pids]
        t = time.monotonic()
        time.sleep(IDLE_SECONDS)  # the measurement window itself: nothing to poll
        elapsed = time.monotonic() - t
        result.idle_cpu_pct = [100 * (cpu_seconds(p) - c) / elapsed for p, c in zip(pids, before, strict=True)]
        result.idle_rss_mib = [rss_bytes(p) / (1 << 20) for p in pids]

        controller = _admin(cluster.bootstrap).list_topics(timeout=60).controller_id  # type: ignore[attr-defined]
        victim = next(b for b in cluster.brokers if b.broker_id == controller)
        survivors = ",".join(b.bootstrap for b in cluster.brokers if b is not victim)
        log(f"[scale] {partitions:,} partitions: kill -9 of the controller (broker {controller})")
        victim.kill9()
        result.failover_s = wait_until(
            lambda: all(leader >= 0 and leader != controller for leader, _, _ in partitions_seen(survivors, prefix)),
            600,
            "a live leader for every partition after the controller's kill -9",
        )
        log(f"[scale] {partitions:,} partitions: restarting broker {controller}")
        start = time.monotonic()
        victim.start(timeout=600)
        wait_until(
            lambda: all(isr == 3 for _, isr, _ in partitions_seen(cluster.bootstrap, prefix)),
            900,
            f"broker {controller} back in every ISR",
        )
        result.restart_s = time.monotonic() - start

        controller = _admin(cluster.bootstrap).list_topics(timeout=60).controller_id  # type: ignore[attr-defined]
        other = next(b for b in cluster.brokers if b.broker_id != controller)
        log(f"[scale] {partitions:,} partitions: controlled shutdown of broker {other.broker_id}")
        start = time.monotonic()
        other.stop(timeout=600)
        result.controlled_shutdown_s = time.monotonic() - start
    return result


def run(bench: Bench) -> list[Row]:
    sizes = bench.plan.scale_partitions or (QUICK_SIZES if bench.plan.quick else SIZES)
    rows: list[Row] = []

    def row(case: str, primary: str, goal: Goal | None, partitions: int) -> Row:
        r = Row(
            NAME,
            f"{partitions:,} partitions, RF 3, 3 brokers: {case}",
            "headwater brokers",
            primary=primary,
            reference="issue 26 (10,000 partitions)" if goal is not None else "",
            goal=goal if partitions == GOAL_SIZE else None,
        )
        rows.append(r)
        return r

    for n in sizes:
        if not bench.zk_connect:
            r = row("every figure", "s", None, n)
            r.unavailable = "no ZooKeeper"
            bench.add(r)
            continue
        try:
            res = measure(bench.workdir / f"scale-{n}", f"{bench.zk_connect}/bench-scale-{n}", n, bench.log)
        except (TimeoutError, RuntimeError, OSError) as e:
            r = row("every figure", "s", None, n)
            r.unavailable = f"failed: {e}"
            bench.add(r)
            continue
        per_k = res.create_s / (n / 1000)
        row("CreateTopics, s per 1,000 partitions", "s", None, n).figure("s").add(per_k)
        row(
            "Metadata for all topics (request sent to response received)", "ms", Goal("<= 50 ms", 50, "at most"), n
        ).figure("ms").add(res.metadata_ms)
        row("Metadata for all topics through confluent-kafka list_topics", "ms", None, n).figure("ms").add(
            res.list_topics_ms
        )
        row("idle broker CPU, % of a core (worst broker)", "%", Goal("<= 5 %", 5, "at most"), n).figure("%").add(
            max(res.idle_cpu_pct)
        )
        row("idle broker RSS, MiB (largest)", "MiB", Goal("<= 500 MiB", 500, "at most"), n).figure("MiB").add(
            max(res.idle_rss_mib)
        )
        row("controller failover after kill -9, s", "s", Goal("<= 10 s", 10, "at most"), n).figure("s").add(
            res.failover_s
        )
        row("restart after kill -9 until back in every ISR, s", "s", Goal("<= 30 s", 30, "at most"), n).figure("s").add(
            res.restart_s
        )
        row("controlled shutdown, s", "s", Goal("<= 10 s", 10, "at most"), n).figure("s").add(res.controlled_shutdown_s)
        for r in rows[-8:]:
            bench.add(r)
    return rows
