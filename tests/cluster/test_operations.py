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
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
)

from headwater.testing.zookeeper import ZooKeeperServer
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic, produce_acked


@pytest.fixture(scope="module")
def ops_cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperServer) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path_factory.mktemp("ops"),
        "127.0.0.1",
        zookeeper.port,
        "/ops-cluster",
        3,
        log_retention_check_interval_ms=500,
        # leadership returns to preferred replicas only when a test asks (ElectLeaders)
        auto_leader_rebalance_enable=False,
    )
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


def _led_partitions_seen_by_every_broker(c: Cluster, topic: str) -> set[int]:
    """How many partitions with a leader each broker's own metadata lists for ``topic``."""
    import socket

    from headwater.protocol.apis import METADATA
    from headwater.protocol.frames import decode_response, encode_request

    counts = set()
    for b in c.brokers.values():
        with socket.create_connection(("127.0.0.1", b.port), timeout=5) as sock:
            sock.settimeout(5)
            sock.sendall(encode_request(METADATA, 1, 1, "ops-test", {"topics": [{"name": topic}]}))
            size = int.from_bytes(sock.recv(4, socket.MSG_WAITALL), "big")
            frame = sock.recv(size, socket.MSG_WAITALL)
        _, body = decode_response(METADATA, 1, memoryview(frame))
        (t,) = body["topics"]
        counts.add(sum(1 for p in t["partitions"] if p["leader_id"] >= 0))
    return counts


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

    c.wait_for(lambda: _led_partitions_seen_by_every_broker(c, topic) == {6}, 60, "every broker to know 6 leaders")

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


def _segment_files(c: Cluster, broker: int, topic: str, partition: int = 0) -> list[str]:
    d = Path(c.brokers[broker].log_dir) / f"{topic}-{partition}"
    return sorted(f.name for f in d.glob("*.log"))


def _zk_config(c: Cluster, topic: str) -> dict[str, str]:
    data, _ = c.zk.get(f"/config/topics/{topic}")
    value = json.loads(data)
    assert value["version"] == 1
    return dict(value["config"])


