"""Nemesis: acks=all writes under kill -9, pause, session expiry and network cuts lose nothing.

RF=3, min.insync.replicas=2, one stock producer (librdkafka, acks=all) writing the whole time
while, round after round, the leader, the controller or a follower is killed, paused, expired
or cut off, and then brought back; and the leader of the cluster's ZooKeeper ensemble (three real
servers, as production runs) is killed -9 and restarted. Afterwards: every acknowledged record is readable at the
offset it was acknowledged at, and the three replicas hold identical records up to the high
watermark. Bounded: a fixed list of rounds, each with its own time limits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from headwater.protocol.records.record import iter_batches
from headwater.testing.zookeeper_ensemble import ZooKeeperEnsemble
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic, read_all

TOPIC = "nemesis"


def _replica_records(c: Cluster, broker: int, below: int) -> list[tuple[int, bytes | None]]:
    out: list[tuple[int, bytes | None]] = []
    for seg in sorted((Path(c.brokers[broker].log_dir) / f"{TOPIC}-0").glob("*.log")):
        for _header, records in iter_batches(seg.read_bytes()):
            out.extend((r.offset, r.value) for r in records if r.offset < below)
    return out


class Writer:
    """A librdkafka producer writing acks=all in a thread; remembers what was acknowledged."""

    def __init__(self, bootstrap: str) -> None:
        self.acked: dict[int, bytes] = {}
        self.errors = 0
        self.stop = threading.Event()
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "enable.idempotence": False,
                "message.timeout.ms": 120000,
                "retry.backoff.ms": 200,
                "queue.buffering.max.messages": 20000,
            }
        )
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err: object, msg: object) -> None:
        if err is None:
            self.acked[msg.offset()] = msg.value()  # type: ignore[attr-defined]
        else:
            self.errors += 1

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            try:
                self.producer.produce(TOPIC, value=f"n{i}".encode(), partition=0, on_delivery=self._on_delivery)
                i += 1
            except BufferError:
                pass
            self.producer.poll(0.002)
        self.producer.flush(120)


@pytest.fixture
def nemesis_cluster(tmp_path: Path) -> Iterator[tuple[Cluster, ZooKeeperEnsemble]]:
    """Three brokers on a 3-server ZooKeeper ensemble (each broker reaches every server through
    the fault proxy, so a session can still be expired)."""
    ensemble = ZooKeeperEnsemble(tmp_path / "zk", 3)
    try:
        ensemble.start()
        c = Cluster(
            tmp_path / "cluster",
            "127.0.0.1",
            0,
            "/nemesis",
            3,
            zk_ensemble=ensemble.connect,
            zookeeper_session_timeout_ms=4000,
            replica_lag_time_max_ms=3000,
        )
        try:
            yield c.start(), ensemble
        finally:
            c.close()
    finally:
        ensemble.stop()


def test_nemesis_acks_all_loses_nothing(nemesis_cluster: tuple[Cluster, ZooKeeperEnsemble]) -> None:
    c, ensemble = nemesis_cluster
    create_topic(c, TOPIC, rf=3, min_isr=2)
    leader = lambda: int(c.state(TOPIC, 0)["leader"])  # noqa: E731
    follower = lambda: next(b for b in c.state(TOPIC, 0)["isr"] if b != leader())  # noqa: E731
    controller = lambda: c.controller() or 1  # noqa: E731

    def kill_restart(pick: Callable[[], int]) -> Callable[[], str]:
        def run() -> str:
            b = pick()
            c.kill9(b)
            time.sleep(3)
            c.restart(b)
            return f"kill -9 broker {b}, restart"

        return run

    def pause(pick: Callable[[], int], seconds: float) -> Callable[[], str]:
        def run() -> str:
            b = pick()
            c.pause(b)
            time.sleep(seconds)
            c.resume(b)
            return f"SIGSTOP broker {b} for {seconds}s, SIGCONT"

        return run

    def expire(pick: Callable[[], int]) -> Callable[[], str]:
        def run() -> str:
            b = pick()
            c.expire_session(b)
            return f"expired broker {b}'s ZooKeeper session"

        return run

    def isolate(pick: Callable[[], int], seconds: float) -> Callable[[], str]:
        def run() -> str:
            b = pick()
            c.isolate(b)
            time.sleep(seconds)
            c.heal(b)
            return f"cut broker {b} off from the other brokers for {seconds}s, healed"

        return run

    def kill_zookeeper_leader() -> str:
        zk_leader = ensemble.leader()
        assert zk_leader is not None, "the ensemble has no leader"
        ensemble.kill(zk_leader)
        others = [s for s in ensemble.client_ports if s != zk_leader]
        ensemble.wait_serving(others)  # the other two elect a new leader
        new_leader = ensemble.leader()
        ensemble.start_server(zk_leader)
        ensemble.wait_serving(list(ensemble.client_ports))
        return f"kill -9 ZooKeeper leader {zk_leader} (new leader {new_leader}), restart"

    rounds = [
        ("leader", kill_restart(leader)),
        ("follower", kill_restart(follower)),
        ("controller", kill_restart(controller)),
        ("zookeeper", kill_zookeeper_leader),
        ("leader", pause(leader, 8)),
        ("leader", expire(leader)),
        ("leader", isolate(leader, 6)),
        ("follower", isolate(follower, 6)),
        ("follower", pause(follower, 2)),
    ]
    writer = Writer(c.bootstrap)
    writer.thread.start()
    report: list[str] = []
    try:
        c.wait_for(lambda: len(writer.acked) >= 100, 60, "the writer's first acknowledged records")
        for n, (target, fault) in enumerate(rounds, 1):
            before = len(writer.acked)
            what = fault()
            c.wait_for(lambda: sorted(c.state(TOPIC, 0)["isr"]) == [1, 2, 3], 90, f"full ISR after round {n}")
            # Writes resume after each fault: wait for acknowledgements beyond what the fault began with.
            c.wait_for(
                lambda before=before: len(writer.acked) >= before + 100,
                90,
                f"writes acknowledged again after round {n}",
            )
            line = f"round {n} ({target}): {what}; acked {before} -> {len(writer.acked)}; state {c.state(TOPIC, 0)}"
            report.append(line)
            print(line)
    finally:
        writer.stop.set()
        writer.thread.join(150)
    c.wait_for(lambda: sorted(c.state(TOPIC, 0)["isr"]) == [1, 2, 3], 60, "full ISR at the end")
    assert len(writer.acked) > 1000, report

    readable = read_all(c, TOPIC, timeout=120)
    lost = [o for o, v in writer.acked.items() if readable.get(o) != v]
    assert not lost, f"{len(lost)} acknowledged records lost or changed, e.g. {lost[:10]}\n" + "\n".join(report)

    hw = max(readable) + 1
    c.wait_for(
        lambda: len({tuple(_replica_records(c, b, hw)) for b in (1, 2, 3)}) == 1,
        60,
        "identical replicas up to the high watermark",
    )
    print(
        f"nemesis: {len(writer.acked)} acknowledged, {len(readable)} readable, high watermark {hw}, {writer.errors} delivery errors"
    )
