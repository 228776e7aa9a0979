"""Group-API error codes as Kafka 2.3 answers them, seen through a stock client (confluent-kafka):
OffsetCommit of a topic or partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION for that
partition only (KafkaApis checks its metadata cache first); OffsetFetch (v1+) of one is "no
offset" without an error. (The wire-level rows -- every version, UNKNOWN_MEMBER_ID,
ILLEGAL_GENERATION, FENCED_INSTANCE_ID -- are in
tests/broker/test_group_protocol.py.)"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, TopicPartition

from tests.compat.test_stock_clients import create_topic
from tests.harness.broker import BrokerProcess


@pytest.fixture
def group_broker(broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    return broker_factory(0, offsets_topic_replication_factor=1, offsets_topic_num_partitions=3)


class Committer:
    """A confluent-kafka consumer that commits offsets itself and reads librdkafka's per-partition
    result from its ``on_commit`` callback."""

    def __init__(self, bootstrap: str, group: str) -> None:
        self.results: list[list[TopicPartition]] = []
        self.c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "on_commit": lambda _err, tps: self.results.append(tps),
            }
        )

    def commit(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The error code per partition (0: committed)."""
        self.results.clear()
        self.c.commit(offsets=[TopicPartition(t, p, 5) for t, p in tps], asynchronous=True)
        deadline = time.monotonic() + 60
        while not self.results:
            assert time.monotonic() < deadline, "no commit result"
            self.c.poll(0.1)
        return {(tp.topic, tp.partition): tp.error.code() if tp.error else 0 for tp in self.results[0]}


def test_offset_commit_and_fetch_error_codes_with_confluent_kafka(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    topic = f"codes-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=2)
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    committer = Committer(bootstrap, f"{topic}-group")
    c = committer.c
    try:
        table: list[tuple[list[tuple[str, int]], dict[tuple[str, int], int]]] = [
            ([(topic, 0)], {(topic, 0): 0}),
            ([(missing, 0)], {(missing, 0): KafkaError.UNKNOWN_TOPIC_OR_PART}),
            ([(topic, 7)], {(topic, 7): KafkaError.UNKNOWN_TOPIC_OR_PART}),
        ]
        for tps, expected in table:
            assert committer.commit(tps) == expected, tps
        # one request with a good partition and bad ones: the broker answers per partition and
        # commits the good one (librdkafka's callback reports the request's error on every
        # partition, so the good one is checked by fetching it back)
        mixed = committer.commit([(topic, 1), (topic, 7), (missing, 0)])
        assert mixed[(topic, 7)] == mixed[(missing, 0)] == KafkaError.UNKNOWN_TOPIC_OR_PART
        got = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1), TopicPartition(missing, 0)], timeout=30)
        assert [(tp.offset, tp.error) for tp in got] == [(5, None), (5, None), (OFFSET_INVALID, None)]
    finally:
        c.close()