def _config_changes(c: Cluster) -> dict[str, dict[str, object]]:
    return {n: json.loads(c.zk.get(f"/config/changes/{n}")[0]) for n in c.zk.get_children("/config/changes")}


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")  # Kafka 2.3's API
def test_alter_configs_live_on_every_broker(ops_cluster: Cluster) -> None:
    c = ops_cluster
    topic = "retained"
    create_topic(c, topic, partitions=1, rf=3, min_isr=1, configs={"segment.bytes": "1024"})
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)

    # records two hours old, over many 1 KiB segments, on all three replicas
    old = int(time.time() * 1000) - 2 * 3600 * 1000
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(40):
        producer.produce(topic, value=b"x" * 100 + str(i).encode(), partition=0, timestamp=old)
        assert producer.flush(60) == 0  # one batch per record: a batch never spans segments
    for b in c.brokers:
        c.wait_for(lambda b=b: len(_segment_files(c, b, topic)) >= 3, 60, f"broker {b} to hold several segments")
    low, high = _consumer_watermarks(c, topic)
    assert (low, high) == (0, 40)
    changes_before = _config_changes(c)

    # invalid or unknown values: INVALID_CONFIG, nothing stored, no change notification
    for bad in ({"retention.ms": "soon"}, {"no.such.config": "1"}, {"cleanup.policy": "shred"}):
        fut = admin.alter_configs([ConfigResource(ConfigResource.Type.TOPIC, topic, set_config=bad)])
        with pytest.raises(KafkaException) as refused:
            fut[resource].result(60)
        assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG, bad
    assert _zk_config(c, topic) == {"segment.bytes": "1024", "min.insync.replicas": "1"}
    assert _config_changes(c) == changes_before

    # retention lowered live: the old segments go on every replica, without a restart
    new = {"segment.bytes": "1024", "min.insync.replicas": "1", "retention.ms": "60000"}
    fut = admin.alter_configs([ConfigResource(ConfigResource.Type.TOPIC, topic, set_config=new)])
    fut[resource].result(60)
    assert _zk_config(c, topic) == new
    added = {n: v for n, v in _config_changes(c).items() if n not in changes_before}
    assert list(added.values()) == [{"version": 2, "entity_path": f"topics/{topic}"}]
    assert all(n.startswith("config_change_") and len(n) == len("config_change_") + 10 for n in added)

    # every record is past retention and below the high watermark: as Kafka 2.3 does, each replica
    # deletes every old segment and rolls and deletes the active one too (how operators purge a
    # topic), leaving one empty segment at the log end
    def purged(b: int) -> bool:
        files = _segment_files(c, b, topic)
        return len(files) == 1 and int(files[0].split(".")[0]) == 40

    for b in c.brokers:
        c.wait_for(lambda b=b: purged(b), 90, f"broker {b} to delete every segment past retention")
    c.wait_for(lambda: _consumer_watermarks(c, topic) == (40, 40), 60, "the log start offset to move")

    # DescribeConfigs says where each value comes from
    described = admin.describe_configs([resource])[resource].result(60)
    assert described["retention.ms"].value == "60000"
    assert described["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert described["flush.ms"].source == ConfigSource.DEFAULT_CONFIG.value

    # the CLI (kafka-configs, IncrementalAlterConfigs): other overrides stay; min.insync.replicas is live
    out = _cli(
        "configs", "--bootstrap-server", c.bootstrap, "--alter", "--entity-type", "topics", "--entity-name", topic,
        "--add-config", "min.insync.replicas=4,cleanup.policy=[compact,delete]", "--delete-config", "segment.bytes",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert _zk_config(c, topic) == {
        "min.insync.replicas": "4",
        "retention.ms": "60000",
        "cleanup.policy": "compact,delete",
    }
    refused_cli = _cli(
        "configs", "--bootstrap-server", c.bootstrap, "--alter", "--entity-type", "topics", "--entity-name", topic,
        "--add-config", "retention.ms=-5x",
    )  # fmt: skip
    assert refused_cli.returncode == 1 and "INVALID_CONFIG" in refused_cli.stderr
    assert _zk_config(c, topic)["retention.ms"] == "60000"
    c.wait_for(lambda: _produce_error(c, topic) == KafkaError.NOT_ENOUGH_REPLICAS, 60, "min.insync.replicas=4 to apply")
    out = _cli(
        "configs", "--bootstrap-server", c.bootstrap, "--alter", "--entity-type", "topics", "--entity-name", topic,
        "--add-config", "min.insync.replicas=2",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    c.wait_for(lambda: _produce_error(c, topic) is None, 60, "min.insync.replicas=2 to apply")
    # confluent-kafka's incremental_alter_configs (IncrementalAlterConfigs v0): one key deleted, the rest kept
    op = ConfigEntry("cleanup.policy", None, incremental_operation=AlterConfigOpType.DELETE)
    fut = admin.incremental_alter_configs([ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[op])])
    fut[resource].result(60)
    assert _zk_config(c, topic) == {"min.insync.replicas": "2", "retention.ms": "60000"}
    described_cli = _cli(
        "configs", "--bootstrap-server", c.bootstrap, "--describe", "--entity-type", "topics", "--entity-name", topic
    )
    assert described_cli.returncode == 0, described_cli.stderr
    assert described_cli.stdout.strip() == (f"Configs for topic '{topic}' are min.insync.replicas=2,retention.ms=60000")


def _consumer_watermarks(c: Cluster, topic: str) -> tuple[int, int]:
    from confluent_kafka import TopicPartition

    cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "watermarks"})
    try:
        low, high = cons.get_watermark_offsets(TopicPartition(topic, 0), timeout=20)
    finally:
        cons.close()
    return int(low), int(high)


def _produce_error(c: Cluster, topic: str) -> int | None:
    """The error code of one acks=all record sent without retries (None: acknowledged)."""
    result: list[object] = []
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "retries": 0, "linger.ms": 0})
    p.produce(topic, key=b"probe", value=b"probe", partition=0, on_delivery=lambda err, msg: result.append(err))
    p.flush(30)
    assert len(result) == 1
    err = result[0]
    return None if err is None else int(err.code())  # type: ignore[attr-defined]


