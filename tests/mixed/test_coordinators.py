"""The group coordinator crossing between Apache Kafka 2.3.1 and Headwater brokers (issue 45).

One mixed cluster for the module (Kafka 1 and 2, Headwater 3 and 4; tests/mixed/cluster.py). A
consumer group commits its offsets while the leader of its ``__consumer_offsets`` partition moves
from a Kafka broker to a Headwater broker and back: each new coordinator loads the group from the
log the other implementation wrote (offset commit and group metadata records); the same for a
transactional producer and ``__transaction_state``.

Times on this 2-core machine shared with other test runs (load average 30-70): the cluster's start
4-25 s; test_group_coordinator_crosses 46-78 s (median 55, 4 runs); test_transaction_coordinator_crosses
50-59 s (median 52, 3 runs) (both slow: two kills or shutdowns and two restarts of brokers, one a Kafka
JVM); the module 1.8-2.6 min.
"""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from headwater.broker.group.formats import partition_for
from headwater.broker.txn.formats import partition_for as txn_partition_for
from tests.mixed.cluster import MixedCluster

OFFSETS = "__consumer_offsets"
#: Kafka 2.3's own settings of the topic it makes on the first FindCoordinator.
OFFSETS_CONFIG = {"cleanup.policy": "compact", "compression.type": "producer", "segment.bytes": "104857600"}
TXNS = "__transaction_state"
TXNS_CONFIG = {"cleanup.policy": "compact", "min.insync.replicas": "2", "segment.bytes": "104857600"}


def create(mixed: MixedCluster, topic: str, assignment: list[list[int]], config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": mixed.bootstrap})
    new = NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment, config=config or {})

    def created() -> bool:
        try:
            admin.create_topics([new], operation_timeout=30)[topic].result(60)
        except KafkaException as exc:
            # NOT_CONTROLLER: the client's metadata still names the controller before make_controller
            if exc.args[0].code() == KafkaError.NOT_CONTROLLER:
                return False
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:  # a retry after the first made it
                raise
        return True

    mixed.wait_for(created, 60, f"{topic} created")
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


def test_transaction_coordinator_crosses(mixed: MixedCluster) -> None:
    """A transactional producer commits a transaction after another while its transaction
    coordinator moves Kafka 1 -> Headwater 3 (kill -9 of 1) -> Kafka 1 (controlled shutdown of 3):
    each new coordinator loads the producer's state from what the other wrote and goes on (its
    markers reach the Kafka leader of the output); read_committed reads each committed
    transaction's records once, in order, and nothing of the aborted ones."""
    mixed.mark()
    mixed.make_controller(2)
    create(mixed, TXNS, [[1, 3, 4]] * 3, TXNS_CONFIG)  # as Kafka makes it, with the replicas moved here
    topic, tid = "t-out", "t45"
    create(mixed, topic, [[2, 4, 3]])
    tp = txn_partition_for(tid, 3)  # Kafka's TransactionStateManager.partitionFor
    producer = Producer(
        {"bootstrap.servers": mixed.bootstrap, "transactional.id": tid, "transaction.timeout.ms": 60000}
    )
    producer.init_transactions(60)
    committed: list[bytes] = []
    n = 0

    def transact(count: int) -> None:
        """Until ``count`` more transactions (five records each) are committed."""
        nonlocal n
        target = len(committed) + 5 * count
        while len(committed) < target:
            values = [f"{n}-{i}".encode() for i in range(5)]
            n += 1
            producer.begin_transaction()
            try:
                for v in values:
                    producer.produce(topic, value=v)
                while True:
                    try:
                        producer.commit_transaction(30)
                        break
                    except KafkaException as exc:
                        if not exc.args[0].retriable():
                            raise
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                assert err.txn_requires_abort(), err
                producer.abort_transaction(60)
                continue
            committed.extend(values)

    transact(10)
    assert mixed.state(TXNS, tp).leader == 1
    mixed.kill9(1)  # Kafka 2 (controller) elects Headwater 3
    mixed.wait_for(lambda: mixed.state(TXNS, tp).leader == 3, 60, "Headwater 3 to lead the producer's partition")
    transact(10)
    mixed.restart(1)
    mixed.wait_for(lambda: 1 in mixed.state(TXNS, tp).isr, 90, "Kafka 1 back in the ISR of the transactions")
    mixed.stop_broker(3)  # controlled shutdown: Kafka 1 leads
    mixed.wait_for(lambda: mixed.state(TXNS, tp).leader == 1, 60, "Kafka 1 to lead the producer's partition")
    transact(10)
    producer.flush(30)

    consumer = Consumer(
        {
            "bootstrap.servers": mixed.bootstrap,
            "group.id": "t45-reader",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    read: list[bytes] = []
    try:
        consumer.subscribe([topic])

        def step() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                read.append(msg.value())
            return len(read) >= len(committed)

        mixed.wait_for(step, 120, f"{len(committed)} committed records read")
        extra = consumer.poll(2)  # nothing after them (a fixed wait only to look for extras)
        assert extra is None or extra.error(), extra.value()
    finally:
        consumer.close()
    assert read == committed
    mixed.restart(3)
    assert_kafka_quiet(mixed)
