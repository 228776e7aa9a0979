"""Headwater's Kafka client: an asyncio core with a thin synchronous facade.

Async: :class:`Producer`, :class:`Consumer` (the simple consumer), :class:`Admin`, built on
:class:`Cluster` (metadata, one :class:`BrokerConnection` per broker). Blocking:
:class:`SyncProducer`, :class:`SyncConsumer`, :class:`SyncAdmin`. The seeds' high-level
consumer: :class:`ZookeeperConsumerConnector` (groups coordinated through ZooKeeper); audit
counts: :class:`AuditingProducer`. The client depends on
:mod:`headwater.protocol` only.
"""

from headwater.client.admin import Admin, ConfigEntry, NewTopic, TopicDescription, validate_topic_name
from headwater.client.assignors import Assignment, RangeAssignor, RoundRobinAssignor

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
from headwater.client.group_consumer import (
    CommitFailedError,
    FencedInstanceError,
    GroupConfig,
    GroupMembership,
    RebalanceListener,
)
from headwater.client.partitioner import DefaultPartitioner, Partitioner, RoundRobinPartitioner, murmur2
from headwater.client.producer import Producer, RecordFuture, RecordMetadata
from headwater.client.sync import SyncAdmin, SyncConsumer, SyncProducer, SyncSubscription
from headwater.client.sync_group import SyncGroupConsumer
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
    "Assignment",
    "AuditingProducer",
    "Blacklist",
    "BrokerConnection",
    "BrokerMetadata",
    "Cluster",
    "CommitFailedError",
    "ConfigEntry",
    "Consumer",
    "ConsumerRecord",
    "ConsumerTimeoutError",
    "DefaultPartitioner",
    "ErrorCode",
    "FencedInstanceError",
    "FetchResult",
    "GroupConfig",
    "GroupMembership",
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
    "RangeAssignor",
    "RebalanceListener",
    "RecordFuture",
    "RecordMetadata",
    "RoundRobinAssignor",
    "RoundRobinPartitioner",
    "Subscription",
    "SyncAdmin",
    "SyncAuditingProducer",
    "SyncConsumer",
    "SyncGroupConsumer",
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
