"""One log directory, two brokers (issue 45): Apache Kafka 2.3.1 started with the same broker.id on a
log dir Headwater wrote, and Headwater on one Kafka wrote, each after a clean shutdown of the other.

The data: a topic of two partitions in several small segments (idempotent producer: producer state
snapshots), a compacted topic the cleaner has cleaned (cleaner-offset-checkpoint) with a tombstone, a
topic with a committed, an aborted and a committed transaction (.txnindex), a group's committed
offsets (__consumer_offsets) and a deleted topic. The claims, each checked:

- every acknowledged record is served at its offset by the other broker (a stock client reads it
  back), the compacted topic's latest values, read_committed skips exactly the aborted records, the
  group's committed offsets are there;
- nothing is recovered, truncated or rebuilt: no segment's bytes change, and neither broker logs a
  warning or an error about the other's files (Kafka's server.log, Headwater's output);
- the shared files are each other's: meta.properties (version=0, broker.id), the four checkpoints,
  each partition's leader-epoch-checkpoint; what Kafka leaves for later (``.deleted`` segments, a
  ``-delete`` directory of a deleted topic) Headwater finishes.

Both brokers run on the session's ZooKeeper in one chroot (so one cluster.id and the topics' znodes).
Differences that remain are listed in docs/protocol.md, "Mixed clusters with Apache Kafka 2.3", "Log
directories".
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from headwater.testing import java
from headwater.testing.cluster import LocalBroker
from headwater.testing.kafka import KafkaBroker
from headwater.testing.zookeeper import ZooKeeperServer
from tests.mixed.acked import (
    Acked,
    commit_offsets,
    committed_offsets,
    latest_by_key,
    produce,
    read_partition,
)

#: Both brokers alike: one broker's internal topics, quick cleaning and retention checks.
SETTINGS: dict[str, object] = {
    "offsets.topic.replication.factor": 1,
    "offsets.topic.num.partitions": 2,
    "group.initial.rebalance.delay.ms": 0,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
    "transaction.state.log.num.partitions": 1,
    "log.cleaner.backoff.ms": 500,
    "log.retention.check.interval.ms": 1000,
    "delete.topic.enable": "true",
}
KAFKA_HEAP = ["-Xmx384m", "-Xms384m"]
#: a JVM stopped by SIGTERM after its shutdown hooks ran (Kafka's clean shutdown) exits 128 + 15
KAFKA_CLEAN_EXIT = (0, 143)

GROUP = "logdir-group"
COMMITS = {("plain", 0): 100, ("plain", 1): 42, ("compacted", 0): 7}
TOPICS = {"plain": 2, "compacted": 1, "txn": 1, "empty": 1}


class SmallKafka(KafkaBroker):
    """The pinned Kafka 2.3.1 broker with a small heap (a single-broker test needs no 1 GB)."""

    def command(self) -> list[str]:
        cmd = super().command()
        return [cmd[0], *KAFKA_HEAP, *cmd[3:]]


@pytest.fixture(scope="module")
def kafka_jars() -> None:
    if java.unavailable() is not None and not java.UNREACHABLE.exists():
        java.fetch()
    reason = java.unavailable()
    if reason is not None:
        pytest.skip(reason)


@dataclass
class Written:
    plain: Acked
    compacted: Acked
    txn_committed: list[tuple[int, str | None]]
    txn_aborted: list[str | None]


def wait_for(what: str, check: object, timeout: float = 90.0) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def leaders_ready(bootstrap: str, topics: dict[str, int]) -> bool:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    for name, n in topics.items():
        t = md.topics.get(name)
        if t is None or t.error is not None or len(t.partitions) != n:
            return False
        if any(p.leader < 0 or p.error is not None for p in t.partitions.values()):
            return False
    return True


def checkpoint(log_dir: Path, name: str) -> dict[tuple[str, int], int]:
    path = log_dir / name
    if not path.exists():
        return {}
    lines = path.read_text().splitlines()
    assert lines[0] == "0" and int(lines[1]) == len(lines) - 2, f"{name}: {lines[:3]}"
    out = {}
    for line in lines[2:]:
        topic, partition, offset = line.split(" ")
        out[(topic, int(partition))] = int(offset)
    return out


def write_workload(bootstrap: str, log_dir: Path) -> Written:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    small = {"segment.bytes": "2048", "index.interval.bytes": "256"}
    futures = admin.create_topics(
        [
            NewTopic("plain", 2, 1, config=small),
            NewTopic(
                "compacted",
                1,
                1,
                config={
                    "cleanup.policy": "compact",
                    "segment.bytes": "1024",
                    "min.cleanable.dirty.ratio": "0.01",
                    "file.delete.delay.ms": "600000",  # Kafka leaves the cleaned segments as .deleted
                },
            ),
            NewTopic("txn", 1, 1, config=small),
            NewTopic("empty", 1, 1),  # never written: Kafka leaves its leader-epoch-checkpoint empty
            NewTopic("gone", 1, 1),
        ]
    )
    for f in futures.values():
        f.result(60)
    wait_for("leaders", lambda: leaders_ready(bootstrap, {**TOPICS, "gone": 1}))

    idempotent = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    plain = Acked("plain")
    for p in (0, 1):
        produce(idempotent, plain, [(f"k{i}", f"plain-{p}-{i:04d}-" + "x" * 24) for i in range(150)], p, every=10)
    compacted = Acked("compacted")
    pairs: list[tuple[str | None, str | None]] = [(f"k{i}", f"v{r}-{i}") for r in range(8) for i in range(10)]
    produce(idempotent, compacted, [*pairs, ("k9", None)], 0, every=5)
    gone = Acked("gone")
    produce(idempotent, gone, [(None, "soon gone")] * 5, 0)
    assert not plain.failed and not compacted.failed and not gone.failed

    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "logdir-txn", "linger.ms": 0})
    txn.init_transactions(60)
    txn_acked = Acked("txn")
    aborted: list[str | None] = []
    for r, outcome in enumerate(("commit", "abort", "commit")):
        txn.begin_transaction()
        values: list[tuple[str | None, str | None]] = [(None, f"{outcome}-{r}-{i}") for i in range(10)]
        produce(txn, txn_acked, values, 0, every=5)
        if outcome == "commit":
            txn.commit_transaction(60)
        else:
            txn.abort_transaction(60)
            aborted += [v for _, v in values]
    committed = [(o, v) for o, _, v in txn_acked.sorted(0) if v not in aborted]

    commit_offsets(bootstrap, GROUP, COMMITS)
    wait_for(
        "the cleaner to clean the compacted topic",
        lambda: checkpoint(log_dir, "cleaner-offset-checkpoint").get(("compacted", 0), 0) > 0,
    )
    for f in admin.delete_topics(["gone"]).values():
        f.result(60)
    wait_for("the deleted topic's log to go", lambda: not (log_dir / "gone-0").exists())
    return Written(plain, compacted, committed, aborted)


def check_served(bootstrap: str, written: Written) -> None:
    """Every acknowledged record at its offset; latest values; committed transactions; offsets."""
    for p in (0, 1):
        assert read_partition(bootstrap, "plain", p) == written.plain.sorted(p)
    got = read_partition(bootstrap, "compacted", 0)
    assert latest_by_key(got) == latest_by_key(written.compacted.sorted(0))
    acked_at = {o: (k, v) for o, k, v in written.compacted.sorted(0)}
    assert all(acked_at[o] == (k, v) for o, k, v in got), "a compacted record not as acknowledged"
    assert len(got) < written.compacted.count(), "the compacted topic was never cleaned"
    txn = read_partition(bootstrap, "txn", 0, committed_only=True)
    assert [(o, v) for o, _, v in txn] == written.txn_committed
    everything = [v for _, _, v in read_partition(bootstrap, "txn", 0)]
    assert [v for v in everything if v in written.txn_aborted] == written.txn_aborted
    assert committed_offsets(bootstrap, GROUP, list(COMMITS)) == COMMITS


def files(log_dir: Path) -> dict[str, str]:
    """Every file below the log dir (relative path → sha256), the lock left out."""
    out = {}
    for f in sorted(log_dir.rglob("*")):
        if f.is_file() and f.name != ".lock":
            out[str(f.relative_to(log_dir))] = hashlib.sha256(f.read_bytes()).hexdigest()[:16]
    return out


def segments(snapshot: dict[str, str]) -> dict[str, str]:
    return {name: h for name, h in snapshot.items() if name.endswith(".log")}


CHECKPOINTS = (
    "recovery-point-offset-checkpoint",
    "replication-offset-checkpoint",
    "log-start-offset-checkpoint",
    "cleaner-offset-checkpoint",
)


def shared_state(log_dir: Path) -> dict[str, object]:
    """The four checkpoints (parsed: Kafka's format, or the parse fails) and every partition's
    leader-epoch-checkpoint: what a broker that only served reads must leave as it found them."""
    state: dict[str, object] = {name: checkpoint(log_dir, name) for name in CHECKPOINTS}
    for f in sorted(log_dir.glob("*/leader-epoch-checkpoint")):
        if f.parent.name.endswith("-delete"):  # a deleted topic's (Headwater removes it at start)
            continue
        lines = f.read_text().splitlines()
        assert lines[0] == "0" and int(lines[1]) == len(lines) - 2, f"{f}: {lines[:3]}"
        state[f.parent.name] = [tuple(map(int, line.split(" "))) for line in lines[2:]]
    return state


def meta_properties(log_dir: Path) -> dict[str, str]:
    lines = (log_dir / "meta.properties").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


#: Kafka's log lines about the files it found: anything at WARN and above, and the INFO lines of a
#: recovery or a rebuild (Log.loadSegments, LogSegment.recover, ProducerStateManager).
KAFKA_COMPLAINT = re.compile(r"\] (WARN|ERROR|FATAL) |[Rr]ecovering|[Rr]ebuild|[Cc]orrupt|[Tt]runcat")


#: Kafka's complaints about its clients, not the files: an AdminClient of the test's polls that
#: closed its connection before the answer
NOT_ABOUT_FILES = re.compile(r"Attempting to send response via channel for which there is no open connection")


def kafka_complaints(server_log: Path) -> list[str]:
    lines = server_log.read_text(errors="replace").splitlines()
    return [line for line in lines if KAFKA_COMPLAINT.search(line) and not NOT_ABOUT_FILES.search(line)]


def headwater_complaints(output: str) -> list[str]:
    return [line for line in output.splitlines() if re.search(r" (WARNING|ERROR|CRITICAL) ", line)]


@pytest.fixture
def zk_chroot(zookeeper: ZooKeeperServer, kafka_jars: None, request: pytest.FixtureRequest) -> str:
    return f"{zookeeper.connect}/logdir-{request.node.name[:40]}-{time.monotonic_ns()}"


@pytest.fixture
def brokers(tmp_path: Path, zk_chroot: str) -> Iterator[tuple[LocalBroker, SmallKafka, Path]]:
    log_dir = tmp_path / "logs"
    hw = LocalBroker(tmp_path, 0, zk_chroot, {**SETTINGS, "log.dirs": log_dir})
    kafka = SmallKafka(tmp_path, 0, zk_chroot, {**SETTINGS, "log.dirs": log_dir})
    try:
        yield hw, kafka, log_dir
    finally:
        hw.stop()
        kafka.stop()


def test_kafka_serves_a_log_dir_headwater_wrote(brokers: tuple[LocalBroker, SmallKafka, Path]) -> None:
    hw, kafka, log_dir = brokers
    hw.start()
    written = write_workload(hw.bootstrap, log_dir)
    assert hw.stop() == 0
    left, shared = files(log_dir), shared_state(log_dir)
    assert checkpoint(log_dir, "recovery-point-offset-checkpoint")[("plain", 0)] == 150
    assert meta_properties(log_dir) == {"version": "0", "broker.id": "0", "cluster.id": meta_cluster_id(hw)}

    kafka.start(timeout=120)
    wait_for("Kafka's leaders", lambda: leaders_ready(kafka.bootstrap, TOPICS))
    check_served(kafka.bootstrap, written)
    assert kafka.stop() in KAFKA_CLEAN_EXIT
    after = files(log_dir)
    assert kafka_complaints(kafka.dir / "server.log") == []
    assert shared_state(log_dir) == shared
    assert segments(after) == segments(left), "Kafka changed a segment"
    assert {n: h for n, h in after.items() if n.endswith((".index", ".timeindex", ".txnindex"))} == {
        n: h for n, h in left.items() if n.endswith((".index", ".timeindex", ".txnindex"))
    }, "Kafka rebuilt an index"


def meta_cluster_id(hw: LocalBroker) -> str:
    m = re.search(r"started \(cluster (\S+)\)", hw.output.read_text())
    assert m, "Headwater logs no cluster id"
    return m.group(1)


def test_headwater_serves_a_log_dir_kafka_wrote(brokers: tuple[LocalBroker, SmallKafka, Path]) -> None:
    hw, kafka, log_dir = brokers
    kafka.start(timeout=120)
    written = write_workload(kafka.bootstrap, log_dir)
    assert kafka.stop() in KAFKA_CLEAN_EXIT
    left, shared = files(log_dir), shared_state(log_dir)
    assert checkpoint(log_dir, "recovery-point-offset-checkpoint")[("plain", 0)] == 150
    assert any(n.endswith(".deleted") for n in left), "Kafka left no .deleted segment to finish"
    assert any(n.split("/")[0].endswith("-delete") for n in left), "Kafka left no deleted topic's dir"
    assert meta_properties(log_dir) == {"version": "0", "broker.id": "0"}

    hw.start(timeout=60)
    wait_for("Headwater's leaders", lambda: leaders_ready(hw.bootstrap, TOPICS))
    check_served(hw.bootstrap, written)
    assert hw.stop() == 0
    after = files(log_dir)
    assert headwater_complaints(hw.tail(10**7)) == []
    assert shared_state(log_dir) == shared
    assert not [n for n in after if n.endswith(".deleted") or n.split("/")[0].endswith("-delete")]
    kept = {n: h for n, h in segments(left).items() if not n.split("/")[0].endswith("-delete")}
    assert segments(after) == kept, "Headwater changed a segment"
