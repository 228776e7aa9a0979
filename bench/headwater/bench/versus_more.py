"""The rows of ``headwater bench --versus kafka`` beyond produce/consume/latency (issues 39 and 40):

- ``large``: 100 KiB records, produced (acks=1, 1 partition RF 1, librdkafka defaults) and read back;
- ``java``: Kafka 2.3.1's own perf tools, ``org.apache.kafka.tools.ProducerPerformance``
  (``kafka-producer-perf-test``: acks=1, 100-byte records, unthrottled, kafka-clients 2.3.1 at its
  defaults) and ``kafka.tools.ConsumerPerformance`` (``kafka-consumer-perf-test``, its
  ``fetch.nMsg.sec``: records/s from the first fetch, the group join left out), heap 512 MiB as the
  scripts set it;
- ``failover``: a fresh 3-broker cluster with ``--partitions`` partitions (default 2,000; RF 3, topics
  of 20, ``auto.leader.rebalance.enable=false`` on both), ``kill -9`` of the controller, seconds until
  the survivors' Metadata gives every partition a live leader (ZooKeeper's 6 s session timeout,
  ticking at 2,000 ms, is part of it on both);
- ``mm2``: MirrorMaker 2 (connect-mirror, dedicated mode, the properties of
  tests/java/test_mirrormaker2.py) copying a 1-partition topic of 100-byte records from dc1 (one
  broker) to agg (one broker): records/s from the first record seen in agg to the last, and the
  end-to-end seconds from MM2's process start to the last record in agg. On Headwater the same run
  also measures ``headwater mirror`` over the same clusters and topic (the second table);
- ``spark``: Spark's own ``spark.read.format("kafka")`` (spark-sql-kafka-0-10, pinned in
  tests/java/pom.xml; ``local[2]``) reading a 4-partition topic of 1 KiB records into Parquet, timed
  inside the session (the second of two reads, so the connector's class loading is out); on
  Headwater also the project's own ``format("headwater")`` source, same session, same write.

Each function measures one system's cluster (``system`` is "headwater" or "kafka") and appends to
``rows[key].values[system]``; rows whose ``table`` is "tool" compare Headwater's tool with Kafka's
tool, both over Headwater brokers (the "kafka" side there is MM2 / Spark's source).
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from headwater.bench import peers
from headwater.testing import java
from headwater.testing.cluster import LocalCluster
from headwater.testing.kafka import KafkaCluster
from headwater.testing.zookeeper import ZooKeeperServer
from headwater.zk import paths as zkpaths

Log = Callable[[str], None]
MIB = 1 << 20


class _Broker(Protocol):
    broker_id: int

    @property
    def bootstrap(self) -> str: ...

    @property
    def pid(self) -> int: ...

    def kill9(self) -> None: ...


class _Cluster(Protocol):
    @property
    def bootstrap(self) -> str: ...

    brokers: Any


@contextmanager
def any_cluster(
    system: str, workdir: Path, zk: ZooKeeperServer, name: str, size: int, overrides: dict[str, object] | None = None
) -> Iterator[Any]:
    """A ``size``-broker cluster of ``system`` in a chroot of its own on ``zk``."""
    if system == "kafka":
        with KafkaCluster(workdir / name, size, zk_connect=zk.connect, chroot=f"/{name}", overrides=overrides) as k:
            yield k
    else:
        with LocalCluster(workdir / name, size, zk_connect=f"{zk.connect}/{name}", overrides=overrides) as h:
            yield h


def _loadgen() -> Callable[..., dict[str, Any]]:
    from headwater.bench.versus import loadgen

    return loadgen


def _create(bootstrap: str, name: str, partitions: int, rf: int) -> None:
    from headwater.bench.versus import create_topic

    create_topic(bootstrap, name, partitions, rf)


def fill(bootstrap: str, topic: str, count: int, size: int, timeout: float = 600) -> int:
    res = _loadgen()(
        "confluent-produce",
        bootstrap,
        topic,
        timeout + 60,
        "--count",
        str(count),
        "--seconds",
        str(timeout),
        "--size",
        str(size),
        "--acks",
        "1",
    )
    if res["errors"]:
        raise RuntimeError(f"filling {topic}: {res['errors']} errors, first: {res['first_error']}")
    return int(res["acked"])


# --- large records -----------------------------------------------------------------------------

LARGE = 100 * 1024


def large(system: str, bootstrap: str, count: int, rows: dict[str, Any], log: Log) -> None:
    topic = "versus-large"
    _create(bootstrap, topic, 1, 1)
    res = _loadgen()(
        "confluent-produce",
        bootstrap,
        topic,
        300,
        "--count",
        str(count),
        "--seconds",
        "120",
        "--size",
        str(LARGE),
        "--acks",
        "1",
    )
    mib = res["acked"] * LARGE / MIB
    rows["lp"].values[system].append(mib / res["seconds"])
    c = _loadgen()("confluent-consume", bootstrap, topic, 300, "--count", str(res["acked"]), "--seconds", "120")
    rows["lc"].values[system].append(c["records"] * LARGE / MIB / c["seconds"] if c.get("seconds") else 0.0)
    log(
        f"{system} large: produce {rows['lp'].values[system][-1]:.1f} MiB/s, consume {rows['lc'].values[system][-1]:.1f} MiB/s"
    )


# --- Kafka's Java perf tools -------------------------------------------------------------------

_PRODUCED = re.compile(r"(\d+) records sent, ([\d.]+) records/sec")


def perf_tool(main: str, args: list[str], timeout: float) -> str:
    cmd = java.java_command(main, args, "kafka-legacy", heap="512m", quick_start=False)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{main} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc.stdout


def java_perf(system: str, bootstrap: str, count: int, rows: dict[str, Any], log: Log) -> None:
    topic = "versus-java"
    _create(bootstrap, topic, 6, 1)
    out = perf_tool(
        "org.apache.kafka.tools.ProducerPerformance",
        [
            "--topic",
            topic,
            "--num-records",
            str(count),
            "--record-size",
            "100",
            "--throughput",
            "-1",
            "--producer-props",
            f"bootstrap.servers={bootstrap}",
            "acks=1",
        ],
        600,
    )
    m = _PRODUCED.findall(out)
    if not m or int(m[-1][0]) != count:
        raise RuntimeError(f"ProducerPerformance: no final line for {count} records: {out[-500:]}")
    rows["jp"].values[system].append(float(m[-1][1]))
    out = perf_tool(
        "kafka.tools.ConsumerPerformance",
        ["--broker-list", bootstrap, "--topic", topic, "--messages", str(count), "--timeout", "60000"],
        600,
    )
    header, values = _csv_pair(out)
    got = dict(zip(header, values, strict=False))
    if int(float(got["data.consumed.in.nMsg"])) < count:
        raise RuntimeError(f"ConsumerPerformance read {got['data.consumed.in.nMsg']} of {count}: {out[-500:]}")
    rows["jc"].values[system].append(float(got["fetch.nMsg.sec"]))
    log(f"{system} java perf tools: produce {rows['jp'].values[system][-1]:,.0f}, consume {got}")


def _csv_pair(out: str) -> tuple[list[str], list[str]]:
    lines = [ln for ln in out.splitlines() if "," in ln]
    for i, ln in enumerate(lines):
        if ln.startswith("start.time"):
            return [h.strip() for h in ln.split(",")], [v.strip() for v in lines[i + 1].split(",")]
    raise RuntimeError(f"ConsumerPerformance printed no stats: {out[-500:]}")


# --- controller failover -----------------------------------------------------------------------


def failover(
    system: str,
    workdir: Path,
    zk: ZooKeeperServer,
    name: str,
    partitions: int,
    rows: dict[str, Any],
    log: Log,
    idle_seconds: float = 10.0,
) -> None:
    """On a fresh cluster with ``partitions`` (RF 3): Metadata for all topics (``mdt``), idle CPU
    (``idle``), the controller's kill -9 until every partition has a live leader (``fo``), that
    broker's restart until it is back in every ISR (``rs``), and the controlled shutdown of a broker
    that is not the controller (``cs``), in this order, as scenario ``scale`` measures them."""
    import statistics

    from headwater.bench.procmon import cpu_seconds
    from headwater.bench.scenarios import scale

    overrides: dict[str, object] = {"auto.leader.rebalance.enable": "false"}
    with any_cluster(system, workdir, zk, name, 3, overrides) as c:
        t = time.monotonic()
        scale.create_topics(c.bootstrap, "scale-", partitions, log)
        log(f"{system} failover: {partitions:,} partitions created in {time.monotonic() - t:.1f}s")
        if "mdt" in rows:
            ms = statistics.median(scale.metadata_round_trips(c.brokers[0].bootstrap, 10)) * 1000
            rows["mdt"].values[system].append(ms)
            pids = [b.pid for b in c.brokers]
            before = [cpu_seconds(p) for p in pids]
            t = time.monotonic()
            time.sleep(idle_seconds)  # the measurement window itself: nothing to poll
            elapsed = time.monotonic() - t
            idle = [100 * (cpu_seconds(p) - b) / elapsed for p, b in zip(pids, before, strict=True)]
            rows["idle"].values[system].append(statistics.mean(idle))
            log(
                f"{system} Metadata (all topics) {ms:.1f} ms; idle CPU per broker {', '.join(f'{x:.1f}' for x in idle)} %"
            )
        admin = scale._admin(c.bootstrap)
        controller = admin.list_topics(timeout=60).controller_id  # type: ignore[attr-defined]
        victim = next(b for b in c.brokers if b.broker_id == controller)
        survivors = ",".join(b.bootstrap for b in c.brokers if b is not victim)
        # Kafka elects only from the ISR (unclean election off): a partition whose ISR shrank to the
        # victim alone (a follower that fell behind on a loaded machine) stays offline, by design
        before_isr = isrs(c.bootstrap)
        electable = {tp for tp, isr in before_isr.items() if set(isr) - {controller}}
        # where the time goes: ZooKeeper's part (the victim's session expires, its /controller
        # ephemeral goes) and the system's own (a survivor takes over, elects, tells the brokers)
        gone = _znode_gone(f"{zk.connect}/{name}", zkpaths.CONTROLLER)
        try:
            killed = time.monotonic()
            victim.kill9()

            def led() -> bool:
                seen = leaders(survivors)
                return all(seen.get(tp, -1) not in (-1, controller) for tp in electable)

            seconds = scale.wait_until(led, 600, "a live leader for every partition after the controller's kill -9")
            done = time.monotonic()
        finally:
            gone_at = gone.stop()
        if len(electable) < partitions:
            log(f"{system} failover: {partitions - len(electable)} partition(s) had only the victim in their ISR")
        rows["fo"].values[system].append(seconds)
        split = ""
        if gone_at is not None and "fox" in rows:
            rows["fox"].values[system].append(done - gone_at)
            split = f" ({gone_at - killed:.2f}s until /controller went, {done - gone_at:.2f}s after)"
        log(f"{system} failover at {partitions:,} partitions: {seconds:.1f}s{split}")
        if "rs" not in rows:
            return
        start = time.monotonic()
        victim.start(timeout=600)

        def back() -> bool:
            return all(len(isr) == 3 for isr in isrs(c.bootstrap).values())

        scale.wait_until(back, 900, f"broker {controller} back in every ISR")
        rows["rs"].values[system].append(time.monotonic() - start)
        log(f"{system} restart after kill -9: {rows['rs'].values[system][-1]:.1f}s until back in every ISR")
        controller = scale._admin(c.bootstrap).list_topics(timeout=60).controller_id  # type: ignore[attr-defined]
        other = next(b for b in c.brokers if b.broker_id != controller)
        start = time.monotonic()
        other.stop(timeout=600)
        rows["cs"].values[system].append(time.monotonic() - start)
        log(f"{system} controlled shutdown of broker {other.broker_id}: {rows['cs'].values[system][-1]:.1f}s")


class _ZnodeGone:
    """The monotonic time ``path`` was deleted, from a ZooKeeper watch set now (a thread of kazoo's)."""

    def __init__(self, hosts: str, path: str) -> None:
        from headwater.zk.client import kazoo_client

        self.at: float | None = None
        self.zk = kazoo_client(hosts)
        self.zk.start(timeout=30)

        def fired(event: Any) -> None:
            if event.type == "DELETED" and self.at is None:
                self.at = time.monotonic()

        if self.zk.exists(path, watch=fired) is None:
            raise RuntimeError(f"{hosts}{path} does not exist")

    def stop(self) -> float | None:
        self.zk.stop()
        self.zk.close()
        return self.at


def _znode_gone(hosts: str, path: str) -> _ZnodeGone:
    return _ZnodeGone(hosts, path)


# --- clients that never log in (issue 37) -----------------------------------------------------


def preauth(
    system: str, workdir: Path, zk: ZooKeeperServer, name: str, quick: bool, rows: dict[str, Any], log: Log
) -> None:
    """The ``preauth`` scenario's blocks on one broker of ``system`` (PLAINTEXT and SASL_PLAINTEXT with
    SCRAM-SHA-512): a SCRAM client's produce p99 beside 1,000 idle unauthenticated connections and
    without them. Idle connections only: Kafka 2.3's PLAINTEXT listener allocates an announced frame
    whole, so the scenario's 100 announcers of 100 MiB exhaust its 1 GiB heap (docs/performance.md)."""
    from headwater.bench.scenarios import preauth as pa
    from headwater.bench.versus import create_topic
    from headwater.testing.cluster import LocalBroker
    from headwater.testing.kafka import KafkaBroker
    from headwater.testing.zookeeper import free_port

    chroot = f"{zk.connect}/{name}"
    props: dict[str, object] = {"sasl.enabled.mechanisms": "SCRAM-SHA-512", "offsets.topic.replication.factor": 1}
    broker: KafkaBroker | LocalBroker
    if system == "kafka":
        jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        broker = KafkaBroker(
            workdir / name, 0, chroot, {**props, "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": jaas}
        )
    else:
        broker = LocalBroker(workdir / name, 0, chroot)
        broker.properties.update(props)
    sasl_port = free_port()
    broker.properties["listeners"] = f"PLAINTEXT://127.0.0.1:{broker.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
    pa._raise_fd_limit(pa.IDLE + 1024)
    blocks, records = (pa.QUICK_BLOCKS, pa.QUICK_RECORDS) if quick else (pa.BLOCKS, pa.RECORDS)
    broker.start(timeout=180)
    try:
        pa.add_user(chroot)
        create_topic(broker.bootstrap, "preauth", 1, 1)
        m = pa.alternate(broker.pid, sasl_port, broker.port, "preauth", pa.IDLE, 0, records, blocks)
    finally:
        broker.stop()
    ratio = pa._p99(m.with_attack) / pa._p99(m.without)
    rows["ar"].values[system].append(ratio)
    rows["aw"].values[system].append(pa._p99(m.with_attack))
    rows["ac"].values[system].append(m.cpu_ms("with"))
    if "am" in rows:
        rows["am"].values[system].append((m.before + m.grown) / MIB)
        rows["ag"].values[system].append(m.grown / MIB)
    log(
        f"{system} preauth: p99 {pa._p99(m.without):.2f} ms without, {pa._p99(m.with_attack):.2f} ms with "
        f"({ratio:.2f}x); broker CPU {m.cpu_ms('without'):.3f} / {m.cpu_ms('with'):.3f} ms per request"
    )


def _topics(bootstrap: str) -> Any:
    from headwater.bench.scenarios import scale

    return scale._admin(bootstrap).list_topics(timeout=60).topics.items()  # type: ignore[attr-defined]


def isrs(bootstrap: str) -> dict[tuple[str, int], list[int]]:
    return {
        (n, p): list(m.isrs) for n, t in _topics(bootstrap) if n.startswith("scale-") for p, m in t.partitions.items()
    }


def leaders(bootstrap: str) -> dict[tuple[str, int], int]:
    return {(n, p): m.leader for n, t in _topics(bootstrap) if n.startswith("scale-") for p, m in t.partitions.items()}


# --- MirrorMaker 2 and headwater mirror ------------------------------------------------------


def mirrors(
    system: str, workdir: Path, zk: ZooKeeperServer, name: str, count: int, rows: dict[str, Any], log: Log
) -> None:
    topic = "orders"
    deadline = 120 + count / 2_000
    with (
        any_cluster(system, workdir, zk, f"{name}-dc1", 1) as dc1,
        any_cluster(system, workdir, zk, f"{name}-agg", 1) as agg,
    ):
        _create(dc1.bootstrap, topic, 1, 1)
        fill(dc1.bootstrap, topic, count, 100)
        props = peers.mm2_properties(workdir / f"{name}-mm2.properties", dc1.bootstrap, agg.bootstrap, topic)
        got = peers.copy_timed(
            peers.mm2_command(props), workdir / f"{name}-mm2.log", agg.bootstrap, f"dc1.{topic}", count, deadline
        )
        rate, e2e = got.rate, got.e2e
        rows["mm2"].values[system].append(rate)
        rows["mm2e"].values[system].append(e2e)
        log(f"{system} MM2: {rate:,.0f} rec/s, {e2e:.1f}s end to end")
        if system != "headwater":
            return
        dc1_zk = f"{zk.connect}/{name}-dc1"
        agg_zk = f"{zk.connect}/{name}-agg"
        config = workdir / f"{name}-mirror.properties"
        mirror = {
            "clusters": "dc1, agg",
            "dc1.zookeeper.connect": dc1_zk,
            "dc1.bootstrap.servers": dc1.bootstrap,
            "agg.bootstrap.servers": agg.bootstrap,
            "agg.zookeeper.connect": agg_zk,
            "dc1->agg.enabled": "true",
            "dc1->agg.topics": topic,
            "group.id": f"versus-{name}",
        }
        config.write_text("".join(f"{k} = {v}\n" for k, v in mirror.items()))
        got = peers.copy_timed(
            peers.mirror_command(config), workdir / f"{name}-mirror.log", agg.bootstrap, topic, count, deadline
        )
        rate, e2e = got.rate, got.e2e
        rows["tm"].values["headwater"].append(rate)
        rows["tme"].values["headwater"].append(e2e)
        rows["tm"].values["kafka"].append(rows["mm2"].values["headwater"][-1])
        rows["tme"].values["kafka"].append(rows["mm2e"].values["headwater"][-1])
        log(f"headwater mirror: {rate:,.0f} rec/s, {e2e:.1f}s end to end")


# --- Spark: format("kafka") and format("headwater") --------------------------------------------

SPARK_SIZE = 1024


def spark(system: str, bootstrap: str, workdir: Path, count: int, rows: dict[str, Any], log: Log) -> None:
    topic = "versus-spark"
    _create(bootstrap, topic, 4, 1)
    fill(bootstrap, topic, count, SPARK_SIZE)
    seconds = peers.spark_read(bootstrap, topic, "kafka", workdir / f"spark-{system}-kafka", count).seconds[-1]
    rows["sk"].values[system].append(count / seconds)
    log(f"{system} Spark format(kafka): {count / seconds:,.0f} rec/s ({seconds:.1f}s)")
    if system != "headwater":
        return
    own = peers.spark_read(bootstrap, topic, "headwater", workdir / "spark-headwater-headwater", count).seconds[-1]
    rows["ts"].values["headwater"].append(count / own)
    rows["ts"].values["kafka"].append(count / seconds)
    log(f"headwater Spark format(headwater): {count / own:,.0f} rec/s ({own:.1f}s)")
