"""The broker's view of the cluster, kept current by ZooKeeper watches.

Every broker answers Metadata for the whole cluster from this cache. It watches
``/brokers/ids`` (and each registration), ``/brokers/topics`` (each topic's replica
assignment and each partition's state znode) and ``/config/topics``. All updates run on the
event loop (callbacks arrive through :class:`~headwater.broker.zk.ZooKeeper`'s bridge).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kazoo.protocol.states import ZnodeStat

from headwater.broker import zk as zkpaths
from headwater.broker.zk import ZooKeeper, from_json

log = logging.getLogger(__name__)


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


@dataclass
class TopicInfo:
    name: str
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)
    config: dict[str, str] = field(default_factory=dict)


def parse_broker_registration(broker_id: int, data: Any) -> BrokerInfo | None:
    if not isinstance(data, dict):
        return None
    endpoints: dict[str, tuple[str, int]] = {}
    for url in data.get("endpoints") or []:
        name, _, rest = str(url).partition("://")
        host, _, port = rest.rpartition(":")
        if name and port.isdigit():
            endpoints[name.upper()] = (host.strip("[]"), int(port))
    if not endpoints and data.get("host"):
        endpoints["PLAINTEXT"] = (str(data["host"]), int(data.get("port", 9092)))
    rack = data.get("rack")
    return BrokerInfo(broker_id, endpoints, rack if isinstance(rack, str) else None)


class MetadataCache:
    def __init__(self, zk: ZooKeeper) -> None:
        self.zk = zk
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.controller_id: int = -1
        self._watched_topics: set[str] = set()
        self._watched_brokers: set[int] = set()
        self._watched_states: set[tuple[str, int]] = set()
        #: called with (PartitionInfo) when a partition's state or assignment changes
        self.on_partition_change: Callable[[PartitionInfo], None] = lambda p: None
        #: called with the topic name when a topic disappears from /brokers/topics
        self.on_topic_deleted: Callable[[str], None] = lambda t: None
        #: called with the topic name when its config changes
        self.on_topic_config: Callable[[str], None] = lambda t: None
        self._changed: list[Callable[[], None]] = []

    def start(self) -> None:
        self.zk.watch_children(zkpaths.BROKER_IDS, self._on_broker_ids)
        self.zk.watch_children(zkpaths.BROKER_TOPICS, self._on_topics)
        self.zk.watch_data(zkpaths.CONTROLLER, self._on_controller)

    def add_change_listener(self, fn: Callable[[], None]) -> None:
        """``fn()`` after any change (used by requests waiting for metadata to settle)."""
        self._changed.append(fn)

    def _notify(self) -> None:
        for fn in list(self._changed):
            fn()

    # -- brokers ---------------------------------------------------------------------------

    def _on_broker_ids(self, children: list[str]) -> None:
        ids = {int(c) for c in children if c.isdigit()}
        for gone in set(self.brokers) - ids:
            del self.brokers[gone]
            log.info("broker %d left the cluster", gone)
        self._watched_brokers &= ids
        for bid in ids - self._watched_brokers:
            self._watched_brokers.add(bid)
            self.zk.watch_data(zkpaths.broker_path(bid), partial(self._on_broker, bid))
        self._notify()

    def _on_broker(self, broker_id: int, data: bytes | None, stat: ZnodeStat | None) -> None:
        if stat is None:
            self.brokers.pop(broker_id, None)
            self._watched_brokers.discard(broker_id)
        else:
            info = parse_broker_registration(broker_id, from_json(data))
            if info is not None:
                if broker_id not in self.brokers:
                    log.info("broker %d joined the cluster: %s", broker_id, info.endpoints)
                self.brokers[broker_id] = info
        self._notify()

    def _on_controller(self, data: bytes | None, stat: ZnodeStat | None) -> None:
        value = from_json(data) if stat is not None else None
        self.controller_id = int(value.get("brokerid", -1)) if isinstance(value, dict) else -1
        self._notify()

    # -- topics ------------------------------------------------------------------------------

    def _on_topics(self, children: list[str]) -> None:
        names = set(children)
        for gone in set(self.topics) - names:
            del self.topics[gone]
            self._watched_topics.discard(gone)
            self._watched_states = {k for k in self._watched_states if k[0] != gone}
            log.info("topic %s deleted", gone)
            self.on_topic_deleted(gone)
        for name in names - self._watched_topics:
            self._watched_topics.add(name)
            self.zk.watch_data(zkpaths.topic_path(name), partial(self._on_assignment, name))
            self.zk.watch_data(zkpaths.topic_config_path(name), partial(self._on_config, name))
        self._notify()

    def _on_assignment(self, topic: str, data: bytes | None, stat: ZnodeStat | None) -> None:
        if stat is None or topic not in self._watched_topics:
            return  # deletion is handled by the children watch
        value = from_json(data)
        if not isinstance(value, dict) or not isinstance(value.get("partitions"), dict):
            log.warning("topic %s has an unreadable assignment: %r", topic, data)
            return
        info = self.topics.setdefault(topic, TopicInfo(topic))
        for p_str, replicas in value["partitions"].items():
            p = int(p_str)
            part = info.partitions.get(p)
            if part is None:
                part = info.partitions[p] = PartitionInfo(topic, p, [int(r) for r in replicas])
            else:
                part.replicas = [int(r) for r in replicas]
            if (topic, p) not in self._watched_states:
                self._watched_states.add((topic, p))
                self.zk.watch_data(zkpaths.partition_state_path(topic, p), partial(self._on_state, topic, p))
        self._notify()

    def _on_state(self, topic: str, partition: int, data: bytes | None, stat: ZnodeStat | None) -> None:
        info = self.topics.get(topic)
        part = info.partitions.get(partition) if info else None
        if part is None:
            return
        if stat is None:
            self._watched_states.discard((topic, partition))
            part.leader, part.isr = -1, []
        else:
            value = from_json(data)
            if not isinstance(value, dict):
                return
            part.leader = int(value.get("leader", -1))
            part.leader_epoch = int(value.get("leader_epoch", -1))
            part.isr = [int(r) for r in value.get("isr", [])]
            part.controller_epoch = int(value.get("controller_epoch", -1))
            part.zk_version = stat.version
        self.on_partition_change(part)
        self._notify()

    def _on_config(self, topic: str, data: bytes | None, stat: ZnodeStat | None) -> None:
        if topic not in self._watched_topics:
            return
        info = self.topics.setdefault(topic, TopicInfo(topic))
        value = from_json(data) if stat is not None else None
        cfg = value.get("config") if isinstance(value, dict) else None
        info.config = {str(k): str(v) for k, v in cfg.items()} if isinstance(cfg, dict) else {}
        self.on_topic_config(topic)
        self._notify()

    # -- queries -------------------------------------------------------------------------------

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        info = self.topics.get(topic)
        return info.partitions.get(partition) if info else None

    def live_broker_ids(self) -> list[int]:
        return sorted(self.brokers)
