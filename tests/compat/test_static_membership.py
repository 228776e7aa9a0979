"""Static group membership (KIP-345, Kafka 2.3) with librdkafka: two confluent-kafka consumers with
``group.instance.id`` split a topic; one restarts and gets its partitions back while the other sees
no revoke (its rebalance callbacks stay silent and the coordinator counts no rebalance); a second
process taking an instance id that is in use fences the first (FENCED_INSTANCE_ID)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException

from tests.compat.test_stock_clients import create_topic
from tests.harness.broker import BrokerProcess

PARTITIONS = 4
TIMEOUT_S = 60.0
REBALANCES = "kafka_coordinator_group_groupcoordinator_rebalances_total"


@pytest.fixture
def static_broker(broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    return broker_factory(
        0,
        prometheus_port="auto",
        offsets_topic_replication_factor=1,
        offsets_topic_num_partitions=3,
        group_initial_rebalance_delay_ms=0,
    )


class Member:
    """One confluent-kafka consumer and the rebalance callbacks it saw."""

    def __init__(self, bootstrap: str, group: str, topic: str, instance: str) -> None:
        self.events: list[tuple[str, frozenset[int]]] = []
        self.fatal: KafkaError | None = None
        self.c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.instance.id": instance,
                "client.id": instance,
                "session.timeout.ms": 30000,  # a restart takes far less
                "heartbeat.interval.ms": 300,
                "enable.auto.commit": False,
            }
        )
        self.c.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked)

    def _assigned(self, _c: Any, tps: list[Any]) -> None:
        self.events.append(("assign", frozenset(tp.partition for tp in tps)))

    def _revoked(self, _c: Any, tps: list[Any]) -> None:
        self.events.append(("revoke", frozenset(tp.partition for tp in tps)))

    def poll(self) -> None:
        try:
            msg = self.c.poll(0.1)
        except KafkaException as e:  # a fatal error is raised by poll in newer librdkafka
            self.fatal = e.args[0]
            return
        if msg is not None and msg.error() is not None:
            err = msg.error()
            if err.code() == KafkaError._FATAL:  # the cause is in the text
                self.fatal = err

    def assigned(self) -> frozenset[int]:
        return frozenset(tp.partition for tp in self.c.assignment())


def _until(what: str, done: Callable[[], bool], *members: Member) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        for m in members:
            m.poll()


def test_a_static_member_restarts_without_a_rebalance_and_a_duplicate_instance_is_fenced(
    static_broker: BrokerProcess,
) -> None:
    b = static_broker
    topic = f"static-{uuid.uuid4().hex[:8]}"
    create_topic(b.bootstrap, topic, partitions=PARTITIONS)
    group = f"{topic}-group"
    one, two = Member(b.bootstrap, group, topic, "one"), Member(b.bootstrap, group, topic, "two")

    def split() -> bool:
        a1, a2 = one.assigned(), two.assigned()
        return bool(a1) and bool(a2) and not a1 & a2 and a1 | a2 == set(range(PARTITIONS))

    _until("the two static members to split the partitions", split, one, two)
    mine, theirs = one.assigned(), two.assigned()
    two_events = list(two.events)
    rebalances = b.metric(REBALANCES)

    # "one" restarts: closes (a static member sends no LeaveGroup) and comes back with its instance id
    one.c.close()
    again = Member(b.bootstrap, group, topic, "one")
    _until("the restarted member to get its partitions back", lambda: again.assigned() == mine, again, two)
    # a window of many heartbeats (300 ms) in which a rebalance would reach "two"
    for _ in range(20):
        two.poll()
        again.poll()
    assert two.events == two_events, "the other member was revoked/reassigned by the restart"
    assert two.assigned() == theirs
    assert b.metric(REBALANCES) == rebalances, "the coordinator rebalanced for a static restart"

    # a second process with the same group.instance.id: it takes the instance, the first is fenced
    dup = Member(b.bootstrap, group, topic, "one")
    _until("the duplicate to take the instance's partitions", lambda: dup.assigned() == mine, dup, again, two)
    _until("the first process to be fenced", lambda: again.fatal is not None, again, dup, two)
    assert KafkaError(KafkaError.FENCED_INSTANCE_ID).str() in again.fatal.str()  # type: ignore[union-attr]
    assert not again.assigned()
    assert two.events == two_events and b.metric(REBALANCES) == rebalances
    for m in (again, dup, two):
        try:
            m.c.close()
        except KafkaException:
            pass  # the fenced consumer's close reports its fatal error
