"""DescribeLogDirs (key 35), v0-1 (KIP-113), what ``kafka-log-dirs --describe`` asks each broker.

- One result per log dir of this broker (``log.dirs``, absolute paths), each listing the replicas
  it holds: ``partition_size`` the bytes of their segments, ``offset_lag`` how far the replica's
  log end offset is behind its high watermark (``max(hw - leo, 0)``, as Kafka 2.3 computes it;
  -1 while this broker has no replica state for it), ``is_future_key`` always false (no
  AlterReplicaLogDirs: a replica never moves between log dirs).
- ``topics`` null: every replica; else only the partitions named (unknown ones are left out).
- A failed log dir (KIP-112: an I/O error took it offline, see storage/log_manager.py) answers
  KAFKA_STORAGE_ERROR and lists no replicas, as Kafka 2.3; so does a dir holding a log that an I/O
  error took offline before the log manager has failed the whole dir (its next tick).
- With an authorizer: Describe on Cluster, else an empty answer (no log dirs), as Kafka 2.3.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.acls import CLUSTER_NAME
from headwater.protocol.errors import ErrorCode
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    manager = broker.replicas.log_manager
    if manager is None or (
        broker.authorizer is not None and not broker.authorizer.allowed(ctx, "Describe", "Cluster", CLUSTER_NAME)
    ):
        return {"throttle_time_ms": 0, "results": []}
    wanted: set[tuple[str, int]] | None = None
    if request["topics"] is not None:
        wanted = {(t["topic"], p) for t in request["topics"] for p in t["partitions"]}
    by_dir: dict[str, dict[str, list[Message]]] = {d: {} for d in manager.log_dirs}
    offline: set[str] = set(manager.offline_dirs)
    for (topic, partition), log_ in sorted(manager.all_logs()):
        if wanted is not None and (topic, partition) not in wanted:
            continue
        d = manager.log_dir_of(topic, partition)
        if d is None or d not in by_dir:
            continue
        if log_.is_offline:
            offline.add(d)
        part = broker.replicas.partition(topic, partition)
        lag = -1 if part is None else max(part.high_watermark - log_.log_end_offset, 0)
        by_dir[d].setdefault(topic, []).append(
            {"partition_index": partition, "partition_size": log_.size_bytes, "offset_lag": lag, "is_future_key": False}
        )
    results = [
        {
            "error_code": ErrorCode.KAFKA_STORAGE_ERROR if d in offline else ErrorCode.NONE,
            "log_dir": d,
            "topics": [] if d in manager.offline_dirs else [{"name": t, "partitions": ps} for t, ps in topics.items()],
        }
        for d, topics in by_dir.items()
    ]
    return {"throttle_time_ms": 0, "results": results}
