"""Operating a cluster with stock tools (issue 27): confluent-kafka's AdminClient and the
``headwater`` CLI against three real brokers.

One cluster for the module: each test uses its own topics.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from headwater.testing.zookeeper import ZooKeeperServer
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic


@pytest.fixture(scope="module")
def ops_cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperServer) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("ops"), "127.0.0.1", zookeeper.port, "/ops-cluster", 3)
    try:
        yield c.start()
    finally:
        c.close()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "headwater.cli.main", *args], capture_output=True, text=True, timeout=120, check=False
    )


def _zk_partitions(c: Cluster, topic: str) -> dict[str, list[int]]:
    data, _ = c.zk.get(f"/brokers/topics/{topic}")
    value = json.loads(data)
    assert value["version"] == 1
    return dict(value["partitions"])


def _metadata_partitions(admin: AdminClient, topic: str) -> dict[int, int]:
    """Partition -> leader, as the cluster's metadata says."""
    md = admin.list_topics(topic, timeout=20).topics[topic]
    return {p.id: p.leader for p in md.partitions.values()}


def test_create_partitions_used_by_producers_and_a_consumer_group(ops_cluster: Cluster) -> None:
    c = ops_cluster
    topic = "grow-me"
    create_topic(c, topic, partitions=2, rf=2, min_isr=1)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    before = _zk_partitions(c, topic)

    # validate_only: accepted, nothing written
    fut = admin.create_partitions([NewPartitions(topic, 4)], validate_only=True, operation_timeout=30)
    fut[topic].result(60)
    assert _zk_partitions(c, topic) == before

    # not above the current count: INVALID_PARTITIONS, nothing written
    fut = admin.create_partitions([NewPartitions(topic, 2)], operation_timeout=30)
    with pytest.raises(KafkaException) as refused:
        fut[topic].result(60)
    assert refused.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    fut = admin.create_partitions([NewPartitions("no-such-topic", 3)], operation_timeout=30)
    with pytest.raises(KafkaException) as unknown:
        fut["no-such-topic"].result(60)
    assert unknown.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    # 2 -> 4: Kafka's znode with every partition, old ones unchanged, new ones rf 2 on distinct brokers
    fut = admin.create_partitions([NewPartitions(topic, 4)], operation_timeout=30)
    fut[topic].result(60)
    after = _zk_partitions(c, topic)
    assert sorted(after) == ["0", "1", "2", "3"]
    assert {p: after[p] for p in before} == before
    for p in ("2", "3"):
        assert len(after[p]) == 2 and len(set(after[p])) == 2 and set(after[p]) <= {1, 2, 3}
    c.wait_for(
        lambda: (
            all(ld >= 0 for ld in _metadata_partitions(admin, topic).values())
            and len(_metadata_partitions(admin, topic)) == 4
        ),
        60,
        "4 partitions with leaders in metadata",
    )

    # 4 -> 6 with the CLI (kafka-topics --alter --partitions)
    out = _cli("topics", "--bootstrap-server", c.bootstrap, "alter", "--topic", topic, "--partitions", "6")
    assert out.returncode == 0, out.stderr
    assert "now has 6 partitions" in out.stdout
    refused_cli = _cli("topics", "--bootstrap-server", c.bootstrap, "alter", "--topic", topic, "--partitions", "5")
    assert refused_cli.returncode == 1 and "INVALID_PARTITIONS" in refused_cli.stderr
    assert len(_zk_partitions(c, topic)) == 6
    c.wait_for(
        lambda: (
            len(_metadata_partitions(admin, topic)) == 6
            and all(ld >= 0 for ld in _metadata_partitions(admin, topic).values())
        ),
        60,
        "6 partitions led",
    )

    # a consumer group reads every partition; producers write to the new ones (explicitly and by key)
    consumer = Consumer(
        {
            "bootstrap.servers": c.bootstrap,
            "group.id": "grow-me-readers",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    consumer.subscribe([topic])
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 2})
    acked: dict[bytes, int] = {}
    errors: list[object] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is None:
            acked[msg.value()] = msg.partition()  # type: ignore[attr-defined]
        else:
            errors.append(err)

    for p in range(6):
        for i in range(5):
            producer.produce(topic, value=f"p{p}-{i}".encode(), partition=p, on_delivery=on_delivery)
    for i in range(60):
        producer.produce(topic, key=f"k{i}".encode(), value=f"keyed-{i}".encode(), on_delivery=on_delivery)
    assert producer.flush(60) == 0
    assert errors == []
    assert {acked[f"p{p}-0".encode()] for p in range(6)} == set(range(6))
    keyed_partitions = {acked[f"keyed-{i}".encode()] for i in range(60)}
    assert keyed_partitions & {2, 3, 4, 5}, keyed_partitions  # the default partitioner uses the new ones too

    seen: dict[bytes, int] = {}
    deadline = time.monotonic() + 120
    try:
        while len(seen) < len(acked) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            seen[msg.value()] = msg.partition()
    finally:
        consumer.close()
    assert seen == acked  # every record once, from the partition it was written to
