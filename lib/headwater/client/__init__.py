"""Headwater's Kafka client: an asyncio core with a thin synchronous facade.

Async: :class:`Producer`, :class:`Consumer` (the simple consumer), :class:`Admin`, built on
:class:`Cluster` (metadata, one :class:`BrokerConnection` per broker). Blocking:
:class:`SyncProducer`, :class:`SyncConsumer`, :class:`SyncAdmin`. The seeds' high-level
consumer: :class:`ZookeeperConsumerConnector` (groups coordinated through ZooKeeper); audit
counts: :class:`AuditingProducer`. The client depends on
:mod:`headwater.protocol` only.
"""

from headwater.client.admin import Admin, ConfigEntry, NewTopic, TopicDescription, validate_topic_name

# These build on the above (keep them last).
from headwater.client.audit import AuditingProducer, SyncAuditingProducer
from headwater.client.cluster import BrokerMetadata, Cluster, PartitionMetadata, TopicMetadata
from headwater.client.connection import BrokerConnection
from headwater.client.consumer import (
    EARLIEST,
    LATEST,
    Consumer,
    ConsumerRecord,
    FetchResult,
    OffsetAndTimestamp,
    Subscription,
)
from headwater.client.errors import (
    ErrorCode,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    OffsetOutOfRangeError,
    UnknownTopicError,
)
from headwater.client.partitioner import DefaultPartitioner, Partitioner, RoundRobinPartitioner, murmur2
from headwater.client.producer import Producer, RecordFuture, RecordMetadata
from headwater.client.sync import SyncAdmin, SyncConsumer, SyncProducer, SyncSubscription
from headwater.client.zk_consumer import (
    Blacklist,
    ConsumerTimeoutError,
    KafkaStream,
    Whitelist,
    ZookeeperConsumerConnector,
)

__all__ = [
    "EARLIEST",
    "LATEST",
    "Admin",
    "AuditingProducer",
    "Blacklist",
    "BrokerConnection",
    "BrokerMetadata",
    "Cluster",
    "ConfigEntry",
    "Consumer",
    "ConsumerRecord",
    "ConsumerTimeoutError",
    "DefaultPartitioner",
    "ErrorCode",
    "FetchResult",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaStream",
    "KafkaTimeoutError",
    "NewTopic",
    "OffsetAndTimestamp",
    "OffsetOutOfRangeError",
    "PartitionMetadata",
    "Partitioner",
    "Producer",
    "RecordFuture",
    "RecordMetadata",
    "RoundRobinPartitioner",
    "Subscription",
    "SyncAdmin",
    "SyncAuditingProducer",
    "SyncConsumer",
    "SyncProducer",
    "SyncSubscription",
    "TopicDescription",
    "TopicMetadata",
    "UnknownTopicError",
    "Whitelist",
    "ZookeeperConsumerConnector",
    "murmur2",
    "validate_topic_name",
]
