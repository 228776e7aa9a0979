"""Scenario zk-outage: ZooKeeper away for minutes, then back; how long until everything heals (issue 38, item 1).

Three brokers (``min.insync.replicas=2``, a topic of :data:`PARTITIONS` partitions with replication
factor 3), a ZooKeeper consumer group of two members (``headwater.client.zk_consumer``) and one
``headwater mirror`` process copying the topic to a destination broker. Every ZooKeeper connection
of the source side (each broker's, the group's, the mirror's) passes through a
:class:`~headwater.testing.faults.FaultProxy` route; the outage cuts them all (every connection
closed, new ones refused, as a ZooKeeper that is down) for ``outage_s``, long past every session
timeout, so every session expires and every ephemeral znode (registrations, the controller, the
group's ids and owners) is gone. Then the routes come back, and the drill measures, from that
moment:

- ``registered``: every broker is in ``/brokers/ids`` again;
- ``produce``: an acks=all write to every partition is acknowledged (started once every broker has
  registered again, so no broker still serves from its old session; librdkafka retries until it is);
- ``group``: the ZooKeeper consumer group owns every partition again (each member's own view and
  the owner znodes);
- ``mirror``: the destination holds every record of the source, the writes above included.

The issue's goal: each within 30 s of ZooKeeper's return after a 7-minute outage. The full plan
cuts for 7 minutes (:data:`OUTAGE_S`); ``--quick``, and ``tests/cluster/test_zk_outage.py``, for
:data:`QUICK_OUTAGE_S`, still several session timeouts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from headwater.bench.context import Bench
from headwater.bench.report import Goal, Row
from headwater.client.zk_consumer import ZookeeperConsumerConnector
from headwater.testing.cluster import LocalBroker
from headwater.testing.faults import FaultProxy
from headwater.zk import paths
from headwater.zk.client import kazoo_client, split_chroot
from headwater.zk.topics import decode_partition_state

TOPIC = "outage"
PARTITIONS = 6
BROKERS = (1, 2, 3)
GROUP = "outage-zk-group"
MIRROR_GROUP = "outage-mirror"
OUTAGE_S = 420.0  # the 7 minutes
QUICK_OUTAGE_S = 25.0
HEAL_GOAL_S = 30.0
SESSION_TIMEOUT_MS = 6000
MEASURES = ("registered", "produce", "group", "mirror")


@dataclass
class HealTimes:
    """Seconds from ZooKeeper's return until each claim held (None: not within the drill's limit)."""

    outage_s: float
    expired_s: float  # from the cut until every session of the source side had expired
    registered: float | None = None
    produce: float | None = None
    group: float | None = None
    mirror: float | None = None

    def healed(self) -> float | None:
        values = [getattr(self, m) for m in MEASURES]
        return None if any(v is None for v in values) else max(values)

    def describe(self) -> str:
        parts = [f"{m} {'-' if getattr(self, m) is None else f'{getattr(self, m):.1f} s'}" for m in MEASURES]
        return f"outage {self.outage_s:.0f} s (sessions expired after {self.expired_s:.1f} s): " + ", ".join(parts)


def _wait(cond: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if cond():
                return
        except Exception as e:  # what is waited for may not be there yet
            last = e
        time.sleep(0.2)
    raise TimeoutError(f"not within {timeout:.0f} s: {what} (last error {last!r})")


class OutageDrill:
    """The source cluster, its group and mirror, and the destination, on one real ZooKeeper
    (``zk_connect``: ``host:port``, each side in its own chroot under ``chroot``)."""

    def __init__(self, workdir: Path, zk_connect: str, chroot: str, log: Callable[[str], None] = print) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        hosts, _ = split_chroot(zk_connect)
        self.zk_port = int(hosts.rsplit(":", 1)[1])
        self.src_chroot, self.dst_chroot = f"{chroot}/src", f"{chroot}/dst"
        self.log = log
        self.proxy = FaultProxy()
        self.routes: list[str] = []
        self.brokers: list[LocalBroker] = []
        self.dest: LocalBroker | None = None
        self.members: list[ZookeeperConsumerConnector] = []
        self.mirror: subprocess.Popen[bytes] | None = None
        self.observer = kazoo_client(f"{hosts}{self.src_chroot}")

    def _route(self, name: str) -> str:
        """A ZooKeeper connect string through a new proxy route ``name`` (into the source chroot)."""
        port = self.proxy.add_route(name, self.zk_port, kafka=False)
        self.routes.append(name)
        return f"127.0.0.1:{port}{self.src_chroot}"

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    # -- set-up ------------------------------------------------------------------------------------

    def __enter__(self) -> OutageDrill:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _start(self) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        self.proxy.start()
        hosts, _ = split_chroot(f"127.0.0.1:{self.zk_port}")
        overrides = {
            "zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS,
            "offsets.topic.replication.factor": 3,
            "offsets.topic.num.partitions": 3,
            "replica.lag.time.max.ms": 5000,
            "controlled.shutdown.retry.backoff.ms": 500,
        }
        self.brokers = [LocalBroker(self.workdir, b, self._route(f"zk-{b}"), overrides) for b in BROKERS]
        for b in self.brokers:
            b.start(wait=False)
        for b in self.brokers:
            b.wait_ready(90)
        self.dest = LocalBroker(self.workdir, 9, f"{hosts}{self.dst_chroot}", {"offsets.topic.replication.factor": 1})
        self.dest.start(timeout=90)
        self.observer.start(timeout=30)
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        created = admin.create_topics(
            [NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})], operation_timeout=30
        )
        created[TOPIC].result(60)
        _wait(lambda: all(len(self._isr(p)) == 3 for p in range(PARTITIONS)), 60, "every ISR full at creation")
        group_zk = self._route("zk-group")
        for _ in range(2):
            m = ZookeeperConsumerConnector(
                group_zk, GROUP, auto_offset_reset="smallest", zookeeper_session_timeout_ms=SESSION_TIMEOUT_MS
            )
            self.members.append(m)
            m.create_message_streams({TOPIC: 1})
        props = {
            "clusters": "src, dst",
            "src.zookeeper.connect": self._route("zk-mirror"),
            "src.bootstrap.servers": self.bootstrap,
            "dst.bootstrap.servers": self.dest.bootstrap,
            "src->dst.enabled": "true",
            "src->dst.topics": TOPIC,
            "group.id": MIRROR_GROUP,
            "replication.factor": 1,
            "offset.commit.interval.ms": 1000,
            "fetch.max.wait.ms": 100,
        }
        config = self.workdir / "mirror.properties"
        config.write_text("".join(f"{k} = {v}\n" for k, v in props.items()))
        with open(self.workdir / "mirror.log", "ab") as out:
            self.mirror = subprocess.Popen(
                [sys.executable, "-m", "headwater.cli.main", "mirror", "-c", str(config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        failed = self.produce_everywhere(5, 60)
        if failed:
            raise RuntimeError(f"acks=all writes failed before the outage: {failed[:3]}")
        _wait(self.group_owns_everything, 90, "the group owning every partition before the outage")
        _wait(self.mirror_caught_up, 120, "the mirror copying everything before the outage")

    def close(self) -> None:
        for m in self.members:
            try:
                m.shutdown()
            except Exception:
                pass
        if self.mirror is not None and self.mirror.poll() is None:
            self.mirror.terminate()
            try:
                self.mirror.wait(60)
            except subprocess.TimeoutExpired:
                self.mirror.kill()
                self.mirror.wait(10)
        for b in [*self.brokers, *([self.dest] if self.dest else [])]:
            b.stop(60)
        try:
            self.observer.stop()
            self.observer.close()
        except Exception:
            pass
        self.proxy.stop()

    # -- views -------------------------------------------------------------------------------------

    def _isr(self, p: int) -> tuple[int, ...]:
        data, _ = self.observer.get(paths.partition_state_path(TOPIC, p))
        return decode_partition_state(TOPIC, p, data).isr

    def registered(self) -> bool:
        return sorted(int(b) for b in self.observer.get_children(paths.BROKER_IDS)) == list(BROKERS)

    def sessions_gone(self) -> bool:
        """Every ephemeral znode of the source side is gone: every session there has expired."""
        ids = self.observer.get_children(paths.BROKER_IDS)
        members = [
            self.observer.get_children(paths.consumer_ids_path(g))
            for g in (GROUP, MIRROR_GROUP)
            if self.observer.exists(paths.consumer_ids_path(g))
        ]
        return not ids and not any(members) and not self.observer.exists(paths.CONTROLLER)

    def group_owns_everything(self) -> bool:
        wanted = {(TOPIC, p) for p in range(PARTITIONS)}
        owned: set[tuple[str, int]] = set()
        for m in self.members:
            owned |= set(m.owned_partitions())
        owners = set(self.observer.get_children(paths.consumer_owners_path(GROUP, TOPIC)))
        return owned == wanted and owners == {str(p) for p in range(PARTITIONS)}

    def _end_offsets(self, bootstrap: str) -> int:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "outage-drill-offsets"})
        try:
            return sum(c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=5)[1] for p in range(PARTITIONS))
        finally:
            c.close()

    def mirror_caught_up(self) -> bool:
        assert self.dest is not None
        return self._end_offsets(self.dest.bootstrap) >= self._end_offsets(self.bootstrap)

    def produce_everywhere(self, per_partition: int, timeout_s: float) -> list[str]:
        """acks=all writes to every partition (librdkafka retries within ``timeout_s``); the errors."""
        from confluent_kafka import KafkaError, Producer

        errors: list[str] = []

        def done(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                errors.append(f"{msg.partition()}: {err}")

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "enable.idempotence": False,
                "message.timeout.ms": int(timeout_s * 1000),
            }
        )
        for p in range(PARTITIONS):
            for i in range(per_partition):
                producer.produce(TOPIC, value=f"{p}-{i}-{time.time()}".encode(), partition=p, on_delivery=done)
        left = producer.flush(timeout_s + 10)
        if left:
            errors.append(f"{left} record(s) unanswered")
        return errors

    # -- the outage --------------------------------------------------------------------------------

    def run(self, outage_s: float, limit_s: float = 120.0) -> HealTimes:
        """Cut every source-side ZooKeeper route for ``outage_s``, restore them, and time the heal
        (each claim waited for up to ``limit_s``)."""
        self.log(f"[zk-outage] cutting ZooKeeper off for {outage_s:.0f} s")
        cut_at = time.monotonic()
        for r in self.routes:
            self.proxy.cut_route(r)
        _wait(self.sessions_gone, outage_s + 60, "every source-side session to expire")
        times = HealTimes(outage_s, time.monotonic() - cut_at)
        time.sleep(max(0.0, cut_at + outage_s - time.monotonic()))
        times.outage_s = time.monotonic() - cut_at
        for r in self.routes:
            self.proxy.restore_route(r)
        back = time.monotonic()
        self.log(f"[zk-outage] ZooKeeper back after {times.outage_s:.0f} s")
        produced: list[list[str]] = []
        # Written once every broker has registered again: before that, a broker may not have seen
        # its session expire yet and still serve as leader from before the outage.
        writer = threading.Thread(target=lambda: produced.append(self.produce_everywhere(1, limit_s)))
        checks: dict[str, Callable[[], bool]] = {
            "registered": self.registered,
            "produce": lambda: bool(produced) and not produced[0],
            "group": self.group_owns_everything,
            "mirror": lambda: bool(produced) and not produced[0] and self.mirror_caught_up(),
        }
        while time.monotonic() < back + limit_s and any(getattr(times, m) is None for m in MEASURES):
            if times.registered is not None and writer.ident is None:
                writer.start()
            for m, check in checks.items():
                if getattr(times, m) is None:
                    try:
                        ok = check()
                    except Exception:
                        ok = False
                    if ok:
                        setattr(times, m, time.monotonic() - back)
            if produced and produced[0]:
                self.log(f"[zk-outage] acks=all writes failed after the outage: {produced[0][:3]}")
                break
            time.sleep(0.2)
        if writer.ident is not None:
            writer.join(limit_s + 20)
        self.log(f"[zk-outage] {times.describe()}")
        return times


def run(bench: Bench) -> list[Row]:
    outage = QUICK_OUTAGE_S if bench.plan.quick else OUTAGE_S
    rows = {
        m: Row(
            "zk-outage",
            f"ZooKeeper cut off for {outage / 60:.1f} min under 3 brokers, a ZooKeeper consumer group and the mirror",
            f"time until {what} after ZooKeeper's return",
            primary="s",
            reference="issue 38 item 1: within 30 s",
            goal=Goal("<= 30 s", HEAL_GOAL_S, kind="at most"),
        )
        for m, what in (
            ("registered", "every broker is registered"),
            ("produce", "an acks=all write to every partition succeeds"),
            ("group", "the ZooKeeper consumer group owns every partition"),
            ("mirror", "the mirror has copied every record"),
        )
    }
    if not bench.zk_connect:
        for r in rows.values():
            r.unavailable = "no ZooKeeper"
            bench.add(r)
        return list(rows.values())
    runs = 1 if bench.plan.quick else max(1, min(bench.plan.runs, 3))
    try:
        with OutageDrill(bench.workdir / "zk-outage", bench.zk_connect, "/bench-zk-outage", bench.log) as drill:
            for _ in range(runs):
                times = drill.run(outage)
                for m, row in rows.items():
                    value = getattr(times, m)
                    if value is not None:
                        row.figure("s").add(value)
                    else:
                        row.note = f"not healed within the drill's limit ({times.describe()})"
    except (RuntimeError, OSError, TimeoutError) as e:
        for r in rows.values():
            if not r.figures:
                r.unavailable = f"failed: {e}"
    for r in rows.values():
        bench.add(r)
    return list(rows.values())
