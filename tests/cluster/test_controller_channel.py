"""Issue 9, defect 2: one partition the broker cannot host must not wedge the controller's channel
to that broker (every later LeaderAndIsr queued behind a request retried forever)."""

from __future__ import annotations

import json
from collections.abc import Callable

from confluent_kafka import KafkaError, Producer

from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic, produce_acked


def test_a_partition_the_broker_cannot_host_gets_an_error_and_later_topics_still_serve(
    cluster_factory: Callable[..., Cluster],
) -> None:
    c = cluster_factory(1)
    (broker,) = c.brokers
    # As an old tool would write it, straight into ZooKeeper, past CreateTopics' validation: a
    # segment.bytes no log can be made with. The controller elects a leader and sends LeaderAndIsr.
    c.zk.create(
        "/config/topics/bad-config",
        json.dumps({"version": 1, "config": {"segment.bytes": "10"}}).encode(),
        makepath=True,
    )
    c.zk.create(
        "/brokers/topics/bad-config", json.dumps({"version": 1, "partitions": {"0": [broker]}}).encode(), makepath=True
    )
    c.wait_for(
        lambda: c.zk.exists("/brokers/topics/bad-config/partitions/0/state"), 30, "the controller to elect a leader"
    )

    # The next LeaderAndIsr to the same broker still arrives and is applied (create_topic waits for
    # the broker's own view of the new partition), and the topic serves.
    create_topic(c, "good", partitions=1, rf=1, min_isr=1)
    assert len(produce_acked(c, "good", [b"v%d" % i for i in range(20)])) == 20

    # The partition that could not be made answers with an error instead of hanging.
    errors: list[KafkaError] = []
    p = Producer({"bootstrap.servers": c.bootstrap, "message.timeout.ms": 5000})
    p.produce("bad-config", b"x", partition=0, on_delivery=lambda err, _msg: errors.append(err))
    p.flush(30)
    assert len(errors) == 1 and errors[0] is not None, errors
