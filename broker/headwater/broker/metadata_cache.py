"""The broker's view of the cluster, as the controller tells it (UpdateMetadata).

Every broker answers Metadata for the whole cluster from this cache: live brokers with their
endpoints, and per partition its replicas, leader, leader epoch, ISR and offline replicas.
The controller sends the full state when a broker joins and changes as they happen. A
partition whose leader is -2 (LeaderDuringDelete) is being deleted and leaves the cache.

Two things come from ZooKeeper directly: topic configs (``/config/topics``, watched) and the
active controller id (``/controller``, watched by every broker for the election anyway).
All updates run on the event loop.

``answers`` holds the Metadata handler's per-topic answers (handlers/metadata.py), built from this
cache and encoded once per API version. Every change that can alter one is made here, and drops it:
``update_partition`` drops its topic's (leader, epoch, ISR, replicas, offline replicas, a new
partition, a deletion); ``update_brokers`` drops them all when the set of live broker ids changes
(a partition's error code, leader and offline replicas depend on who is alive). Endpoints, racks,
the controller id and the cluster id are not in a topic's answer: the handler reads them per request.
PartitionInfo objects are replaced, never changed in place.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from kazoo.protocol.states import ZnodeStat

from headwater.broker.zk import ZooKeeper
from headwater.protocol.lean import MetadataTopic
from headwater.zk import brokers as zkbrokers
from headwater.zk import config as zkconfig
from headwater.zk import controller as zkcontroller
from headwater.zk import paths as zkpaths
from headwater.zk.json import ZnodeFormatError

log = logging.getLogger(__name__)

LEADER_DURING_DELETE = -2


@dataclass(frozen=True)
class BrokerInfo:
    broker_id: int
    endpoints: dict[str, tuple[str, int]]  # listener name -> (host, port)
    rack: str | None


@dataclass
class PartitionInfo:
    topic: str
    partition: int
    replicas: list[int]
    leader: int = -1
    leader_epoch: int = -1
    isr: list[int] = field(default_factory=list)
    controller_epoch: int = -1
    zk_version: int = -1
    offline_replicas: list[int] = field(default_factory=list)


@dataclass
class TopicInfo:
    name: str
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)
    config: dict[str, str] = field(default_factory=dict)


def parse_broker_registration(broker_id: int, data: bytes | None) -> BrokerInfo | None:
    """The broker's ``/brokers/ids/<id>`` registration (headwater.zk.brokers); None when unreadable."""
    try:
        reg = zkbrokers.decode(broker_id, data)
    except ZnodeFormatError:
        return None
    return BrokerInfo(broker_id, {e.listener: (e.host, e.port) for e in reg.endpoints}, reg.rack)


class MetadataCache:
    def __init__(self, zk: ZooKeeper) -> None:
        self.zk = zk
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}
        self.controller_id: int = -1
        #: topic name -> the Metadata handler's answer for it (see the module's docstring)
        self.answers: dict[str, MetadataTopic] = {}
        self._watched_configs: set[str] = set()
        #: called with the topic name when its config changes
        self.on_topic_config: Callable[[str], None] = lambda t: None
        #: called with the new controller id (or -1) when /controller changes
        self.on_controller_change: Callable[[int], None] = lambda c: None

    def start(self) -> None:
        self.zk.watch_children(zkpaths.CONFIG_TOPICS, self._on_config_topics)
        self.zk.watch_data(zkpaths.CONTROLLER, self._on_controller, persistent=True)

    # -- from the controller -------------------------------------------------------------------

    def update_brokers(self, brokers: list[BrokerInfo]) -> None:
        before = set(self.brokers)
        self.brokers = {b.broker_id: b for b in brokers}
        if before != set(self.brokers):
            self.answers.clear()
        for gone in before - set(self.brokers):
            log.info("broker %d is no longer alive", gone)

    def update_partition(self, state: PartitionInfo) -> None:
        self.answers.pop(state.topic, None)
        if state.leader == LEADER_DURING_DELETE:
            info = self.topics.get(state.topic)
            if info is not None:
                info.partitions.pop(state.partition, None)
                if not info.partitions:
                    del self.topics[state.topic]
            return
        info = self.topics.get(state.topic)
        if info is None:
            info = self.topics[state.topic] = TopicInfo(state.topic, config=self.topic_configs.get(state.topic, {}))
        info.partitions[state.partition] = state

    # -- from ZooKeeper --------------------------------------------------------------------------

    def _on_controller(self, data: bytes | None, stat: ZnodeStat | None) -> None:
        try:
            self.controller_id = zkcontroller.decode_controller(data) if stat is not None else -1
        except ZnodeFormatError:
            self.controller_id = -1
        self.on_controller_change(self.controller_id)

    def _on_config_topics(self, children: list[str]) -> None:
        for name in set(children) - self._watched_configs:
            self._watched_configs.add(name)
            self.zk.watch_data(zkpaths.topic_config_path(name), partial(self._on_config, name))

    def _on_config(self, topic: str, data: bytes | None, stat: ZnodeStat | None) -> None:
        if stat is None:
            self._watched_configs.discard(topic)
            self.topic_configs.pop(topic, None)
            return
        try:
            config = zkconfig.decode_entity_config(zkpaths.topic_config_path(topic), data)
        except ZnodeFormatError:
            config = {}
        self.topic_configs[topic] = config
        info = self.topics.get(topic)
        if info is not None:
            info.config = config
        self.on_topic_config(topic)

    # -- queries -----------------------------------------------------------------------------------

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        info = self.topics.get(topic)
        return info.partitions.get(partition) if info else None

    def live_broker_ids(self) -> list[int]:
        return sorted(self.brokers)

    def config_of(self, topic: str) -> dict[str, str]:
        return self.topic_configs.get(topic, {})