def test_delete_records_on_every_replica(ops_cluster: Cluster, tmp_path: Path) -> None:
    from confluent_kafka import TopicPartition

    c = ops_cluster
    topic = "trimmed"
    create_topic(c, topic, partitions=1, rf=3, min_isr=1, configs={"segment.bytes": "1024"})
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(30):
        producer.produce(topic, value=b"x" * 100 + str(i).encode(), partition=0)
        assert producer.flush(60) == 0  # one batch per record, several segments
    admin = AdminClient({"bootstrap.servers": c.bootstrap})

    # confluent-kafka's delete_records: the low watermark once every in-sync replica moved
    fut = admin.delete_records([TopicPartition(topic, 0, 12)], operation_timeout=30)
    assert fut[TopicPartition(topic, 0)].result(60).low_watermark == 12
    assert _consumer_watermarks(c, topic) == (12, 30)
    for b in c.brokers:  # followers moved theirs: the segments wholly below 12 are gone everywhere
        c.wait_for(
            lambda b=b: int(_segment_files(c, b, topic)[0].split(".")[0]) > 5, 60, f"broker {b} to drop old segments"
        )
    cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "trimmed", "auto.offset.reset": "earliest"})
    cons.assign([TopicPartition(topic, 0, 0)])
    first = None
    deadline = time.monotonic() + 60
    while first is None and time.monotonic() < deadline:
        msg = cons.poll(0.5)
        if msg is not None and not msg.error():
            first = msg.offset()
    cons.close()
    assert first == 12  # offset 0 is out of range now: the consumer resets to the log start

    # above the high watermark: OFFSET_OUT_OF_RANGE, nothing moved
    fut = admin.delete_records([TopicPartition(topic, 0, 31)], operation_timeout=30)
    with pytest.raises(KafkaException) as refused:
        fut[TopicPartition(topic, 0)].result(60)
    assert refused.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    assert _consumer_watermarks(c, topic) == (12, 30)

    # the CLI with Kafka's JSON; -1 is the high watermark
    spec = tmp_path / "offsets.json"
    spec.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": -1}], "version": 1}))
    out = _cli("delete-records", "--bootstrap-server", c.bootstrap, "--offset-json-file", str(spec))
    assert out.returncode == 0, out.stderr
    assert f"partition: {topic}-0\tlow_watermark: 30" in out.stdout
    assert _consumer_watermarks(c, topic) == (30, 30)


