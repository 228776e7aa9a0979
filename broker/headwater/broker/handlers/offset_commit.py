"""OffsetCommit (key 8), v0-7.

- Every version: a topic or partition this broker's metadata does not have is answered
  UNKNOWN_TOPIC_OR_PARTITION for that partition (nothing stored), as Kafka 2.3 does.
- v1+: stored by the group coordinator in ``__consumer_offsets`` (acks=all) and answered once the
  ISR has it. A commit with generation -1 to a group without members is a "simple" commit (a
  consumer that assigns partitions itself). Per-partition errors: NOT_COORDINATOR,
  COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, ILLEGAL_GENERATION,
  UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, OFFSET_METADATA_TOO_LARGE
  (``offset.metadata.max.bytes``), INVALID_GROUP_ID.
- v0: stored in ZooKeeper at ``/consumers/<group>/offsets/<topic>/<partition>`` (the decimal
  offset), as Kafka does -- where the seeds' ZooKeeper consumer keeps its offsets too.
- v2-4's retention_time_ms is ignored: offsets expire by ``offsets.retention.minutes`` (KIP-211).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

from headwater.protocol.errors import ErrorCode
from headwater.protocol.schema import Message
from headwater.zk.paths import consumer_offset_path

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices


zk_offset_path = consumer_offset_path  # the seeds' layout: /consumers/<g>/offsets/<t>/<p>


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    # As Kafka's KafkaApis: a partition the metadata cache does not have is answered
    # UNKNOWN_TOPIC_OR_PARTITION and not committed; the rest go to ZooKeeper (v0) or the
    # coordinator -- which is not asked at all when nothing is left.
    known = [
        {**t, "partitions": [p for p in t["partitions"] if broker.cache.partition(t["name"], p["partition_index"])]}
        for t in request["topics"]
    ]
    errors: dict[tuple[str, int], ErrorCode] = {
        (t["name"], p["partition_index"]): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        for t in request["topics"]
        for p in t["partitions"]
    }
    known = [t for t in known if t["partitions"]]
    if known:
        sub = {**request, "topics": known}
        errors.update(await _commit_to_zookeeper(broker, sub) if ctx.version == 0 else await broker.groups.commit(sub))
    return {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": t["name"],
                "partitions": [
                    {"partition_index": p["partition_index"], "error_code": errors[(t["name"], p["partition_index"])]}
                    for p in t["partitions"]
                ],
            }
            for t in request["topics"]
        ],
    }


async def _commit_to_zookeeper(broker: HandlerServices, request: Message) -> dict[tuple[str, int], ErrorCode]:
    group = request["group_id"]
    out: dict[tuple[str, int], ErrorCode] = {}
    for t in request["topics"]:
        for p in t["partitions"]:
            tp = (t["name"], p["partition_index"])
            if not group:
                out[tp] = ErrorCode.INVALID_GROUP_ID
            elif len((p["committed_metadata"] or "").encode()) > broker.config.offset_metadata_max_bytes:
                out[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                path = zk_offset_path(group, *tp)
                try:
                    await broker.zk.call(_write, broker.zk.client, path, str(p["committed_offset"]).encode())
                    out[tp] = ErrorCode.NONE
                except KazooException:
                    out[tp] = ErrorCode.UNKNOWN_SERVER_ERROR
    return out


def _write(client: KazooClient, path: str, data: bytes) -> None:
    try:
        client.set(path, data)
    except NoNodeError:
        try:
            client.create(path, data, makepath=True)
        except NodeExistsError:
            client.set(path, data)
