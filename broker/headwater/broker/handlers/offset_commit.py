"""OffsetCommit (key 8), v0-7.

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

if TYPE_CHECKING:
    from headwater.broker.handlers import RequestContext
    from headwater.broker.services import HandlerServices


def zk_offset_path(group: str, topic: str, partition: int) -> str:
    return f"/consumers/{group}/offsets/{topic}/{partition}"


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    if ctx.version == 0:
        errors = await _commit_to_zookeeper(broker, request)
    else:
        errors = await broker.groups.commit(request)
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