def test_preferred_election_after_a_restart_and_log_dirs(ops_cluster: Cluster, tmp_path: Path) -> None:
    """A broker restart leaves leadership elsewhere; ElectLeaders (confluent-kafka, kafka-python and
    the CLI) moves it back to the preferred replica. DescribeLogDirs reports each replica's size."""
    from kafka.admin import KafkaAdminClient

    c = ops_cluster
    topic = "elect-me"
    create_topic(c, topic, partitions=3, rf=3, min_isr=1)
    acked = produce_acked(c, topic, [b"x" * 100 for _ in range(30)])
    assert len(acked) == 30
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    controller = c.controller()
    replicas = _zk_partitions(c, topic)
    # a partition whose preferred replica is not the controller: restarting it moves no controller
    p, preferred = next((int(p), rs[0]) for p, rs in sorted(replicas.items()) if rs[0] != controller)
    assert c.state(topic, p)["leader"] == preferred

    c.stop(preferred)
    c.wait_for(lambda: c.state(topic, p)["leader"] not in (preferred, -1), 60, f"{topic}-{p} led elsewhere")
    c.restart(preferred)
    c.wait_for(lambda: preferred in c.state(topic, p)["isr"], 90, f"broker {preferred} back in the ISR of {topic}-{p}")
    assert c.state(topic, p)["leader"] != preferred  # no automatic rebalance in this cluster

    # confluent-kafka: elected; the controller's state and every client's metadata show it
    fut = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, p)])
    result = fut.result(60)
    assert result[TopicPartition(topic, p)] is None
    assert c.state(topic, p)["leader"] == preferred
    c.wait_for(lambda: _metadata_partitions(admin, topic)[p] == preferred, 30, "metadata to show the preferred leader")
    # asked again: nothing to do (ELECTION_NOT_NEEDED), leadership unchanged
    again = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, p)]).result(60)
    err = again[TopicPartition(topic, p)]
    assert err is not None and err.code() == KafkaError.ELECTION_NOT_NEEDED
    unknown = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("no-such-topic", 0)]).result(60)
    err = unknown[TopicPartition("no-such-topic", 0)]
    assert err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    # kafka-python, every partition: already preferred everywhere (ELECTION_NOT_NEEDED is no error to it)
    kp = KafkaAdminClient(bootstrap_servers=c.bootstrap, request_timeout_ms=30000)
    try:
        response = kp.elect_leaders(0, {topic: [0, 1, 2]}, timeout_ms=30000)
        codes = {
            (r.topic, x.partition_id): x.error_code
            for r in response.replica_election_results
            for x in r.partition_result
        }
        assert codes == {(topic, q): KafkaError.ELECTION_NOT_NEEDED for q in range(3)}
        described = kp.describe_log_dirs({topic: [0, 1, 2]})
    finally:
        kp.close()

    # the CLI (kafka-leader-election): leadership moved away again, then back with --path-to-json-file
    c.stop(preferred)
    c.wait_for(lambda: c.state(topic, p)["leader"] not in (preferred, -1), 60, f"{topic}-{p} led elsewhere")
    c.restart(preferred)
    c.wait_for(lambda: preferred in c.state(topic, p)["isr"], 90, f"broker {preferred} back in the ISR")
    spec = tmp_path / "elect.json"
    spec.write_text(json.dumps({"partitions": [{"topic": topic, "partition": q} for q in range(3)]}))
    out = _cli(
        "leader-election",
        "--bootstrap-server",
        c.bootstrap,
        "--election-type",
        "PREFERRED",
        "--path-to-json-file",
        str(spec),
    )
    assert out.returncode == 0, out.stderr
    assert f"Successfully completed leader election (PREFERRED) for partitions {topic}-{p}" in out.stdout
    assert c.state(topic, p)["leader"] == preferred
    out = _cli(
        "leader-election", "--bootstrap-server", c.bootstrap, "--election-type", "preferred", "--all-topic-partitions"
    )
    assert out.returncode == 0, out.stderr
    assert f"{topic}-{p}" in out.stdout and "Valid replica already elected" in out.stdout
    bad = _cli(
        "leader-election",
        "--bootstrap-server",
        c.bootstrap,
        "--election-type",
        "preferred",
        "--topic",
        "no-such-topic",
        "--partition",
        "0",
    )
    assert bad.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in bad.stderr

    # DescribeLogDirs: every replica of the topic, with its size on disk (kafka-python, then the CLI)
    def disk_size(b: int, q: int) -> int:
        d = Path(c.brokers[b].log_dir) / f"{topic}-{q}"
        return sum(f.stat().st_size for f in d.glob("*.log"))

    sizes_kp = {}
    for broker in described:
        for log_dir in broker["log_dirs"]:
            assert log_dir["error_code"] == 0
            for t in log_dir["topics"]:
                for part in t["partitions"]:
                    sizes_kp[(broker["broker"], t["name"], part["partition_index"])] = part["partition_size"]
    assert {(b, q) for b, _, q in sizes_kp} == {(b, q) for b in (1, 2, 3) for q in range(3)}
    out = _cli("log-dirs", "--describe", "--bootstrap-server", c.bootstrap, "--topic-list", topic)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["version"] == 1 and sorted(b["broker"] for b in doc["brokers"]) == [1, 2, 3]
    seen = {}
    for broker in doc["brokers"]:
        (log_dir,) = broker["logDirs"]
        assert log_dir["error"] is None
        assert Path(log_dir["logDir"]) == Path(c.brokers[broker["broker"]].log_dir).resolve()
        for part in log_dir["partitions"]:
            assert part["partition"].startswith(f"{topic}-") and part["isFuture"] is False
            seen[(broker["broker"], int(part["partition"].rsplit("-", 1)[1]))] = part
    assert set(seen) == {(b, q) for b in (1, 2, 3) for q in range(3)}
    for (b, q), part in seen.items():
        assert part["size"] == disk_size(b, q)
        assert part["offsetLag"] >= 0
        assert sizes_kp[(b, topic, q)] == part["size"]
    for b in (1, 2, 3):  # the 30 acknowledged records of 100 bytes are on every replica
        assert sum(seen[(b, q)]["size"] for q in range(3)) >= 30 * 100
    out = _cli(
        "log-dirs",
        "--describe",
        "--bootstrap-server",
        c.bootstrap,
        "--broker-list",
        str(preferred),
        "--topic-list",
        topic,
    )
    assert out.returncode == 0, out.stderr
    assert [b["broker"] for b in json.loads(out.stdout.strip().splitlines()[-1])["brokers"]] == [preferred]


