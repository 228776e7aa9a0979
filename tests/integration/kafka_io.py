"""A stock client on the host (confluent-kafka / librdkafka) talking to brokers in containers."""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ClusterMetadata, NewTopic

QUIET = {"log_level": 3}  # librdkafka: errors only (brokers come and go in these tests)
#: librdkafka settings every client here adds (a test module of a secured deployment sets its login,
#: e.g. SASL_SSL as an admin principal, and clears it when done)
CLIENT_CONF: dict[str, object] = {}


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def metadata(bootstrap: str, topic: str | None = None, timeout: float = 10) -> ClusterMetadata:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET, **CLIENT_CONF})
    return admin.list_topics(topic=topic, timeout=timeout)


def wait_for(predicate: object, timeout: float, what: str, interval: float = 0.5) -> object:
    """Poll ``predicate()`` until it returns something truthy; its exceptions count as not yet."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            got = predicate()  # type: ignore[operator]
            if got:
                return got
            last = got
        except Exception as e:
            last = e
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")
        time.sleep(interval)


def broker_ids(bootstrap: str) -> set[int]:
    return set(metadata(bootstrap).brokers)


def create_topic(
    bootstrap: str, name: str, partitions: int, replication_factor: int = 1, config: dict[str, str] | None = None
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET, **CLIENT_CONF})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=replication_factor, config=config or {})],
        operation_timeout=20,
    )
    futures[name].result(30)
    # Until every partition has a leader that the metadata names.
    wait_for(lambda: leaders(bootstrap, name, partitions), 30, f"leaders for {name}")


def leaders(bootstrap: str, topic: str, partitions: int | None = None) -> dict[int, int]:
    """partition → leader id, or {} while the topic or any leader is missing."""
    md = metadata(bootstrap, topic)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        return {}
    out = {p.id: p.leader for p in t.partitions.values()}
    if any(leader < 0 for leader in out.values()):
        return {}
    if partitions is not None and len(out) != partitions:
        return {}
    return out


def produce(
    bootstrap: str, topic: str, records: list[tuple[bytes, bytes]], timeout: float = 60, **conf: object
) -> list[tuple[int, int]]:
    """Produce (key, value) records; every one must be acknowledged. Returns (partition, offset)s."""
    delivered: list[tuple[int, int]] = []
    errors: list[object] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append((msg.partition(), msg.offset()))  # type: ignore[attr-defined]

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", **QUIET, **CLIENT_CONF, **conf})
    for key, value in records:
        while True:
            try:
                p.produce(topic, key=key, value=value, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.1)
    remaining = p.flush(timeout)
    assert remaining == 0, f"{remaining} records not delivered in {timeout} s"
    assert not errors, f"delivery errors: {errors[:5]}"
    assert len(delivered) == len(records)
    return delivered


def consume(bootstrap: str, topic: str, partitions: list[int], count: int, timeout: float = 60) -> list[Record]:
    """Read ``count`` records from the start of the given partitions (no consumer group involved)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "integration-assign",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            **QUIET,
            **CLIENT_CONF,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in partitions])
    out: list[Record] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < count and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().retriable():
                    continue
                raise KafkaException(msg.error())
            out.append(Record(msg.partition(), msg.offset(), msg.key(), msg.value()))
    finally:
        c.close()
    return out


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's high watermark, as its leader answers."""
    partitions = sorted(metadata(bootstrap, topic).topics[topic].partitions)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "integration-offsets", **QUIET, **CLIENT_CONF})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
    finally:
        c.close()
