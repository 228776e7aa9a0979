"""Topic deletion as Kafka 2.3 completes it (issue 38, item 5), on a real 3-broker cluster.

A topic deleted while one of its replicas is down keeps its mark ``/admin/delete_topics/<t>`` (and
its assignment) until that replica is back and has deleted its log; meanwhile a topic of the same
name cannot be created; once deleted, the topic created again starts from fresh logs on every
replica, the returning one included.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic, produce_acked, read_all

TOPIC = "doomed"
PARTITIONS = 2


def _log_dirs(c: Cluster, b: int) -> list[str]:
    return sorted(p.name for p in Path(c.brokers[b].log_dir).glob(f"{TOPIC}-*") if p.is_dir())


def test_deletion_waits_for_a_stopped_replica_which_deletes_on_return(cluster_factory: Callable[..., Cluster]) -> None:
    c = cluster_factory(3)
    create_topic(c, TOPIC, partitions=PARTITIONS, rf=3)
    old = produce_acked(c, TOPIC, [f"old-{i}".encode() for i in range(50)])
    assert len(old) == 50
    for b in c.brokers:
        assert len(_log_dirs(c, b)) == PARTITIONS

    c.stop(3)
    c.wait_for(lambda: 3 not in c.live_ids(), 30, "broker 3 to deregister")
    admin = AdminClient({"bootstrap.servers": c.brokers[1].bootstrap})
    admin.delete_topics([TOPIC], operation_timeout=30)[TOPIC].result(60)

    # the live replicas delete their logs; the mark and the assignment stay for broker 3
    for b in (1, 2):
        c.wait_for(lambda b=b: _log_dirs(c, b) == [], 60, f"broker {b} to delete its logs of {TOPIC}")
    assert c.zk.exists(f"/admin/delete_topics/{TOPIC}") is not None
    assert c.zk.exists(f"/brokers/topics/{TOPIC}") is not None
    assert len(_log_dirs(c, 3)) == PARTITIONS  # broker 3 is down: its logs are untouched

    # a topic of the same name cannot be created while the old one's logs are not all gone
    fut = admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=2)], operation_timeout=30)
    try:
        fut[TOPIC].result(60)
        raise AssertionError("creating a topic marked for deletion succeeded")
    except KafkaException as e:
        assert e.args[0].name() == "TOPIC_ALREADY_EXISTS", e
        assert "marked for deletion" in e.args[0].str(), e

    c.restart(3)
    c.wait_for(lambda: _log_dirs(c, 3) == [], 60, "broker 3 to delete its logs on return")
    c.wait_for(lambda: c.zk.exists(f"/admin/delete_topics/{TOPIC}") is None, 60, "the deletion to complete")
    assert c.zk.exists(f"/brokers/topics/{TOPIC}") is None
    assert c.zk.exists(f"/config/topics/{TOPIC}") is None

    # created again: fresh logs everywhere, nothing of the old records on any replica
    create_topic(c, TOPIC, partitions=PARTITIONS, rf=3)
    new = produce_acked(c, TOPIC, [f"new-{i}".encode() for i in range(5)])
    assert new == {i: f"new-{i}".encode() for i in range(5)}
    assert read_all(c, TOPIC, 0) == new
    for b in c.brokers:
        for p in range(PARTITIONS):
            data = b"".join(f.read_bytes() for f in sorted((Path(c.brokers[b].log_dir) / f"{TOPIC}-{p}").glob("*.log")))
            assert b"old-" not in data, f"broker {b} kept records of the deleted topic in {TOPIC}-{p}"