def _send_error(c: Cluster, topic: str, size: int) -> int | None:
    """The error code of one acks=all record of ``size`` bytes (None: acknowledged)."""
    result: list[object] = []
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "retries": 0, "linger.ms": 0})
    p.produce(topic, value=b"v" * size, partition=0, on_delivery=lambda err, msg: result.append(err))
    p.flush(30)
    assert len(result) == 1
    err = result[0]
    return None if err is None else int(err.code())  # type: ignore[attr-defined]


def _zk_json(c: Cluster, path: str) -> dict[str, object] | None:
    if not c.zk.exists(path):
        return None
    return dict(json.loads(c.zk.get(path)[0]))


def test_dynamic_broker_configs(ops_cluster: Cluster) -> None:
    """kafka-configs --entity-type brokers: per-broker and cluster-default configs stored in
    ZooKeeper with a notification, applied live, described with their sources; invalid ones
    refused with nothing stored."""
    from headwater.client.admin import NewTopic
    from headwater.client.sync import SyncAdmin

    c = ops_cluster
    topic = "dyn-broker"
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    with SyncAdmin(c.bootstrap) as hw:  # one replica, on broker 2
        assert hw.create_topics([NewTopic(topic, assignments={0: [2]})]) == {topic: None}
    c.wait_for(lambda: _metadata_partitions(admin, topic).get(0) == 2, 60, f"{topic}-0 led by broker 2")
    assert _send_error(c, topic, 5000) is None
    try:
        # per-broker, with confluent-kafka's incremental_alter_configs (sent to broker 2)
        res = ConfigResource(
            ConfigResource.Type.BROKER,
            "2",
            incremental_configs=[ConfigEntry("message.max.bytes", "2000", incremental_operation=AlterConfigOpType.SET)],
        )
        admin.incremental_alter_configs([res])[res].result(60)
        assert _zk_json(c, "/config/brokers/2") == {"version": 1, "config": {"message.max.bytes": "2000"}}
        changes = _config_changes(c)
        assert {"version": 2, "entity_path": "brokers/2"} in changes.values()
        # applied live: broker 2's partition refuses what it accepted a moment ago
        c.wait_for(
            lambda: _send_error(c, topic, 5000) == KafkaError.MSG_SIZE_TOO_LARGE, 30, "message.max.bytes applied"
        )
        assert _send_error(c, topic, 1000) is None
        described = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "2")])
        entries = next(iter(described.values())).result(60)
        assert entries["message.max.bytes"].value == "2000"
        assert entries["message.max.bytes"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
        other = next(iter(admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "1")]).values())).result(
            60
        )
        assert other["message.max.bytes"].value == "1000012"
        assert other["message.max.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
        assert other["broker.id"].source == ConfigSource.STATIC_BROKER_CONFIG.value and other["broker.id"].is_read_only

        # cluster-wide default with the CLI (kafka-configs --entity-default)
        out = _cli(
            "configs", "--bootstrap-server", c.bootstrap, "--alter", "--entity-type", "brokers",
            "--entity-default", "--add-config", "follower.replication.throttled.rate=5000000,message.max.bytes=3000",
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert "Completed updating default config for brokers in the cluster." in out.stdout
        assert _zk_json(c, "/config/brokers/<default>") == {
            "version": 1,
            "config": {"follower.replication.throttled.rate": "5000000", "message.max.bytes": "3000"},
        }
        assert {"version": 2, "entity_path": "brokers/<default>"} in _config_changes(c).values()
        out = _cli("configs", "--bootstrap-server", c.bootstrap, "--describe", "--entity-type", "brokers",
                   "--entity-name", "2")  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert "Dynamic configs for broker 2 are:" in out.stdout
        assert (
            "  message.max.bytes=2000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:message.max.bytes=2000, "
            "DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=3000, DEFAULT_CONFIG:message.max.bytes=1000012}"
        ) in out.stdout
        assert "  follower.replication.throttled.rate=5000000 sensitive=false" in out.stdout
        c.wait_for(
            lambda: (
                next(iter(admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "1")]).values()))
                .result(60)["message.max.bytes"]
                .source
                == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
            ),
            30,
            "broker 1 to see the cluster default",
        )

        # refused, nothing stored: a static-only config, a bad value, another broker's id
        before = (_zk_json(c, "/config/brokers/2"), _zk_json(c, "/config/brokers/<default>"))
        for name, value in (("broker.id", "7"), ("message.max.bytes", "big"), ("log.retention.ms", "-5")):
            bad = _cli("configs", "--bootstrap-server", c.bootstrap, "--alter", "--entity-type", "brokers",
                       "--entity-name", "2", "--add-config", f"{name}={value}")  # fmt: skip
            assert bad.returncode == 1 and "INVALID_CONFIG" in bad.stderr, (name, bad.stderr)
        res = ConfigResource(
            ConfigResource.Type.BROKER,
            "2",
            incremental_configs=[ConfigEntry("log.dirs", "/tmp/x", incremental_operation=AlterConfigOpType.SET)],
        )
        with pytest.raises(KafkaException) as refused:
            admin.incremental_alter_configs([res])[res].result(60)
        assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
        assert (_zk_json(c, "/config/brokers/2"), _zk_json(c, "/config/brokers/<default>")) == before
    finally:
        for args in (["--entity-name", "2"], ["--entity-default"]):
            _cli("configs", "--bootstrap-server", c.bootstrap, "--alter", "--entity-type", "brokers", *args,
                 "--delete-config", "message.max.bytes,follower.replication.throttled.rate")  # fmt: skip
    c.wait_for(lambda: _send_error(c, topic, 5000) is None, 30, "message.max.bytes back to its default")


