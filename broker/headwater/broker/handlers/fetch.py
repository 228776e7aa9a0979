"""Fetch (key 1), v4-11.

- Returns record batches exactly as stored, as :class:`FileRegion` s sent with ``sendfile``
  (zero copy), starting at the batch holding ``fetch_offset`` and never past the high
  watermark. At most ``partition_max_bytes`` per partition and ``max_bytes`` per response,
  except that the first partition with data returns at least one whole batch (KIP-74). The
  last batch of a partition may be cut short; clients skip a partial trailing batch.
- ``min_bytes`` / ``max_wait_ms``: when fewer bytes than min_bytes are available the request
  waits in the purgatory until appends bring enough or max_wait_ms passes, then answers with
  what there is (possibly nothing). No polling while it waits.
- Fetch sessions (v7+, KIP-227) are not implemented yet: every answer is sessionless
  (session_id 0), which tells clients to keep sending full fetch requests; a request naming
  a session id gets FETCH_SESSION_ID_NOT_FOUND.
- Per partition errors: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_FOR_PARTITION,
  OFFSET_OUT_OF_RANGE, FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH (v9+, current_leader_epoch).
- No transactions: last_stable_offset is the high watermark, aborted_transactions empty.
- A follower (replica_id >= 0) reads up to the log end offset instead of the high watermark;
  its fetch offset tells the leader how far it has replicated, which moves the high
  watermark and the ISR (see the replica manager). Consumers (replica_id -1) never see past
  the high watermark.
- Replication throttles (KIP-73, replication_quota.py): a follower not in the ISR gets no records
  for a partition its leader throttles while ``leader.replication.throttled.rate`` is exceeded.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.primitives import FileRegion
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.handlers import RequestContext
    from headwater.broker.partition import Partition
    from headwater.broker.services import HandlerServices


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    if request["session_id"] != 0:
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
            "session_id": 0,
            "responses": [],
        }
    deadline = time.monotonic() + max(0, request["max_wait_ms"]) / 1000.0
    min_bytes = request["min_bytes"]
    keys = [(t["topic"], p["partition"]) for t in request["topics"] for p in t["partitions"]]
    while True:
        responses, total, errors = _read(broker, request)
        remaining = deadline - time.monotonic()
        if total >= min_bytes or errors or remaining <= 0 or not keys:
            break
        await broker.purgatory.wait(keys, remaining)
        await asyncio.sleep(0)
    if request["replica_id"] >= 0:
        _record_throttled(broker, responses)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": 0, "responses": responses}


def _leader_throttles(broker: HandlerServices, part: Partition, replica_id: int) -> bool:
    quota = broker.leader_quota
    return replica_id not in part.isr and quota.is_throttled(part.key) and quota.is_quota_exceeded()


def _record_throttled(broker: HandlerServices, responses: list[Message]) -> None:
    """The bytes sent to a follower for leader-throttled partitions count against the leader rate."""
    quota = broker.leader_quota
    for t in responses:
        for p in t["partitions"]:
            records = p["records"]
            size = records.size if isinstance(records, FileRegion) else len(records or b"")
            if size and quota.is_throttled((t["topic"], p["partition_index"])):
                quota.record(size)


def _read(broker: HandlerServices, request: Message) -> tuple[list[Message], int, bool]:
    replica_id = request["replica_id"]
    budget = request["max_bytes"]
    total = 0
    errors = False
    responses: list[Message] = []
    for t in request["topics"]:
        name = t["topic"]
        parts: list[Message] = []
        for p in t["partitions"]:
            out: Message = {
                "partition_index": p["partition"],
                "error_code": ErrorCode.NONE,
                "high_watermark": -1,
                "last_stable_offset": -1,
                "log_start_offset": -1,
                "aborted_transactions": [],
                "preferred_read_replica": -1,
                "records": b"",
            }
            parts.append(out)
            try:
                part, log_ = broker.replicas.leader_partition(name, p["partition"], p["current_leader_epoch"])
            except KafkaError as e:
                out["error_code"] = e.code
                errors = True
                continue
            if replica_id >= 0:
                broker.replicas.record_follower_fetch(part, replica_id, p["fetch_offset"], p["log_start_offset"])
            hw = part.high_watermark
            out["high_watermark"] = hw
            out["last_stable_offset"] = hw
            out["log_start_offset"] = log_.log_start_offset
            limit = min(p["partition_max_bytes"], budget - total)
            if limit <= 0 and total > 0:
                continue
            if replica_id >= 0 and _leader_throttles(broker, part, replica_id):
                continue  # KIP-73: no records for a throttled, out-of-sync follower over the rate
            try:
                data = log_.read(
                    p["fetch_offset"],
                    max(limit, 0),
                    max_offset=None if replica_id >= 0 else hw,
                    min_one_batch=total == 0,
                )
            except KafkaError as e:
                out["error_code"] = e.code
                errors = True
                continue
            if data.region is not None and data.region.size > 0:
                out["records"] = data.region
                total += data.region.size
                broker.metrics.topic_out_child(name).inc(data.region.size)
        responses.append({"topic": name, "partitions": parts})
    return responses, total, errors
