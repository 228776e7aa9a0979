"""OffsetFetch (key 9), v0-5.

- v1+: the group coordinator's committed offsets; a partition without one answers offset -1,
  metadata "" and NONE -- also for a topic that does not exist (Kafka 2.3 does not check). v2+ may ask for every partition the group committed (topics null).
  Coordinator errors (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS) go in the top-level
  error_code from v2 and on every partition before.
- v0: the offsets in ZooKeeper (see OffsetCommit v0); a partition unknown to the metadata or
  without an offset there answers offset -1 and UNKNOWN_TOPIC_OR_PARTITION, as Kafka 2.3 does.
- With an authorizer (authorizer.TABLE, before this handler): Describe on the Group, else
  GROUP_AUTHORIZATION_FAILED; every partition of the group (topics null) lists only the topics the
  principal may Describe; a listed partition of a topic it may not Describe answers
  TOPIC_AUTHORIZATION_FAILED with offset -1 and no metadata (KafkaApis.handleOffsetFetchRequest).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kazoo.exceptions import KazooException, NoNodeError

from headwater.broker.group.group import CommittedOffset
from headwater.broker.handlers.offset_commit import zk_offset_path
from headwater.protocol.errors import ErrorCode
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    group = request["group_id"]
    wanted = None
    if request["topics"] is not None:
        wanted = [(t["name"], p) for t in request["topics"] for p in t["partition_indexes"]]
    partition_errors: dict[tuple[str, int], ErrorCode] = {}
    if ctx.version == 0:
        code, found = await _from_zookeeper(broker, group, wanted or [])
        # Kafka 2.3 answers v0 UNKNOWN_TOPIC_OR_PARTITION for a partition it does not have
        # and for one without an offset in ZooKeeper (OffsetFetchResponse.UNKNOWN_PARTITION)
        partition_errors = {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for tp, o in found.items() if o is None}
    else:
        code, found = broker.groups.fetch_offsets(group, wanted)
    if code != ErrorCode.NONE and wanted is not None and ctx.version < 2:
        found = dict.fromkeys(wanted)  # the error goes on every partition
    by_topic: dict[str, list[Message]] = {}
    for (topic, partition), o in found.items():
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": partition,
                "committed_offset": -1 if o is None else o.offset,
                "committed_leader_epoch": -1 if o is None else o.leader_epoch,
                "metadata": "" if o is None else o.metadata,
                "error_code": code
                if ctx.version < 2 and code != ErrorCode.NONE
                else partition_errors.get((topic, partition), ErrorCode.NONE),
            }
        )
    topics = [{"name": t, "partitions": parts} for t, parts in by_topic.items()]
    return {"throttle_time_ms": 0, "topics": topics, "error_code": code}


async def _from_zookeeper(
    broker: HandlerServices, group: str, wanted: list[tuple[str, int]]
) -> tuple[ErrorCode, dict[tuple[str, int], CommittedOffset | None]]:
    if not group:
        return ErrorCode.INVALID_GROUP_ID, {}
    out: dict[tuple[str, int], CommittedOffset | None] = {}
    for tp in wanted:
        if broker.cache.partition(*tp) is None:
            out[tp] = None
            continue
        try:
            data, _ = await broker.zk.call(broker.zk.client.get, zk_offset_path(group, *tp))
            out[tp] = CommittedOffset(int(data.decode()), -1, "", -1)
        except NoNodeError:
            out[tp] = None
        except (KazooException, ValueError):
            return ErrorCode.UNKNOWN_SERVER_ERROR, {}
    return ErrorCode.NONE, out