def _describe_topic_on(c: Cluster, broker: int, topic: str, key: str) -> dict[str, object]:
    """``key``'s DescribeConfigs v1 entry for ``topic``, as broker ``broker`` itself answers it."""
    import socket

    from headwater.protocol.apis import DESCRIBE_CONFIGS
    from headwater.protocol.frames import decode_response, encode_request

    request = {"resources": [{"resource_type": 2, "resource_name": topic, "configuration_keys": [key]}],
               "include_synonyms": True}  # fmt: skip
    with socket.create_connection(("127.0.0.1", c.brokers[broker].port), timeout=10) as sock:
        sock.settimeout(10)
        sock.sendall(encode_request(DESCRIBE_CONFIGS, 1, 1, "ops-test", request))
        size = int.from_bytes(sock.recv(4, socket.MSG_WAITALL), "big")
        frame = sock.recv(size, socket.MSG_WAITALL)
    _, body = decode_response(DESCRIBE_CONFIGS, 1, memoryview(frame))
    (result,) = body["results"]
    (entry,) = result["configs"]
    return dict(entry)


def _synonyms_on(c: Cluster, broker: int, topic: str, key: str) -> list[tuple[object, object, object]]:
    entry = _describe_topic_on(c, broker, topic, key)
    return [(s["name"], s["value"], s["source"]) for s in entry["synonyms"]]  # type: ignore[attr-defined]


