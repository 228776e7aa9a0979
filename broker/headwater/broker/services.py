"""What request handlers and the controller may use of a broker: two narrow interfaces.

``KafkaBroker`` (server.py) is the one place that builds and starts things — ZooKeeper session,
log manager, replica manager, purgatory, metrics, controller, listeners. Request handlers
(``handlers/*.py``, one module per Kafka API) and the controller never import it; they are typed
against these protocols, which KafkaBroker satisfies, so either can be driven by any object that
offers the same services::

    handlers   -> HandlerServices: broker_id, broker_epoch, cluster_id, config, cache (metadata),
                  replicas (partitions, leader_partition, ISR), purgatory, metrics, zk (topic admin),
                  controller (controlled shutdown), groups (the group coordinator),
                  producer_ids (InitProducerId), txns (the transaction coordinator),
                  wait_for_metadata / metadata_changed
    controller -> ControllerHost:  broker_id, config, cache, metrics, zk, stopping
    group coordinator -> GroupHost: config, cache, replicas, purgatory, metrics
    transaction coordinator -> TxnHost: broker_id, config, cache, replicas, purgatory, metrics, producer_ids
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

# The hosts of the controller and the coordinators live beside them (their consumers): named
# here too, so the interfaces can be found in one place.
from headwater.broker.controller.controller import ControllerHost
from headwater.broker.group.coordinator import GroupHost
from headwater.broker.txn.coordinator import TxnHost

if TYPE_CHECKING:
    from headwater.broker.authorizer import Authorizer
    from headwater.broker.config import BrokerConfig
    from headwater.broker.controller.controller import Controller
    from headwater.broker.dynamic_config import DynamicBrokerConfig
    from headwater.broker.group.coordinator import GroupCoordinator
    from headwater.broker.metadata_cache import MetadataCache
    from headwater.broker.metrics import BrokerMetrics
    from headwater.broker.producer_ids import ProducerIdManager
    from headwater.broker.purgatory import Purgatory
    from headwater.broker.replica_manager import ReplicaManager
    from headwater.broker.replication_quota import ReplicationQuota
    from headwater.broker.txn.coordinator import TransactionCoordinator
    from headwater.broker.zk import ZooKeeper

__all__ = ["ControllerHost", "GroupHost", "HandlerServices", "TxnHost"]


class HandlerServices(Protocol):
    """What a request handler reaches: this broker's identity, its config and metadata cache, the
    replica manager (the partitions it hosts), the purgatory of waiting requests, metrics, the
    ZooKeeper client (topic administration writes), and the controller (controlled shutdown)."""

    broker_id: int
    broker_epoch: int
    cluster_id: str
    config: BrokerConfig
    cache: MetadataCache
    replicas: ReplicaManager
    purgatory: Purgatory
    metrics: BrokerMetrics
    zk: ZooKeeper
    controller: Controller
    groups: GroupCoordinator
    producer_ids: ProducerIdManager
    txns: TransactionCoordinator
    authorizer: Authorizer | None  # None: authorizer.class.name is not set
    dynamic_config: DynamicBrokerConfig  # /config/brokers/<id> and <default>, applied live
    leader_quota: ReplicationQuota  # leader.replication.throttled.rate (follower fetches)

    def metadata_changed(self) -> None:
        """An UpdateMetadata was applied: wake whoever waits for it."""

    async def wait_for_metadata(self, timeout_s: float) -> None:
        """Until the next UpdateMetadata is applied (or the timeout)."""
