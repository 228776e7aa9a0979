"""OffsetForLeaderEpoch (key 23), v0-3: where does a leader epoch end on the leader's log?

For each partition this broker leads: the largest epoch <= the requested one and the offset
where it ends (the start of the next epoch, or the log end offset for the latest epoch). For
an epoch older than the leader's earliest, the requested epoch and the leader's earliest
epoch start (as Kafka does since KAFKA-7415); (-1, -1) when the leader has no epochs at all. Followers use it to truncate a divergent tail
before fetching (KIP-101, KIP-279). v1 adds leader_epoch to the answer, v2
current_leader_epoch (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH), v3 replica_id.
Errors: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_FOR_PARTITION.
With an authorizer (authorizer.TABLE, before this handler), as Kafka 2.3: ClusterAction on the
Cluster answers every partition (followers); otherwise Describe on each Topic (KIP-320 consumers
checking for truncation), TOPIC_AUTHORIZATION_FAILED for the others; replica_id takes no part.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    topics = []
    for t in request["topics"]:
        parts = []
        for p in t["partitions"]:
            out: Message = {
                "error_code": ErrorCode.NONE,
                "partition": p["partition"],
                "leader_epoch": -1,
                "end_offset": -1,
            }
            parts.append(out)
            try:
                _, log_ = broker.replicas.leader_partition(t["topic"], p["partition"], p["current_leader_epoch"])
            except KafkaError as e:
                out["error_code"] = e.code
                continue
            out["leader_epoch"], out["end_offset"] = log_.leader_epoch_cache.end_offset_for(
                p["leader_epoch"], log_.log_end_offset
            )
        topics.append({"topic": t["topic"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