def test_topic_follows_dynamic_broker_defaults(ops_cluster: Cluster) -> None:
    """A topic without its own retention.ms takes a dynamic ``log.retention.ms`` live (old segments
    deleted on every replica), and DescribeConfigs says so: DYNAMIC_DEFAULT_BROKER_CONFIG for
    ``--entity-default``, DYNAMIC_BROKER_CONFIG on the broker with its own override, with the
    layers as synonyms, as Kafka 2.3's AdminManager reports them."""
    c = ops_cluster
    topic = "follows-broker-default"
    create_topic(c, topic, partitions=1, rf=3, min_isr=1, configs={"segment.bytes": "1024"})
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    old = int(time.time() * 1000) - 2 * 3600 * 1000  # two hours old: within the default's seven days
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(30):
        producer.produce(topic, value=b"x" * 100 + str(i).encode(), partition=0, timestamp=old)
        assert producer.flush(60) == 0
    for b in c.brokers:
        c.wait_for(lambda b=b: len(_segment_files(c, b, topic)) >= 3, 60, f"broker {b} to hold several segments")
    before = admin.describe_configs([resource])[resource].result(60)["retention.ms"]
    assert before.value == "604800000"
    assert before.source in (ConfigSource.STATIC_BROKER_CONFIG.value, ConfigSource.DEFAULT_CONFIG.value)

    def alter(args: list[str], config: str) -> None:
        out = _cli("configs", "--bootstrap-server", c.bootstrap, "--alter", "--entity-type", "brokers", *args, config)
        assert out.returncode == 0, out.stderr

    try:
        alter(["--entity-default", "--add-config"], "log.retention.ms=60000")
        # the effect: every replica deletes the two-hour-old segments, without a restart
        for b in c.brokers:
            c.wait_for(lambda b=b: len(_segment_files(c, b, topic)) == 1, 90, f"broker {b} to delete old segments")
        c.wait_for(lambda: _consumer_watermarks(c, topic)[0] > 0, 60, "the log start offset to move")
        # what DescribeConfigs says (confluent-kafka's AdminClient), on whichever broker answers
        c.wait_for(
            lambda: all(
                _describe_topic_on(c, b, topic, "retention.ms")["config_source"]
                == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
                for b in c.brokers
            ),
            30,
            "every broker to report the cluster default",
        )
        described = admin.describe_configs([resource])[resource].result(60)
        entry = described["retention.ms"]
        assert entry.value == "60000" and not entry.is_default
        assert entry.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
        # (confluent-kafka keys synonyms by name, so the layers are read from the wire)
        assert _synonyms_on(c, 2, topic, "retention.ms")[0] == (
            "log.retention.ms",
            "60000",
            ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value,
        )
        assert described["segment.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        assert described["flush.ms"].source == ConfigSource.DEFAULT_CONFIG.value

        # one broker's own override beats the cluster default, on that broker only
        alter(["--entity-name", "1", "--add-config"], "log.retention.ms=120000")
        c.wait_for(
            lambda: _describe_topic_on(c, 1, topic, "retention.ms")["value"] == "120000", 30, "broker 1's override"
        )
        own = _describe_topic_on(c, 1, topic, "retention.ms")
        assert own["config_source"] == ConfigSource.DYNAMIC_BROKER_CONFIG.value
        synonyms = _synonyms_on(c, 1, topic, "retention.ms")
        assert synonyms[:2] == [
            ("log.retention.ms", "120000", ConfigSource.DYNAMIC_BROKER_CONFIG.value),
            ("log.retention.ms", "60000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
        ]
        assert synonyms[-1] == ("log.retention.ms", "604800000", ConfigSource.DEFAULT_CONFIG.value)
        other = _describe_topic_on(c, 2, topic, "retention.ms")
        assert (other["value"], other["config_source"]) == ("60000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    finally:
        for args in (["--entity-name", "1"], ["--entity-default"]):
            alter([*args, "--delete-config"], "log.retention.ms")
    c.wait_for(
        lambda: all(_describe_topic_on(c, b, topic, "retention.ms")["value"] == "604800000" for b in c.brokers),
        30,
        "retention.ms back to its default on every broker",
    )


def test_a_partition_whose_state_write_failed_gets_a_leader_once_zookeeper_takes_it(ops_cluster: Cluster) -> None:
    """Issue 40, seen in the lab at a load average of 64: the controller's write of a new topic's
    partition states failed once (ZooKeeper away for a moment: "creating its state failed"), and
    nothing tried again: the topic stayed without a leader (LEADER_NOT_AVAILABLE to every
    producer, for good) until a broker restarted. Here ZooKeeper refuses the write (the topic's
    `partitions` znode made read-only, in the same multi as the topic), then takes it: the
    controller writes the states by itself and every broker's metadata lists the leaders."""
    from kazoo.security import OPEN_ACL_UNSAFE, make_acl

    c = ops_cluster
    topic = "state-write-retried"
    assignment = {"version": 1, "partitions": {str(p): [1 + (p + i) % 3 for i in range(3)] for p in range(2)}}
    tx = c.zk.transaction()
    tx.create(f"/brokers/topics/{topic}", json.dumps(assignment).encode())
    tx.create(f"/brokers/topics/{topic}/partitions", b"", acl=[make_acl("world", "anyone", read=True, admin=True)])
    assert all(r is not None and not isinstance(r, Exception) for r in tx.commit()), "the topic's znodes"
    # the controller tried and failed (its log says so): no state, so no leader
    failed = f"partition {topic}-0: creating its state failed"
    c.wait_for(
        lambda: any(failed in b.output.read_text(errors="replace") for b in c.brokers.values()),
        60,
        "the controller's failed write",
    )
    assert not c.zk.exists(f"/brokers/topics/{topic}/partitions/0")
    c.zk.set_acls(f"/brokers/topics/{topic}/partitions", OPEN_ACL_UNSAFE)
    for p in range(2):
        c.wait_for(lambda p=p: c.state(topic, p)["leader"] >= 1, 60, f"{topic}-{p}'s state, written by the controller")
    c.wait_for(lambda: _led_partitions_seen_by_every_broker(c, topic) == {2}, 60, "every broker to list both leaders")
    assert len(produce_acked(c, topic, [b"after"])) == 1
