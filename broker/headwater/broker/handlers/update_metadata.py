"""UpdateMetadata (key 6), v0-5: the controller's view of live brokers and partition states.

Replaces this broker's list of live brokers (v0: one PLAINTEXT host/port; v1+: endpoints,
named by listener from v3, else by security protocol) and updates the listed partitions; a
leader of -2 means the partition is being deleted. Stale controller epochs are refused with
STALE_CONTROLLER_EPOCH, stale broker epochs (v5) with STALE_BROKER_EPOCH.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.broker.handlers._controller_requests import flat_partition_states
from headwater.broker.metadata_cache import BrokerInfo, PartitionInfo
from headwater.protocol.errors import ErrorCode
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices

_PROTOCOL_NAMES = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    if request["broker_epoch"] >= 0 and request["broker_epoch"] < broker.broker_epoch:
        return {"error_code": ErrorCode.STALE_BROKER_EPOCH}
    if not broker.replicas.check_controller_epoch(request["controller_epoch"]):
        return {"error_code": ErrorCode.STALE_CONTROLLER_EPOCH}
    brokers = []
    for b in request["live_brokers"]:
        endpoints: dict[str, tuple[str, int]] = {}
        if ctx.version == 0:
            endpoints["PLAINTEXT"] = (b["v0_host"], b["v0_port"])
        for e in b["endpoints"]:
            name = e["listener"] or _PROTOCOL_NAMES.get(e["security_protocol"], "PLAINTEXT")
            endpoints[name] = (e["host"], e["port"])
        brokers.append(BrokerInfo(b["id"], endpoints, b["rack"]))
    broker.cache.update_brokers(brokers)
    broker.replicas.on_live_brokers_changed()  # followers waiting for a leader's endpoint
    for st in flat_partition_states(request):
        broker.cache.update_partition(
            PartitionInfo(
                topic=st["topic_name"],
                partition=st["partition_index"],
                replicas=list(st["replicas"]),
                leader=st["leader"],
                leader_epoch=st["leader_epoch"],
                isr=list(st["isr"]),
                controller_epoch=st["controller_epoch"],
                zk_version=st["zk_version"],
                offline_replicas=list(st["offline_replicas"]),
            )
        )
    broker.metadata_changed()
    return {"error_code": ErrorCode.NONE}
