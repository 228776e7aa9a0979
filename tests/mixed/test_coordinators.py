"""The group coordinator crossing between Apache Kafka 2.3.1 and Headwater brokers (issue 45).

One mixed cluster for the module (Kafka 1 and 2, Headwater 3 and 4; tests/mixed/cluster.py). A
consumer group commits its offsets while the leader of its ``__consumer_offsets`` partition moves
from a Kafka broker to a Headwater broker and back: each new coordinator loads the group from the
log the other implementation wrote (offset commit and group metadata records).
"""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from headwater.broker.group.formats import partition_for
from tests.mixed.cluster import MixedCluster

OFFSETS = "__consumer_offsets"
#: Kafka 2.3's own settings of the topic it makes on the first FindCoordinator.
OFFSETS_CONFIG = {"cleanup.policy": "compact", "compression.type": "producer", "segment.bytes": "104857600"}


def create(mixed: MixedCluster, topic: str, assignment: list[list[int]], config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": mixed.bootstrap})
    new = NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment, config=config or {})
    for f in admin.create_topics([new], operation_timeout=30).values():
        f.result(60)
    for p, replicas in enumerate(assignment):
        mixed.wait_for(
            lambda p=p, r=replicas: mixed.state(topic, p).leader == r[0] and set(mixed.state(topic, p).isr) == set(r),
            60,
            f"{topic}-{p} led by {replicas[0]} with ISR {replicas}",
        )


def assert_kafka_quiet(mixed: MixedCluster) -> None:
    problems = mixed.kafka_problems()
    assert not problems, "Kafka logged:\n" + "\n".join(problems[:40])


def test_group_coordinator_crosses(mixed: MixedCluster) -> None:
    """Two consumers commit each record's offset while the group's coordinator moves Kafka 1 ->
    Headwater 3 (kill -9 of 1) -> Kafka 1 (controlled shutdown of 3): after each move the new
    coordinator answers the offsets the other one stored, the members rejoin, every record is
    consumed and none is consumed again behind the group's committed offset."""
    mixed.mark()
    mixed.make_controller(2)
    # made as Kafka makes it on the first FindCoordinator, but with the replicas this test moves
    create(mixed, OFFSETS, [[1, 3, 4]] * 3, OFFSETS_CONFIG)
    topic, group, per_partition = "g-in", "g45", 150
    create(mixed, topic, [[2, 4, 3], [2, 3, 4]])
    producer = Producer({"bootstrap.servers": mixed.bootstrap, "acks": "all"})
    for i in range(per_partition):
        for p in (0, 1):
            producer.produce(topic, value=f"{p}-{i}".encode(), partition=p)
    assert producer.flush(60) == 0
    gp = partition_for(group, 3)  # Kafka's GroupMetadataManager.partitionFor

    conf = {
        "bootstrap.servers": mixed.bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 10000,
        "heartbeat.interval.ms": 500,
    }
    consumers = [Consumer({**conf, "client.id": f"c{i}"}) for i in range(2)]
    committed = {0: 0, 1: 0}  # what the group confirmed (the next offset to read)
    attempted = {0: 0, 1: 0}  # the highest offset asked to commit
    seen: dict[tuple[int, int], int] = {}
    try:
        for c in consumers:
            c.subscribe([topic])

        def consume(n: int) -> None:
            """Until ``n`` more records are read and committed (each one's offset, synchronously)."""
            target = sum(committed.values()) + n

            def step() -> bool:
                for c in consumers:
                    msg = c.poll(0.1)
                    if msg is None or msg.error():
                        continue
                    p, o = msg.partition(), msg.offset()
                    assert o >= committed[p], f"{topic}-{p} offset {o} read again behind the group's {committed[p]}"
                    seen[p, o] = seen.get((p, o), 0) + 1
                    attempted[p] = max(attempted[p], o + 1)
                    try:
                        c.commit(message=msg, asynchronous=False)
                    except KafkaException:
                        continue  # this record's commit is the uncommitted tail
                    committed[p] = max(committed[p], o + 1)
                return sum(committed.values()) >= min(target, 2 * per_partition)

            mixed.wait_for(step, 120, f"{n} more records consumed and committed")

        def coordinator_has_offsets() -> None:
            """The coordinator answers OffsetFetch with what the group committed."""

            def loaded() -> bool:
                tps = consumers[0].committed([TopicPartition(topic, p) for p in (0, 1)], timeout=5)
                return all(committed[t.partition] <= t.offset <= attempted[t.partition] for t in tps)

            mixed.wait_for(loaded, 60, f"the coordinator to answer the offsets {committed}")

        consume(100)
        assert mixed.state(OFFSETS, gp).leader == 1
        coordinator_has_offsets()

        mixed.kill9(1)  # Kafka 2 (controller) elects Headwater 3, the next of [1, 3, 4] in the ISR
        mixed.wait_for(lambda: mixed.state(OFFSETS, gp).leader == 3, 60, "Headwater 3 to lead the group's partition")
        coordinator_has_offsets()  # loaded from what Kafka 1 wrote
        consume(100)

        mixed.restart(1)
        mixed.wait_for(lambda: 1 in mixed.state(OFFSETS, gp).isr, 90, "Kafka 1 back in the ISR of the offsets")
        mixed.stop_broker(3)  # controlled shutdown: the leadership goes to Kafka 1, first in [1, 3, 4]
        mixed.wait_for(lambda: mixed.state(OFFSETS, gp).leader == 1, 60, "Kafka 1 to lead the group's partition")
        coordinator_has_offsets()  # loaded from what Headwater 3 wrote
        consume(100)
    finally:
        for c in consumers:
            c.close()
    assert committed == {0: per_partition, 1: per_partition}
    assert {k for k in seen} == {(p, o) for p in (0, 1) for o in range(per_partition)}
    mixed.restart(3)
    assert_kafka_quiet(mixed)
