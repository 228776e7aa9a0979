"""The reverse of kafka-dump-log: a Headwater broker opens a log directory written by Apache Kafka
2.3.1's own broker (``kafka.Kafka`` from the pinned jars, several segments, plain and gzip batches) on the same
ZooKeeper chroot, and serves every record at the offset Kafka gave it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from headwater.testing import java
from headwater.testing.zookeeper import free_port
from tests.harness.broker import BrokerProcess
from tests.java.conftest import Driver


def test_headwater_reads_a_log_dir_kafka_wrote(
    java_deps: None, tmp_path: Path, zk_connect: str, broker_factory: Callable[..., BrokerProcess]
) -> None:
    driver = Driver("2.3.1")
    log_dir, port = tmp_path / "kafka-logs", free_port()
    props = tmp_path / "server.properties"
    props.write_text(
        f"broker.id=0\nlisteners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={log_dir}\nzookeeper.connect={zk_connect}\n"
        "offsets.topic.replication.factor=1\noffsets.topic.num.partitions=1\nlog.segment.bytes=20000\n"
        "group.initial.rebalance.delay.ms=0\n"
    )
    out = open(tmp_path / "kafka.out", "wb")  # noqa: SIM115 - closed below
    kafka = subprocess.Popen(
        java.kafka_tool("kafka-server-start", [str(props)]),
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    bootstrap = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert kafka.poll() is None, (tmp_path / "kafka.out").read_text()[-3000:]
            try:
                if driver.admin(bootstrap, "describeCluster", "request.timeout.ms=3000").get("result"):
                    break
            except AssertionError:
                pass
            assert time.monotonic() < deadline, "Apache Kafka did not start"
            time.sleep(0.5)
        assert (
            driver.admin(bootstrap, "createTopic", "from-kafka", "2", "1", "segment.bytes:20000").get("result")
            == "created"
        )
        acked = driver.run("produce", bootstrap, "from-kafka", "300", "200", "acks=all")["acked"]
        acked += driver.run("produce", bootstrap, "from-kafka", "100", "200", "acks=all", "compression.type=gzip")[
            "acked"
        ]
        assert len(acked) == 400
    finally:
        os.killpg(kafka.pid, signal.SIGTERM)
        try:
            kafka.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(kafka.pid, signal.SIGKILL)
            kafka.wait(10)
        out.close()
    segments = sorted(log_dir.glob("from-kafka-*/*.log"))
    assert len(segments) > 2, segments  # Kafka rolled segments (segment.bytes 20000)
    # Headwater broker 0 on the same chroot and the same log directory
    broker = broker_factory(
        0, log_dirs=str(log_dir), offsets_topic_replication_factor=1, offsets_topic_num_partitions=1
    )
    records: list[dict[str, object]] = []
    deadline = time.monotonic() + 60
    while len(records) < 400 and time.monotonic() < deadline:
        records = driver.run("consume", broker.bootstrap, "from-kafka", "400")["records"]
    assert sorted((r["p"], r["o"]) for r in records) == sorted((p, o) for p, o in acked)
    assert sorted(r["k"] for r in records) == sorted([f"k{i}" for i in range(300)] + [f"k{i}" for i in range(100)])
