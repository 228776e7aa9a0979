"""Nemesis: acks=all writes under kill -9, pause, session expiry and network cuts lose nothing.

RF=3, min.insync.replicas=2, one stock producer (librdkafka, acks=all) writing the whole time
and, beside it into the same partition, a transactional one (librdkafka: five records per
transaction, every third aborted) while, round after round, the leader, the controller or a follower is killed, paused, expired
or cut off, and then brought back; and the leader of the cluster's ZooKeeper ensemble (three real
servers, as production runs) is killed -9 and restarted. Afterwards: every acknowledged record is readable at the
offset it was acknowledged at, and the three replicas hold identical records up to the high
watermark. For the transactions (issue 41), with a read_committed consumer (librdkafka): every
record of a committed transaction is there exactly once, no record of an aborted one is, a
transaction whose outcome the producer never learned (a fault during its commit) is there whole
or not at all, and the last stable offset comes up to the high watermark once the writers stop
(no hanging transaction). Bounded: a fixed list of rounds, each with its own time limits.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer

from headwater.client.consumer import Consumer as HeadwaterConsumer
from headwater.client.raw import READ_COMMITTED
from headwater.protocol.records.record import iter_batches
from headwater.testing.zookeeper_ensemble import ZooKeeperEnsemble
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic, read_all
from tests.harness.records import read_partition

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


class TxnWriter:
    """A librdkafka transactional producer writing transactions of five records in a thread, every
    third one aborted; sorts each transaction by what the producer was told: committed, aborted, or
    unknown (its commit or abort failed: the next producer's init_transactions fences this one and
    completes or aborts it -- either way the transaction must be all there or not at all)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.committed: list[list[bytes]] = []
        self.aborted: list[list[bytes]] = []
        self.unknown: list[list[bytes]] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self._dropped: list[Producer] = []  # fenced or failed instances, kept (destroying one can block)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _producer(self) -> Producer:
        p = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": "nemesis-txn",
                "linger.ms": 5,
                "transaction.timeout.ms": 30000,
                "message.timeout.ms": 30000,
                "retry.backoff.ms": 200,
            }
        )
        p.init_transactions(60)
        return p

    def _end(self, p: Producer, commit: bool) -> None:
        """Commit or abort; a retriable failure is retried (as librdkafka allows) a few times."""
        for attempt in range(3):
            try:
                if commit:
                    p.commit_transaction(30)
                else:
                    p.abort_transaction(30)
                return
            except KafkaException as e:
                if not e.args[0].retriable() or attempt == 2:
                    raise

    def _run(self) -> None:
        p: Producer | None = None
        n = 0
        while not self.stop.is_set():
            if p is None:
                try:
                    p = self._producer()
                except KafkaException as e:
                    self.errors.append(f"init: {e}")
                    time.sleep(1)
                    continue
            values = [f"t{n}-{i}".encode() for i in range(5)]
            commit = n % 3 != 2
            n += 1
            try:
                p.begin_transaction()
                for v in values:
                    p.produce(TOPIC, value=v, partition=0)
                self._end(p, commit)
                (self.committed if commit else self.aborted).append(values)
                continue
            except KafkaException as e:
                self.errors.append(f"transaction {n - 1}: {e}")
                if e.args[0].txn_requires_abort():
                    try:
                        self._end(p, False)
                        self.aborted.append(values)
                        continue
                    except KafkaException as e2:
                        self.errors.append(f"abort of transaction {n - 1}: {e2}")
            self.unknown.append(values)
            self._dropped.append(p)
            p = None  # a fresh producer: its init_transactions settles this transaction
        if p is not None:
            self._dropped.append(p)


def _lso_and_hw(c: Cluster) -> tuple[int, int]:
    """Partition 0's last stable offset and high watermark (ListOffsets latest at both isolation levels)."""

    async def main() -> tuple[int, int]:
        async with HeadwaterConsumer(c.bootstrap, isolation_level=READ_COMMITTED) as committed:
            lso = await committed.latest_offset(TOPIC, 0)
        async with HeadwaterConsumer(c.bootstrap) as uncommitted:
            return lso, await uncommitted.latest_offset(TOPIC, 0)

    return asyncio.run(main())


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
            transaction_state_log_num_partitions=3,  # RF 3, min ISR 2 as Kafka's defaults
            transaction_abort_timed_out_transaction_cleanup_interval_ms=2000,
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
    txn_writer = TxnWriter(c.bootstrap)
    txn_writer.thread.start()
    report: list[str] = []
    try:
        c.wait_for(lambda: len(writer.acked) >= 100, 60, "the writer's first acknowledged records")
        c.wait_for(lambda: len(txn_writer.committed) >= 3, 90, "the first committed transactions")
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
        txn_writer.stop.set()
        writer.thread.join(150)
        txn_writer.thread.join(150)
    c.wait_for(lambda: sorted(c.state(TOPIC, 0)["isr"]) == [1, 2, 3], 60, "full ISR at the end")
    assert len(writer.acked) > 1000, report
    # no hanging transaction: the last stable offset reaches the high watermark (a transaction the
    # writer lost track of is aborted by its timeout, 30 s, checked every 2 s)
    stable: list[tuple[int, int]] = []

    def lso_at_hw() -> bool:
        stable.append(_lso_and_hw(c))
        return stable[-1][0] == stable[-1][1]

    try:
        c.wait_for(lso_at_hw, 90, "the LSO at the high watermark")
    except AssertionError as e:
        raise AssertionError(f"{e}; last (LSO, high watermark): {stable[-1:]}") from None
    seen = [v for _, _, v in read_partition(c.bootstrap, TOPIC, 0, 120, "read_committed")]
    counts: dict[bytes, int] = {}
    for v in seen:
        counts[v] = counts.get(v, 0) + 1
    missing = [v for t in txn_writer.committed for v in t if counts.get(v) != 1]
    assert not missing, f"committed transactional records missing or repeated: {missing[:10]}\n" + "\n".join(report)
    visible = [v for t in txn_writer.aborted for v in t if v in counts]
    assert not visible, f"aborted records visible to read_committed: {visible[:10]}\n" + "\n".join(report)
    partial = [t for t in txn_writer.unknown if {counts.get(v, 0) for v in t} not in ({0}, {1})]
    assert not partial, f"transactions partly visible: {partial[:3]}"
    assert len(txn_writer.committed) >= 10 and txn_writer.aborted, (len(txn_writer.committed), txn_writer.errors)
    plain = {v for v in counts if v.startswith(b"n")}
    assert plain >= set(writer.acked.values())  # the plain records are read_committed too

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
    print(
        f"nemesis transactions: {len(txn_writer.committed)} committed, {len(txn_writer.aborted)} aborted, "
        f"{len(txn_writer.unknown)} unknown; {len(txn_writer.errors)} errors: {txn_writer.errors[:5]}"
    )
