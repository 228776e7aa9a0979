"""Kafka's own tools, from the 2.3.1 distribution's jars, typed as an operator types them
(``bin/kafka-*.sh`` is ``kafka-run-class.sh <main class>``: ``headwater.testing.java.kafka_tool``),
against a 3-broker Headwater cluster: through the brokers (``--bootstrap-server``) and through
ZooKeeper (``--zookeeper``, ``--authorizer-properties zookeeper.connect=``), where Headwater must read
what Kafka's code wrote."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from headwater.testing.java import kafka_tool
from tests.cluster.harness import Cluster
from tests.java.conftest import Driver

CLUSTER_OVERRIDES = {
    "authorizer_class_name": "kafka.security.auth.SimpleAclAuthorizer",
    "allow_everyone_if_no_acl_found": "true",
}


def kafka(script: str, *args: str, stdin: str | None = None, timeout: float = 120, check: bool = True) -> str:
    proc = subprocess.run(kafka_tool(script, args), input=stdin, capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, f"{script} {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc.stdout


def zk(cluster: Cluster) -> str:
    return f"{cluster.zk_host}:{cluster.zk_port}{cluster.chroot}"


@pytest.fixture(scope="module")
def admin() -> Driver:
    return Driver("4.x")


def test_kafka_topics_through_zookeeper_and_the_brokers(cluster: Cluster, admin: Driver) -> None:
    b, z = cluster.bootstrap, zk(cluster)
    out = kafka(
        "kafka-topics",
        "--bootstrap-server",
        b,
        "--create",
        "--topic",
        "tools-a",
        "--partitions",
        "3",
        "--replication-factor",
        "3",
    )
    assert out == ""  # 2.3.1's --bootstrap-server create prints nothing (its --zookeeper one does)
    out = kafka(
        "kafka-topics",
        "--zookeeper",
        z,
        "--create",
        "--topic",
        "tools-b",
        "--partitions",
        "2",
        "--replication-factor",
        "2",
        "--config",
        "retention.ms=1000000",
    )
    assert "Created topic tools-b" in out
    assert {"tools-a", "tools-b"} <= set(kafka("kafka-topics", "--zookeeper", z, "--list").split())
    assert {"tools-a", "tools-b"} <= set(kafka("kafka-topics", "--bootstrap-server", b, "--list").split())
    # the brokers serve the topic ZooKeeper was given: partitions, replication factor, config
    cluster.wait_for(
        lambda: len(admin.admin(b, "describeTopic", "tools-b").get("result", {}).get("partitions", [])) == 2,
        60,
        "tools-b served",
    )
    described = kafka("kafka-topics", "--bootstrap-server", b, "--describe", "--topic", "tools-b")
    assert re.search(r"PartitionCount:\s*2\s+ReplicationFactor:\s*2", described), described
    assert "retention.ms=1000000" in described
    assert len(re.findall(r"Partition: \d+\s+Leader: [123]\s+Replicas: \d,\d\s+Isr: \d,\d", described)) == 2, described
    kafka("kafka-topics", "--zookeeper", z, "--alter", "--topic", "tools-a", "--partitions", "4")
    cluster.wait_for(
        lambda: len(admin.admin(b, "describeTopic", "tools-a")["result"]["partitions"]) == 4, 60, "4 partitions"
    )
    kafka("kafka-topics", "--bootstrap-server", b, "--delete", "--topic", "tools-a")
    cluster.wait_for(
        lambda: "tools-a" not in kafka("kafka-topics", "--zookeeper", z, "--list").split(), 60, "tools-a deleted"
    )


def test_kafka_configs(cluster: Cluster, admin: Driver) -> None:
    b, z = cluster.bootstrap, zk(cluster)
    kafka(
        "kafka-topics",
        "--bootstrap-server",
        b,
        "--create",
        "--topic",
        "tools-cfg",
        "--partitions",
        "1",
        "--replication-factor",
        "3",
    )
    out = kafka(
        "kafka-configs",
        "--zookeeper",
        z,
        "--entity-type",
        "topics",
        "--entity-name",
        "tools-cfg",
        "--alter",
        "--add-config",
        "retention.ms=5000,cleanup.policy=compact",
    )
    assert "Completed Updating config for entity: topic 'tools-cfg'" in out
    cluster.wait_for(
        lambda: (
            admin.admin(b, "describeConfigs", "topic", "tools-cfg", "retention.ms")["result"]["retention.ms"]["value"]
            == "5000"
        ),
        60,
        "the brokers to apply the config kafka-configs wrote",
    )
    described = kafka(
        "kafka-configs", "--zookeeper", z, "--entity-type", "topics", "--entity-name", "tools-cfg", "--describe"
    )
    assert "retention.ms=5000" in described and "cleanup.policy=compact" in described
    # a broker's configs through the brokers (kafka-configs --bootstrap-server: brokers only in 2.3)
    out = kafka(
        "kafka-configs", "--bootstrap-server", b, "--entity-type", "brokers", "--entity-name", "1", "--describe"
    )
    assert "Configs for broker 1 are:" in out
    # SCRAM credentials (KIP-84), written to ZooKeeper in Kafka's format
    out = kafka(
        "kafka-configs",
        "--zookeeper",
        z,
        "--alter",
        "--add-config",
        "SCRAM-SHA-256=[iterations=4096,password=alice-secret]",
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
    )
    assert "Completed Updating config for entity: user-principal 'alice'" in out
    described = kafka(
        "kafka-configs", "--zookeeper", z, "--describe", "--entity-type", "users", "--entity-name", "alice"
    )
    assert "SCRAM-SHA-256=salt=" in described and "iterations=4096" in described


def test_kafka_acls_through_zookeeper_seen_by_the_brokers(cluster: Cluster, admin: Driver) -> None:
    b, props = cluster.bootstrap, f"zookeeper.connect={zk(cluster)}"
    out = kafka(
        "kafka-acls",
        "--authorizer-properties",
        props,
        "--add",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Read",
        "--topic",
        "tools-acl",
    )
    assert "User:alice has Allow permission for operations: Read from hosts: *" in out
    cluster.wait_for(
        lambda: admin.admin(b, "describeAcls", "tools-acl").get("result") == ["User:alice READ ALLOW"],
        60,
        "the brokers' DescribeAcls to list the ACL kafka-acls wrote",
    )
    listed = kafka("kafka-acls", "--authorizer-properties", props, "--list", "--topic", "tools-acl")
    assert "User:alice has Allow permission for operations: Read from hosts: *" in listed
    kafka("kafka-acls", "--authorizer-properties", props, "--remove", "--force", "--topic", "tools-acl")
    cluster.wait_for(lambda: admin.admin(b, "describeAcls", "tools-acl").get("result") == [], 60, "the ACL removed")


def test_console_producer_consumer_and_consumer_groups(cluster: Cluster) -> None:
    b = cluster.bootstrap
    kafka(
        "kafka-topics",
        "--bootstrap-server",
        b,
        "--create",
        "--topic",
        "tools-con",
        "--partitions",
        "2",
        "--replication-factor",
        "3",
    )
    lines = "".join(f"k{i}:v{i}\n" for i in range(20))
    kafka(
        "kafka-console-producer",
        "--broker-list",
        b,
        "--topic",
        "tools-con",
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=:",
        stdin=lines,
    )
    out = kafka(
        "kafka-console-consumer",
        "--bootstrap-server",
        b,
        "--topic",
        "tools-con",
        "--group",
        "tools-g",
        "--from-beginning",
        "--max-messages",
        "20",
        "--property",
        "print.key=true",
        "--property",
        "key.separator=:",
        "--timeout-ms",
        "60000",
    )
    assert sorted(out.split()) == sorted(f"k{i}:v{i}" for i in range(20))
    described = kafka("kafka-consumer-groups", "--bootstrap-server", b, "--describe", "--group", "tools-g")
    rows = [ln.split() for ln in described.splitlines() if ln.startswith("tools-g ")]
    assert len(rows) == 2 and sum(int(r[3]) for r in rows) == 20 and all(r[3] == r[4] and r[5] == "0" for r in rows), (
        described
    )
    reset = kafka(
        "kafka-consumer-groups",
        "--bootstrap-server",
        b,
        "--group",
        "tools-g",
        "--reset-offsets",
        "--to-earliest",
        "--topic",
        "tools-con",
        "--execute",
    )
    assert [ln.split()[-1] for ln in reset.splitlines() if ln.startswith("tools-g ")] == ["0", "0"], reset
    described = kafka("kafka-consumer-groups", "--bootstrap-server", b, "--describe", "--group", "tools-g")
    assert [ln.split()[3] for ln in described.splitlines() if ln.startswith("tools-g ")] == ["0", "0"], described
    assert "tools-g" in kafka("kafka-consumer-groups", "--bootstrap-server", b, "--list").split()
    deleted = kafka("kafka-consumer-groups", "--bootstrap-server", b, "--delete", "--group", "tools-g")
    assert "Deletion of requested consumer groups ('tools-g') was successful." in deleted
    assert "tools-g" not in kafka("kafka-consumer-groups", "--bootstrap-server", b, "--list").split()


def test_delete_records_log_dirs_and_preferred_election(cluster: Cluster, tmp_path: Path) -> None:
    b = cluster.bootstrap
    kafka(
        "kafka-topics",
        "--bootstrap-server",
        b,
        "--create",
        "--topic",
        "tools-dr",
        "--partitions",
        "1",
        "--replication-factor",
        "3",
    )
    kafka(
        "kafka-console-producer",
        "--broker-list",
        b,
        "--topic",
        "tools-dr",
        "--request-required-acks",
        "all",
        stdin="".join(f"r{i}\n" for i in range(10)),
    )
    spec = tmp_path / "delete.json"
    spec.write_text(json.dumps({"version": 1, "partitions": [{"topic": "tools-dr", "partition": 0, "offset": 6}]}))
    out = kafka("kafka-delete-records", "--bootstrap-server", b, "--offset-json-file", str(spec))
    assert "partition: tools-dr-0\tlow_watermark: 6" in out, out
    out = kafka(
        "kafka-log-dirs", "--bootstrap-server", b, "--describe", "--broker-list", "1,2,3", "--topic-list", "tools-dr"
    )
    answer = json.loads(out.strip().splitlines()[-1])
    assert sorted(x["broker"] for x in answer["brokers"]) == [1, 2, 3]
    for broker in answer["brokers"]:
        (log_dir,) = broker["logDirs"]
        assert log_dir["error"] is None and [p["partition"] for p in log_dir["partitions"]] == ["tools-dr-0"]
        assert log_dir["partitions"][0]["size"] > 0
    out = kafka("kafka-preferred-replica-election", "--bootstrap-server", b)
    assert "Successfully completed preferred replica election for partitions" in out, out


def test_reassign_partitions_with_throttle(cluster: Cluster, tmp_path: Path) -> None:
    b, z = cluster.bootstrap, zk(cluster)
    kafka("kafka-topics", "--zookeeper", z, "--create", "--topic", "tools-re", "--replica-assignment", "1:2,2:3")
    kafka(
        "kafka-console-producer",
        "--broker-list",
        b,
        "--topic",
        "tools-re",
        "--request-required-acks",
        "all",
        stdin="".join(f"m{i}\n" for i in range(50)),
    )
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "tools-re"}]}))
    generated = kafka(
        "kafka-reassign-partitions",
        "--zookeeper",
        z,
        "--generate",
        "--topics-to-move-json-file",
        str(topics),
        "--broker-list",
        "1,2,3",
    )
    assert (
        "Current partition replica assignment" in generated
        and "Proposed partition reassignment configuration" in generated
    )
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": "tools-re", "partition": 0, "replicas": [3, 1]},
                    {"topic": "tools-re", "partition": 1, "replicas": [1, 3]},
                ],
            }
        )
    )
    out = kafka(
        "kafka-reassign-partitions",
        "--zookeeper",
        z,
        "--execute",
        "--reassignment-json-file",
        str(plan),
        "--throttle",
        "10000000",
    )
    assert "Successfully started reassignment of partitions." in out, out

    def verified() -> bool:
        text = kafka("kafka-reassign-partitions", "--zookeeper", z, "--verify", "--reassignment-json-file", str(plan))
        return text.count("completed successfully") == 2 and "Throttle was removed." in text

    cluster.wait_for(verified, 120, "the reassignment to complete (kafka-reassign-partitions --verify)")
    assert cluster.state("tools-re", 0)["isr"] and sorted(cluster.state("tools-re", 0)["isr"]) == [1, 3]


def test_dump_log_over_headwaters_segment_and_indexes(cluster: Cluster) -> None:
    """DumpLogSegments reads Headwater's own .log, .index and .timeindex files as Kafka's."""
    b = cluster.bootstrap
    kafka(
        "kafka-topics",
        "--bootstrap-server",
        b,
        "--create",
        "--topic",
        "tools-dump",
        "--partitions",
        "1",
        "--replication-factor",
        "1",
        "--config",
        "index.interval.bytes=100",
    )
    kafka(
        "kafka-console-producer",
        "--broker-list",
        b,
        "--topic",
        "tools-dump",
        "--request-required-acks",
        "all",
        "--batch-size",
        "1",
        "--compression-codec",
        "gzip",
        stdin="".join(f"record-{i:04d}-{'x' * 50}\n" for i in range(200)),
    )
    leader = next(p for p in cluster.state("tools-dump", 0)["isr"])
    part = cluster.brokers[leader].log_dir / "tools-dump-0"
    segment = part / "00000000000000000000.log"
    out = kafka("kafka-dump-log", "--files", str(segment), "--deep-iteration", "--print-data-log")
    offsets = [int(m) for m in re.findall(r"^\| offset: (\d+)", out, re.M)] or [
        int(m) for m in re.findall(r"^offset: (\d+)", out, re.M)
    ]
    assert offsets == list(range(200)), out[-2000:]
    assert "compresscodec: GZIP" in out or "compresscodec: gzip" in out.lower()
    assert "record-0199-" in out
    for index in ("00000000000000000000.index", "00000000000000000000.timeindex"):
        out = kafka("kafka-dump-log", "--files", str(part / index), "--index-sanity-check")
        assert "passed sanity check" in out, out
        out = kafka("kafka-dump-log", "--files", str(part / index), "--deep-iteration", "--verify-index-only")
        assert "Mismatches" not in out and "mismatch" not in out.lower(), out
        assert "Index offset" not in out or "do not match" not in out, out


def test_producer_and_consumer_perf_test(cluster: Cluster) -> None:
    b = cluster.bootstrap
    kafka(
        "kafka-topics",
        "--bootstrap-server",
        b,
        "--create",
        "--topic",
        "tools-perf",
        "--partitions",
        "3",
        "--replication-factor",
        "3",
    )
    out = kafka(
        "kafka-producer-perf-test",
        "--topic",
        "tools-perf",
        "--num-records",
        "20000",
        "--record-size",
        "100",
        "--throughput",
        "-1",
        "--producer-props",
        f"bootstrap.servers={b}",
        "acks=all",
    )
    assert re.search(r"^20000 records sent, [\d.]+ records/sec", out, re.M), out
    out = kafka(
        "kafka-consumer-perf-test",
        "--broker-list",
        b,
        "--topic",
        "tools-perf",
        "--messages",
        "20000",
        "--timeout",
        "60000",
    )
    header, row = [ln.split(", ") for ln in out.strip().splitlines()[-2:]]
    assert int(dict(zip(header, row, strict=True))["data.consumed.in.nMsg"]) == 20000, out
