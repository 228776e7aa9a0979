"""DeleteRecords (key 21), v0-1.

- For each partition this broker leads: the log start offset moves to ``offset`` (-1: the high
  watermark); records below it are no longer readable, whole segments below it are deleted, and
  the new log start offset is checkpointed (``log-start-offset-checkpoint``) before the answer.
- Followers learn it from the log_start_offset of the leader's Fetch responses and move theirs;
  they report theirs in their next Fetch. The answer waits (up to timeout_ms) until every in-sync
  replica has moved: ``low_watermark`` is the lowest log start offset among them; at the deadline
  the partition gets REQUEST_TIMED_OUT with the low watermark reached so far, as in Kafka.
- Errors per partition: NOT_LEADER_FOR_PARTITION (led elsewhere), UNKNOWN_TOPIC_OR_PARTITION,
  OFFSET_OUT_OF_RANGE (above the high watermark or negative other than -1), INVALID_TOPIC_EXCEPTION
  for an internal topic (``__consumer_offsets``, ``__transaction_state``: Kafka 2.3's
  ReplicaManager refuses them whoever asks); low_watermark -1.
- With an authorizer (authorizer.TABLE, before this handler): Delete on each Topic, else
  TOPIC_AUTHORIZATION_FAILED for its partitions before their existence is looked at.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from headwater.broker.partition import Partition
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices

log = logging.getLogger(__name__)


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    pending: list[tuple[Message, Partition, int]] = []
    topics: list[Message] = []
    for t in request["topics"]:
        results: list[Message] = []
        topics.append({"name": t["name"], "partitions": results})
        for p in t["partitions"]:
            out: Message = {"partition_index": p["partition_index"], "low_watermark": -1, "error_code": 0}
            results.append(out)
            try:
                part = broker.replicas.delete_records(t["name"], p["partition_index"], p["offset"])
            except KafkaError as e:
                log.warning("DeleteRecords %s-%d from %s refused: %s", t["name"], p["partition_index"], ctx.peer, e)
                out["error_code"] = e.code
                continue
            assert part.log is not None
            log.info(
                "DeleteRecords %s-%d: log start offset %d (client %r)",
                t["name"],
                p["partition_index"],
                part.log.log_start_offset,
                ctx.client_id,
            )
            pending.append((out, part, part.log.log_start_offset))
    deadline = time.monotonic() + request["timeout_ms"] / 1000.0
    while True:
        waiting = [(out, part, target) for out, part, target in pending if not _reached(part, target)]
        if not waiting or time.monotonic() >= deadline:
            break
        # woken by followers' fetches that move the low watermark; re-checked at least every 0.5 s
        await broker.purgatory.wait([part.key for _, part, _ in waiting], min(0.5, deadline - time.monotonic()))
    for out, part, target in pending:
        if part.log is None or not part.is_leader:
            out["error_code"] = ErrorCode.NOT_LEADER_FOR_PARTITION
        else:
            out["low_watermark"] = part.low_watermark()
            if out["low_watermark"] < target:
                out["error_code"] = ErrorCode.REQUEST_TIMED_OUT
    return {"throttle_time_ms": 0, "topics": topics}


def _reached(part: Partition, target: int) -> bool:
    return part.log is None or not part.is_leader or part.low_watermark() >= target
