"""Kafka 2.3's error codes for the edge cases stock clients test (issue 32, item 2): one table per
API, each request sent by kafka-python's own protocol classes and record builder (a stock client's
encoder, not ours), the expected code as Kafka 2.3 answers it:

- Produce / Fetch / ListOffsets for a partition or topic the broker does not have:
  UNKNOWN_TOPIC_OR_PARTITION (3) -- Kafka's ReplicaManager answers it for both; Produce to the
  internal ``__consumer_offsets``: INVALID_TOPIC_EXCEPTION (17); a batch above
  ``max.message.bytes``: MESSAGE_TOO_LARGE (10, RecordTooLargeException); a record set above
  ``segment.bytes``: RECORD_LIST_TOO_LARGE (18, RecordBatchTooLargeException); acks outside
  {-1, 0, 1}: INVALID_REQUIRED_ACKS (21); a fetch offset past the log end: OFFSET_OUT_OF_RANGE (1);
  a leader epoch above the leader's (KIP-320): UNKNOWN_LEADER_EPOCH (75).
- CreateTopics: an illegal name (empty, ``.``, ``..``, over 249 characters, a character other
  than ASCII alphanumerics, ``.``, ``_``, ``-``): INVALID_TOPIC_EXCEPTION (17); 0 partitions:
  INVALID_PARTITIONS (37); more replicas than brokers: INVALID_REPLICATION_FACTOR (38); an
  existing topic: TOPIC_ALREADY_EXISTS (36); an unknown config: INVALID_CONFIG (40); a topic named
  twice in one request: INVALID_REQUEST (42).
- Metadata: an illegal name with auto-creation allowed: INVALID_TOPIC_EXCEPTION (17, what the
  failed auto-creation says), without it UNKNOWN_TOPIC_OR_PARTITION (3); a new legal name with
  auto-creation: LEADER_NOT_AVAILABLE (5, created, no leader yet) or NONE once it has one.
- A request above ``socket.request.max.bytes``: the broker closes the connection (Kafka's
  SocketServer ``InvalidReceiveException``); the broker keeps serving.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.errors import KafkaConnectionError
from kafka.net.compat import KafkaNetClient
from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder

from headwater.testing.zookeeper import ZooKeeperServer
from tests.harness.broker import BrokerProcess

UNKNOWN_TOPIC_OR_PARTITION = 3
OFFSET_OUT_OF_RANGE = 1
LEADER_NOT_AVAILABLE = 5
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
RECORD_LIST_TOO_LARGE = 18
INVALID_REQUIRED_ACKS = 21
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_CONFIG = 40
INVALID_REQUEST = 42
UNKNOWN_LEADER_EPOCH = 75

SOCKET_REQUEST_MAX_BYTES = 300_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperServer) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("errcodes"),
        0,
        f"{zookeeper.connect}/errcodes",
        socket_request_max_bytes=SOCKET_REQUEST_MAX_BYTES,
        message_max_bytes=200_000,
        num_partitions=3,
        log_cleaner_max_compaction_lag_ms=86_400_000,
    )
    b.start()
    try:
        with client(b) as c:
            for name, configs in (
                ("t1", {}),
                ("tiny", {"max.message.bytes": "1000"}),
                ("small-seg", {"segment.bytes": "2000", "max.message.bytes": "100000"}),
            ):
                topic = _topic(name, 1, 1, configs)
                assert _request(c, _create([topic]))["topics"][0]["error_code"] == 0
            produced = _request(c, _produce("t1", 0, _records(10)))
            assert produced["responses"][0]["partition_responses"][0]["error_code"] == 0
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def kp(broker: BrokerProcess) -> Iterator[KafkaNetClient]:
    """kafka-python's network client, shared by the module's tests, closed (with its I/O thread) after."""
    with client(broker) as c:
        yield c


@contextmanager
def client(b: BrokerProcess) -> Iterator[KafkaNetClient]:
    c = KafkaNetClient(bootstrap_servers=b.bootstrap, request_timeout_ms=30000)
    try:
        c.check_version()
        yield c
    finally:
        c.close()


def _request(c: KafkaNetClient, request: Any) -> dict[str, Any]:
    return dict(c.send_and_receive(0, request, timeout_ms=30000).to_dict())


def _records(value_size: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 21,
    )
    builder.append(0, timestamp=None, key=b"k", value=b"v" * value_size, headers=[])
    return bytes(builder.build())


def _produce(topic: str, partition: int, records: bytes, acks: int = 1) -> Any:
    data = ProduceRequest.TopicProduceData
    return ProduceRequest(
        version=7,
        acks=acks,
        timeout_ms=10000,
        topic_data=[data(name=topic, partition_data=[data.PartitionProduceData(index=partition, records=records)])],
    )


def _topic(name: str, partitions: int, rf: int, configs: dict[str, str] | None = None) -> Any:
    t = CreateTopicsRequest.CreatableTopic
    return t(
        name=name,
        num_partitions=partitions,
        replication_factor=rf,
        assignments=[],
        configs=[t.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()],
    )


def _create(topics: list[Any], version: int = 3) -> Any:
    return CreateTopicsRequest(version=version, topics=topics, timeout_ms=10000, validate_only=False)


PRODUCE_CASES = [
    ("unknown partition", "t1", 5, 10, 1, UNKNOWN_TOPIC_OR_PARTITION),
    ("negative partition", "t1", -1, 10, 1, UNKNOWN_TOPIC_OR_PARTITION),
    ("unknown topic", "no-such-topic", 0, 10, 1, UNKNOWN_TOPIC_OR_PARTITION),
    ("illegal topic name", "bad name!", 0, 10, 1, UNKNOWN_TOPIC_OR_PARTITION),
    ("internal topic", "__consumer_offsets", 0, 10, 1, INVALID_TOPIC_EXCEPTION),
    ("batch above max.message.bytes", "tiny", 0, 2000, 1, MESSAGE_TOO_LARGE),
    ("record set above segment.bytes", "small-seg", 0, 5000, 1, RECORD_LIST_TOO_LARGE),
    ("acks=2", "t1", 0, 10, 2, INVALID_REQUIRED_ACKS),
    ("a valid produce", "t1", 0, 10, 1, 0),
]


@pytest.mark.parametrize(("case", "topic", "partition", "size", "acks", "code"), PRODUCE_CASES, ids=lambda x: x)
def test_produce_error_codes(
    kp: KafkaNetClient, case: str, topic: str, partition: int, size: int, acks: int, code: int
) -> None:
    resp = _request(kp, _produce(topic, partition, _records(size), acks))
    assert resp["responses"][0]["partition_responses"][0]["error_code"] == code, (case, resp)


FETCH_CASES = [
    ("unknown partition", "t1", 5, 0, -1, UNKNOWN_TOPIC_OR_PARTITION),
    ("unknown topic", "no-such-topic", 0, 0, -1, UNKNOWN_TOPIC_OR_PARTITION),
    ("offset past the log end", "t1", 0, 1_000_000, -1, OFFSET_OUT_OF_RANGE),
    ("leader epoch above the leader's", "t1", 0, 0, 99, UNKNOWN_LEADER_EPOCH),
    ("a valid fetch", "t1", 0, 0, -1, 0),
]


@pytest.mark.parametrize(("case", "topic", "partition", "offset", "epoch", "code"), FETCH_CASES, ids=lambda x: x)
def test_fetch_error_codes(
    kp: KafkaNetClient, case: str, topic: str, partition: int, offset: int, epoch: int, code: int
) -> None:
    t = FetchRequest.FetchTopic
    req = FetchRequest(
        version=10,
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            t(
                topic=topic,
                partitions=[
                    t.FetchPartition(
                        partition=partition,
                        current_leader_epoch=epoch,
                        fetch_offset=offset,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
    )
    resp = _request(kp, req)
    assert resp["responses"][0]["partitions"][0]["error_code"] == code, (case, resp)


LIST_OFFSETS_CASES = [
    ("unknown partition", "t1", 5, -1, -1, UNKNOWN_TOPIC_OR_PARTITION),
    ("unknown topic", "no-such-topic", 0, -1, -1, UNKNOWN_TOPIC_OR_PARTITION),
    ("leader epoch above the leader's", "t1", 0, -1, 99, UNKNOWN_LEADER_EPOCH),
    ("a timestamp after every record", "t1", 0, 2**62, -1, 0),
    ("latest", "t1", 0, -1, -1, 0),
]


@pytest.mark.parametrize(
    ("case", "topic", "partition", "timestamp", "epoch", "code"), LIST_OFFSETS_CASES, ids=lambda x: x
)
def test_list_offsets_error_codes(
    kp: KafkaNetClient, case: str, topic: str, partition: int, timestamp: int, epoch: int, code: int
) -> None:
    t = ListOffsetsRequest.ListOffsetsTopic
    req = ListOffsetsRequest(
        version=5,
        replica_id=-1,
        isolation_level=0,
        topics=[
            t(
                name=topic,
                partitions=[
                    t.ListOffsetsPartition(partition_index=partition, current_leader_epoch=epoch, timestamp=timestamp)
                ],
            )
        ],
    )
    resp = _request(kp, req)
    assert resp["topics"][0]["partitions"][0]["error_code"] == code, (case, resp)


CREATE_TOPICS_CASES = [
    ("empty name", [_topic("", 1, 1)], INVALID_TOPIC_EXCEPTION),
    ("dot", [_topic(".", 1, 1)], INVALID_TOPIC_EXCEPTION),
    ("dot dot", [_topic("..", 1, 1)], INVALID_TOPIC_EXCEPTION),
    ("250 characters", [_topic("a" * 250, 1, 1)], INVALID_TOPIC_EXCEPTION),
    ("a space", [_topic("bad name", 1, 1)], INVALID_TOPIC_EXCEPTION),
    ("a slash", [_topic("a/b", 1, 1)], INVALID_TOPIC_EXCEPTION),
    ("zero partitions", [_topic("zero-partitions", 0, 1)], INVALID_PARTITIONS),
    ("more replicas than brokers", [_topic("rf-two", 1, 2)], INVALID_REPLICATION_FACTOR),
    ("existing topic", [_topic("t1", 1, 1)], TOPIC_ALREADY_EXISTS),
    ("unknown config", [_topic("bad-config", 1, 1, {"retention.hours": "1"})], INVALID_CONFIG),
    ("invalid config value", [_topic("bad-value", 1, 1, {"segment.ms": "0"})], INVALID_CONFIG),
    (
        "min lag above the broker's max lag",
        [_topic("lags", 1, 1, {"min.compaction.lag.ms": "90000000"})],
        INVALID_CONFIG,
    ),
    ("named twice", [_topic("twice", 1, 1), _topic("twice", 1, 1)], INVALID_REQUEST),
    ("249 characters", [_topic("b" * 249, 1, 1)], 0),
]


@pytest.mark.parametrize(("case", "topics", "code"), CREATE_TOPICS_CASES, ids=lambda x: x if isinstance(x, str) else "")
def test_create_topics_error_codes(kp: KafkaNetClient, case: str, topics: list[Any], code: int) -> None:
    resp = _request(kp, _create(topics))
    assert {t["error_code"] for t in resp["topics"]} == {code}, (case, resp)


METADATA_CASES = [
    ("illegal name, auto-creation allowed", "bad name!", True, {INVALID_TOPIC_EXCEPTION}),
    ("illegal name, no auto-creation", "bad name!", False, {UNKNOWN_TOPIC_OR_PARTITION}),
    ("too long, auto-creation allowed", "c" * 250, True, {INVALID_TOPIC_EXCEPTION}),
    ("unknown topic, no auto-creation", "no-such-topic", False, {UNKNOWN_TOPIC_OR_PARTITION}),
    ("new topic, auto-created", "auto-created", True, {LEADER_NOT_AVAILABLE, 0}),
    ("existing topic", "t1", False, {0}),
]


@pytest.mark.parametrize(("case", "topic", "auto_create", "codes"), METADATA_CASES, ids=lambda x: x)
def test_metadata_error_codes(kp: KafkaNetClient, case: str, topic: str, auto_create: bool, codes: set[int]) -> None:
    req = MetadataRequest(
        version=7,
        topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
        allow_auto_topic_creation=auto_create,
    )
    resp = _request(kp, req)
    assert resp["topics"][0]["error_code"] in codes, (case, resp)


def test_a_request_above_socket_request_max_bytes_closes_the_connection(broker: BrokerProcess) -> None:
    big = _produce("t1", 0, _records(SOCKET_REQUEST_MAX_BYTES + 1000))
    with client(broker) as c, pytest.raises(KafkaConnectionError):
        c.send_and_receive(0, big, timeout_ms=30000)
    # The broker keeps serving: a new connection produces as usual.
    with client(broker) as c:
        ok = _request(c, _produce("t1", 0, _records(10)))
    assert ok["responses"][0]["partition_responses"][0]["error_code"] == 0


def test_create_topics_v4_takes_broker_defaults_for_minus_one(broker: BrokerProcess, kp: KafkaNetClient) -> None:
    """KIP-464: librdkafka sends -1 for "broker default" (CreateTopics v4); below v4 it is refused."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics(
        [NewTopic("defaults", num_partitions=-1, replication_factor=-1)], operation_timeout=30
    )
    futures["defaults"].result(60)
    metadata = admin.list_topics("defaults", timeout=30).topics["defaults"]
    assert len(metadata.partitions) == 3  # the broker's num.partitions
    assert {len(p.replicas) for p in metadata.partitions.values()} == {1}  # default.replication.factor
    v3 = _request(kp, _create([_topic("minus-one-v3", -1, 1)], version=3))
    assert v3["topics"][0]["error_code"] == INVALID_PARTITIONS
    v4 = _request(kp, _create([_topic("minus-one-v4", 2, -1)], version=4))
    assert v4["topics"][0]["error_code"] == 0


def test_create_topics_v5_returns_the_topics_partitions_replication_factor_and_configs(kp: KafkaNetClient) -> None:
    """KIP-525, a flexible version (KIP-482) encoded and decoded by kafka-python."""
    resp = _request(kp, _create([_topic("described-v5", -1, -1, {"retention.ms": "1000"})], version=5))
    topic = resp["topics"][0]
    assert (topic["error_code"], topic["num_partitions"], topic["replication_factor"]) == (0, 3, 1)
    configs = {e["name"]: (e["value"], e["config_source"]) for e in topic["configs"]}
    assert configs["retention.ms"] == ("1000", 1)  # DYNAMIC_TOPIC_CONFIG
    assert configs["max.compaction.lag.ms"] == ("86400000", 4)  # STATIC_BROKER_CONFIG (this broker's)
    assert configs["message.timestamp.type"] == ("CreateTime", 5)  # DEFAULT_CONFIG
    refused = _request(kp, _create([_topic("t1", 1, 1)], version=5))["topics"][0]
    assert (refused["error_code"], refused["num_partitions"], refused["replication_factor"]) == (
        TOPIC_ALREADY_EXISTS,
        -1,
        -1,
    )
