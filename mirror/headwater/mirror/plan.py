"""Where a source topic goes in the target: the destination topic, created when missing.

A destination topic is created with the source's partition count and the configs set on the
source topic, less ``config.properties.exclude`` (see :mod:`headwater.mirror.config_sync`, which
also keeps them in step). ``message.timestamp.type`` is excluded by default (as by MM2's default
config filter): a source topic with LogAppendTime gets a CreateTime target, so
the target keeps the source leader's stamped batches (timestamp type and append times, byte for
byte on the identity path) instead of stamping its own append time over the source's. A :class:`TopicPlan` says which path its partitions take:
identity (same partition number, batches copied raw) when the counts are equal.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from headwater.client.admin import Admin, NewTopic
from headwater.client.cluster import Cluster
from headwater.mirror.config import Flow, MirrorConfig
from headwater.mirror.config_sync import copied_configs
from headwater.protocol.errors import ErrorCode, KafkaError

__all__ = ["TopicPlan", "plan_topic"]

log = logging.getLogger("headwater.mirror")


@dataclass
class TopicPlan:
    target_topic: str
    source_partitions: int
    target_partitions: int
    #: the source gained partitions the target topic does not have (it was mirrored partition for
    #: partition before): the mirror adds them to the target (CreatePartitions, as MM2 does); until
    #: that succeeds the partitions both have stay on the identity mapping and the others wait,
    #: reported; never a silent switch to re-partitioning
    target_short: bool = False

    @property
    def identity(self) -> bool:
        return self.source_partitions == self.target_partitions or self.target_short

    @property
    def mirrored_partitions(self) -> int:
        """How many source partitions (0..n-1) are copied."""
        return min(self.source_partitions, self.target_partitions) if self.target_short else self.source_partitions


async def plan_topic(
    config: MirrorConfig,
    target: Cluster,
    target_admin: Admin,
    source_admin: Admin,
    flow: Flow,
    topic: str,
    source_partitions: int,
) -> TopicPlan:
    """Make sure the target topic exists: created with the source's partition count and configs.
    Raises KafkaError (or a connection error) when it cannot be created or found."""
    target_topic = config.target_topic(flow, topic)
    await target.refresh([target_topic])
    tm = target.topics.get(target_topic)
    if tm is None or not tm.partitions:
        configs: dict[str, str] = {}
        try:
            configs = copied_configs(await source_admin.describe_configs(topic), config.config_exclude)
        except KafkaError as e:
            log.warning(
                "%s: could not read the configs of %s (%s); creating %s with defaults",
                flow.name,
                topic,
                e,
                target_topic,
            )
        rf = config.replication_factor or min(3, max(len(target.brokers), 1))
        result = await target_admin.create_topics(
            [NewTopic(target_topic, source_partitions, rf, configs)], timeout_ms=30000
        )
        error = result.get(target_topic)
        if error is not None and error.code is not ErrorCode.TOPIC_ALREADY_EXISTS:
            raise error
        if error is None:
            log.info(
                "%s: created %s in the target: %d partition(s), replication factor %d, configs %s",
                flow.name,
                target_topic,
                source_partitions,
                rf,
                configs or "(defaults)",
            )
        await target_admin.wait_for_topic(target_topic, timeout=60)
        tm = target.topics.get(target_topic)
    target_partitions = len(tm.partitions) if tm is not None else source_partitions
    return TopicPlan(target_topic, source_partitions, target_partitions)
