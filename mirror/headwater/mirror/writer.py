"""The mirror's own records in a source cluster (gap events on ``__audit``, heartbeats): acks=all,
through the flow's source connections, topics created when missing."""

from __future__ import annotations

import logging

from headwater.client.admin import Admin, NewTopic
from headwater.client.cluster import Cluster
from headwater.client.errors import UnknownTopicError
from headwater.client.producer import Producer
from headwater.protocol.errors import ErrorCode

log = logging.getLogger("headwater.mirror")


class SourceWriter:
    """Writes into one source cluster. A topic missing there is created (``partitions``, replication
    factor the smaller of 3 and the live brokers) before the first record, so the mirror works with
    ``auto.create.topics.enable = false`` too."""

    def __init__(self, cluster: Cluster, admin: Admin) -> None:
        self.cluster = cluster
        self.admin = admin
        self.producer = Producer(
            "", cluster=cluster, acks="all", linger_ms=0, delivery_timeout_ms=60000, request_timeout_ms=15000
        )
        self._known: set[str] = set()

    async def ensure_topic(self, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        if topic in self._known:
            return
        await self.cluster.refresh([topic])
        tm = self.cluster.topics.get(topic)
        if tm is None or not tm.partitions:
            rf = min(3, max(len(self.cluster.brokers), 1))
            result = await self.admin.create_topics([NewTopic(topic, partitions, rf, configs or {})], timeout_ms=30000)
            error = result.get(topic)
            if error is not None and error.code is not ErrorCode.TOPIC_ALREADY_EXISTS:
                raise error
            if error is None:
                log.info("created %s in the source: %d partition(s), replication factor %d", topic, partitions, rf)
            await self.admin.wait_for_topic(topic, timeout=60)
        self._known.add(topic)

    async def send(
        self, topic: str, key: bytes, value: bytes, *, partitions: int = 1, headers: tuple[tuple[str, bytes], ...] = ()
    ) -> None:
        """Produce one record and wait for the acknowledgement (acks=all)."""
        await self.ensure_topic(topic, partitions)
        try:
            await self.producer.send_and_wait(topic, value, key, headers)
        except UnknownTopicError:
            self._known.discard(topic)  # deleted meanwhile: created again on the next call
            raise

    async def close(self) -> None:
        await self.producer.close(timeout=10)
