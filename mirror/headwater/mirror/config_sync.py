"""Topic configs kept in step (MM2's ``sync.topic.configs.enabled``, ``sync.topic.configs.interval.seconds``,
``config.properties.exclude``).

What is copied, at creation (:mod:`headwater.mirror.plan`) and every interval after: every config
set on the source topic itself (DescribeConfigs' source DYNAMIC_TOPIC_CONFIG, MM2's "non-default"
configs; never a broker default, static or dynamic), except the keys matching one of the
``config.properties.exclude`` regexes (MM2's default list, :data:`DEFAULT_EXCLUDE`: replication
throttles, ``message.timestamp.*``, ``unclean.leader.election.enable``, ``min.insync.replicas`` --
properties of a cluster, not of the data).

Every interval one process of the flow (the member that emits the checkpoints and syncs ACLs)
compares each mirrored topic's source configs with its target topic's and sends one
IncrementalAlterConfigs per topic that differs (MM2 3.x's ``use.incremental.alter.configs``):

- a key set at the source with another value in the target is SET;
- a key set on the target topic but no longer at the source (the override was removed there) is
  DELETEd, so the target topic falls back to the target's default (Headwater's reading of "in
  step"; not compared with MM2's own handling of this case);
- an excluded key is never touched: an operator's override on the target (a longer ``retention.ms``
  in the aggregate cluster, with ``retention\\.ms`` added to ``config.properties.exclude``) stays.

The mirror's principal needs DescribeConfigs on the source topics and AlterConfigs on the target
topics. A refusal (TOPIC_AUTHORIZATION_FAILED, POLICY_VIOLATION, INVALID_CONFIG) fails the
supervised unit after the other topics were done: logged at ERROR, counted in
``headwater_mirror_task_failures_total{flow}``, retried with backoff, shown by ``/healthz``.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping

from headwater.client.admin import Admin, ConfigEntry
from headwater.client.errors import UnknownTopicError
from headwater.protocol.errors import KafkaError
from headwater.service.supervisor import Unit, wait_or_stop

__all__ = ["DEFAULT_EXCLUDE", "ConfigSync", "copied_configs", "excluded"]

log = logging.getLogger("headwater.mirror")

#: MM2's DefaultConfigPropertyFilter default for config.properties.exclude (regexes)
DEFAULT_EXCLUDE = (
    r"follower\.replication\.throttled\.replicas",
    r"leader\.replication\.throttled\.replicas",
    r"message\.timestamp\.difference\.max\.ms",
    r"message\.timestamp\.type",
    r"unclean\.leader\.election\.enable",
    r"min\.insync\.replicas",
)
#: what DescribeConfigs says of a config set on the topic itself
_TOPIC_SOURCE = "DYNAMIC_TOPIC_CONFIG"


def excluded(name: str, exclude: Iterable[re.Pattern[str]]) -> bool:
    return any(p.fullmatch(name) for p in exclude)


def copied_configs(entries: Mapping[str, ConfigEntry], exclude: Iterable[re.Pattern[str]]) -> dict[str, str]:
    """The configs a target topic takes from its source topic's DescribeConfigs answer."""
    exclude = tuple(exclude)
    return {
        name: e.value
        for name, e in entries.items()
        if e.source == _TOPIC_SOURCE
        and e.value is not None
        and not e.read_only
        and not e.is_sensitive
        and not excluded(name, exclude)
    }


def changes(
    source: Mapping[str, ConfigEntry], target: Mapping[str, ConfigEntry], exclude: Iterable[re.Pattern[str]]
) -> tuple[dict[str, str], list[str]]:
    """(keys to SET in the target, keys to DELETE there) to bring the target topic in step."""
    exclude = tuple(exclude)
    wanted = copied_configs(source, exclude)
    to_set = {k: v for k, v in wanted.items() if k not in target or target[k].value != v}
    to_delete = sorted(
        k
        for k, e in target.items()
        if e.source == _TOPIC_SOURCE and k not in wanted and k in source and not excluded(k, exclude)
    )
    return to_set, to_delete


class ConfigSync:
    """A flow's topic-config sync: every ``interval_s``, on the flow's leader, each mirrored topic in step."""

    def __init__(
        self,
        *,
        flow: str,
        source_admin: Admin,
        target_admin: Admin,
        interval_s: float,
        exclude: tuple[re.Pattern[str], ...],
        topics: Callable[[], dict[str, str]],
        is_leader: Callable[[], Awaitable[bool]],
    ) -> None:
        self.flow = flow
        self.source_admin = source_admin
        self.target_admin = target_admin
        self.interval_s = interval_s
        self.exclude = exclude
        self.topics = topics  # source topic -> target topic, the topics the flow mirrors now
        self.is_leader = is_leader
        self.altered = 0

    async def sync_topic(self, topic: str, target_topic: str) -> bool:
        """Bring one target topic in step; whether anything was altered."""
        try:
            source = await self.source_admin.describe_configs(topic)
            target = await self.target_admin.describe_configs(target_topic)
        except UnknownTopicError:
            return False  # deleted meanwhile (or not created yet): the next rebalance sees it
        to_set, to_delete = changes(source, target, self.exclude)
        if not to_set and not to_delete:
            return False
        await self.target_admin.alter_topic_configs(target_topic, to_set, to_delete)
        log.info(
            "%s: topic configs of %s brought in step with %s: set %s%s",
            self.flow,
            target_topic,
            topic,
            ", ".join(f"{k}={v}" for k, v in sorted(to_set.items())) or "nothing",
            f"; back to the target's default: {', '.join(to_delete)}" if to_delete else "",
        )
        self.altered += 1
        return True

    async def sync_once(self) -> int:
        """Every mirrored topic in step; how many were altered. Raises the first refusal after
        trying every topic (one topic refused does not hold the others back)."""
        altered = 0
        failures: list[tuple[str, Exception]] = []
        for topic, target_topic in sorted(self.topics().items()):
            try:
                altered += await self.sync_topic(topic, target_topic)
            except (KafkaError, OSError, TimeoutError) as e:
                log.error(
                    "%s: cannot bring the configs of %s in step: %s: %s", self.flow, target_topic, type(e).__name__, e
                )
                failures.append((target_topic, e))
        if failures:
            raise failures[0][1]
        return altered

    async def run(self, unit: Unit, stop: asyncio.Event) -> None:
        """The supervised loop: a refusal fails the unit (ERROR, counted, retried with backoff, /healthz)."""
        while not stop.is_set():
            unit.progress()
            if await self.is_leader():
                await self.sync_once()
            await wait_or_stop(stop, self.interval_s)
