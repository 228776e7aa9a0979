"""ListOffsets (key 2), v0-5.

- timestamp -1 (latest): the high watermark (what a consumer can read; a follower, with its
  replica id, gets the log end offset); -2 (earliest): the
  log start offset; otherwise the first offset whose record timestamp is >= the timestamp,
  found through the time index (-1/-1 when there is none).
- v0 answers Kafka's old ``offsets_before``: up to ``max_num_offsets`` segment base offsets
  at or before the time, plus the log end for latest, in descending order.
- v2+ isolation_level: read_committed (1) gets the last stable offset for latest (and timestamp
  lookups stop there), read_uncommitted the high watermark.
- v4+ current_leader_epoch is checked (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH); the
  answer's leader_epoch is -1 (epoch lookups come with OffsetsForLeaderEpoch, the cluster issue).
- KIP-207: a consumer's latest (v2+, where the request has an isolation level) while this
  leader's high watermark is still below the offset its epoch started at -- right after it became
  leader, before its followers fetched -- is refused with OFFSET_NOT_AVAILABLE (v5) or
  LEADER_NOT_AVAILABLE (v2-4), both retriable, rather than answered with an offset below what an
  earlier leader already exposed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices

LATEST = -1
EARLIEST = -2


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    topics = []
    for t in request["topics"]:
        parts = [
            _one(broker, ctx.version, t["name"], p, request["replica_id"], request["isolation_level"] == 1)
            for p in t["partitions"]
        ]
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


def _one(
    broker: HandlerServices, version: int, topic: str, p: Message, replica_id: int, read_committed: bool = False
) -> Message:
    out: Message = {
        "partition_index": p["partition_index"],
        "error_code": ErrorCode.NONE,
        "old_style_offsets": [],
        "timestamp": -1,
        "offset": -1,
        "leader_epoch": -1,
    }
    try:
        part, log_ = broker.replicas.leader_partition(topic, p["partition_index"], p["current_leader_epoch"])
    except KafkaError as e:
        out["error_code"] = e.code
        return out
    ts = p["timestamp"]
    visible = part.high_watermark
    if read_committed and replica_id < 0:
        visible = log_.last_stable_offset(part.high_watermark)
    try:
        if version == 0:
            offsets = log_.legacy_offsets_before(ts, p["max_num_offsets"])
            # never advertise offsets past what consumers may read
            out["old_style_offsets"] = [min(o, part.high_watermark) for o in offsets]
        elif ts == LATEST:
            # a follower asks for the leader's log end offset; consumers get the high watermark
            if replica_id < 0 and version >= 2 and part.high_watermark < part.leader_epoch_start_offset:
                out["error_code"] = ErrorCode.OFFSET_NOT_AVAILABLE if version >= 5 else ErrorCode.LEADER_NOT_AVAILABLE
                return out
            out["offset"] = log_.log_end_offset if replica_id >= 0 else visible
        elif ts == EARLIEST:
            out["offset"] = log_.log_start_offset
        else:
            found = log_.offset_for_timestamp(ts)
            if found is not None and found[0] < visible:
                out["offset"], out["timestamp"] = found
    except KafkaError as e:
        out["error_code"] = e.code
    return out
