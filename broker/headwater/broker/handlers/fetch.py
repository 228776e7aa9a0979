"""Fetch (key 1), v4-11.

- Returns record batches exactly as stored, as :class:`FileRegion` s sent with ``sendfile``
  (zero copy), starting at the batch holding ``fetch_offset`` and never past the high
  watermark. At most ``partition_max_bytes`` per partition and ``max_bytes`` per response,
  except that the first partition with data returns at least one whole batch (KIP-74). The
  last batch of a partition may be cut short; clients skip a partial trailing batch.
- ``min_bytes`` / ``max_wait_ms``: when fewer bytes than min_bytes are available the request
  waits in the purgatory until appends bring enough or max_wait_ms passes, then answers with
  what there is (possibly nothing). No polling while it waits.
- Fetch sessions (v7+, KIP-227, ``headwater.broker.fetch_session``): session_epoch -1 is
  sessionless (every partition asked and answered, as librdkafka, kafka-python and aiokafka
  fetch); epoch 0 opens a session for any client (replica followers and Java-style consumers),
  answered with its session_id; later epochs list only changed partitions and get only the
  partitions with records, an error or a new high watermark / log start offset. Partitions of a
  session the client does not list are read from the fetch state the session keeps; a caught-up
  one with nothing new is skipped without touching the follower's state (the session's read
  time stands for it in the ISR check). An incremental read looks only at the session's dirty
  partitions (notified since a read last found them idle, or listed again), and a waiting session
  Fetch waits on the session (one registration), not on each partition: an idle follower's round
  costs the same at 10 or 10,000 partitions (the invariant and the events in fetch_session.py).
- Per partition errors: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_FOR_PARTITION,
  OFFSET_OUT_OF_RANGE, FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH (v9+, current_leader_epoch).
- Transactions: last_stable_offset is the partition's LSO (storage/log.py). A read_committed
  consumer (isolation_level 1) reads only below it and gets the ``aborted_transactions`` (producer
  id, first offset) whose markers lie at or above its fetch offset and which start below the LSO;
  read_uncommitted reads up to the high watermark with no aborted transactions. A marker appended
  wakes waiting fetches like any append, so a session notices the LSO move with the records.
- A follower (replica_id >= 0) reads up to the log end offset instead of the high watermark;
  its fetch offset tells the leader how far it has replicated, which moves the high
  watermark and the ISR (see the replica manager). Consumers (replica_id -1) never see past
  the high watermark.
- With an authorizer, as Kafka 2.3's KafkaApis: a follower (replica_id >= 0) needs ClusterAction
  on the Cluster, else every partition it names answers TOPIC_AUTHORIZATION_FAILED; a consumer
  needs Read on each Topic, checked on every request for every partition of the fetch -- for an
  incremental session every partition the session holds, listed or not -- so a revoked ACL stops
  the next fetch; a refused partition answers TOPIC_AUTHORIZATION_FAILED (never read) and stays
  in the session. A session answers only the principal that opened it (fetch_session.py).
- Replication throttles (KIP-73, replication_quota.py): a follower not in the ISR gets no records
  for a partition its leader throttles while ``leader.replication.throttled.rate`` is exceeded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from headwater.acls import CLUSTER_NAME
from headwater.broker.fetch_session import TP, CachedPartition, FetchSession
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.primitives import FileRegion
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.authorizer import Authorizer
    from headwater.broker.partition import Partition
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices

log = logging.getLogger(__name__)

#: Kafka's ``Request.DebuggingConsumerId``: may read a follower's replica, up to its log end offset.
DEBUGGING_CONSUMER_ID = -2


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    sessions = broker.replicas.fetch_sessions
    session_id, epoch = request["session_id"], request["session_epoch"]
    replica_id = request["replica_id"]
    az = broker.authorizer
    if az is not None and replica_id >= 0 and not az.allowed(ctx, "ClusterAction", "Cluster", CLUSTER_NAME):
        log.warning("%s may not fetch as follower %d (ClusterAction on the Cluster)", ctx.principal, replica_id)
        return _refused(request)
    #: a consumer's Read on each topic, asked once per topic and request (None: nothing to check)
    readable: dict[str, bool] | None = {} if az is not None and replica_id < 0 else None
    session: FetchSession | None = None
    if session_id != 0 and epoch <= 0:
        sessions.remove(session_id, ctx.principal)  # -1 closes it; 0 replaces it with a new one
    if epoch > 0:
        try:
            session = sessions.get(session_id, epoch, replica_id, ctx.principal)
        except KafkaError as err:
            return {"throttle_time_ms": 0, "error_code": err.code, "session_id": 0, "responses": []}
        session.next_epoch()
        for t in request["topics"]:
            for p in t["partitions"]:
                session.upsert(t["topic"], p)
        session.forget((t["topic"], i) for t in request["forgotten_topics_data"] for i in t["partitions"])
        session.rounds += 1  # its reads start one further along each time, so no partition starves
        entries: list[CachedPartition] = []  # each read takes the session's dirty entries
        incremental = True
        # every partition of the session, listed in this request or not, is authorized again
        # (decisions kept by the session until the ACLs or the client's host change)
        if az is not None and readable is not None:
            key = (az.generation, az.host_of(ctx))
            if session.readable_key != key:
                session.readable, session.readable_key = {}, key
            readable = session.readable
        denied = _denied(az, ctx, readable, session)
    else:
        if epoch == 0:
            size = sum(len(t["partitions"]) for t in request["topics"])
            now_ms = broker.replicas.now_ms()
            session = sessions.create(replica_id, size, now_ms, ctx.principal)
            if session is not None and replica_id >= 0:
                log.info("fetch session %d opened for follower %d (%d partitions)", session.id, replica_id, size)
            elif session is None and replica_id >= 0 and sessions.max_slots > 0 and sessions.warn_due(now_ms):
                log.warning(
                    "no fetch session for follower %d (%d partitions): max.incremental.fetch.session.cache.slots=%d "
                    "are taken; it fetches sessionless (logged once a minute)",
                    replica_id,
                    size,
                    sessions.max_slots,
                )
        transient = session or FetchSession(0, replica_id, closed=True)
        for t in request["topics"]:
            for p in t["partitions"]:
                transient.upsert(t["topic"], p)
        denied = _denied(az, ctx, readable, transient)
        entries = [e for e in transient.partitions.values() if e.key not in denied]
        incremental = False
    read_committed = request.get("isolation_level", 0) == 1
    deadline = time.monotonic() + max(0, request["max_wait_ms"]) / 1000.0
    min_bytes = request["min_bytes"]
    keys = [e.key for e in entries]
    while True:
        if session is not None:
            session.mark_read(broker.replicas.now_ms())
            if incremental:
                entries = session.candidates()
                if denied:
                    entries = [e for e in entries if e.key not in denied]
        responses, total, errors, sent = _read(
            broker, replica_id, request["max_bytes"], entries, session, incremental, read_committed
        )
        remaining = deadline - time.monotonic()
        if total >= min_bytes or errors or remaining <= 0:
            break
        if session is not None:
            if session.closed or len(session.partitions) <= len(denied):
                break  # nothing it may read: answered now, as Kafka answers a fetch with nothing to read
            await session.wait(remaining)  # woken by a notification of any of its partitions
        else:
            if not keys:
                break
            await broker.purgatory.wait(keys, remaining)
        await asyncio.sleep(0)
    for entry, out in sent:
        entry.high_watermark = out["high_watermark"]
        entry.leader_log_start_offset = out["log_start_offset"]
    if replica_id >= 0:
        _record_throttled(broker, responses)
    if denied:
        _add_denied(responses, denied)
    sid = session.id if session is not None and not session.closed else 0
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": sid, "responses": responses}


def _denied(
    az: Authorizer | None,
    ctx: RequestContext,
    readable: dict[str, bool] | None,
    session: FetchSession,
) -> set[TP]:
    """The partitions of ``session`` the consumer may not Read (Kafka 2.3's per-request check of
    every partition of the fetch context): answered TOPIC_AUTHORIZATION_FAILED, never read. One
    decision per topic, remembered in ``readable``; nothing is walked per partition unless a
    topic is refused."""
    if az is None or readable is None:
        return set()
    refused: set[str] = set()
    for topic in session.topics:
        ok = readable.get(topic)
        if ok is None:
            ok = readable[topic] = az.allowed(ctx, "Read", "Topic", topic)
        if not ok:
            refused.add(topic)
    if not refused:
        return set()
    return {key for key in session.partitions if key[0] in refused}


def _denied_partition(index: int) -> Message:
    return {
        "partition_index": index,
        "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": None,
    }


def _add_denied(responses: list[Message], denied: set[TP]) -> None:
    by_topic = {t["topic"]: t for t in responses}
    for topic, index in sorted(denied):
        t = by_topic.get(topic)
        if t is None:
            t = by_topic[topic] = {"topic": topic, "partitions": []}
            responses.append(t)
        t["partitions"].append(_denied_partition(index))


def _refused(request: Message) -> Message:
    """A follower fetch without ClusterAction: every partition TOPIC_AUTHORIZATION_FAILED, as Kafka 2.3."""
    responses = [
        {"topic": t["topic"], "partitions": [_denied_partition(p["partition"]) for p in t["partitions"]]}
        for t in request["topics"]
    ]
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


def _idle(broker: HandlerServices, e: CachedPartition, replica_id: int) -> bool:
    """Nothing to answer for this session partition, and nothing its fetch would change: the
    partition is led here at the epoch the client knows, its high watermark and log start offset
    are as last answered, and there is nothing to read (a follower: caught up on the log end, in
    the ISR, and its state here - log end and log start offset - came from this very session entry:
    a moved log start must reach the leader, DeleteRecords waits for it)."""
    part = broker.replicas.partitions.get(e.key)
    if part is None or not part.is_leader:
        return False
    log_ = part.log
    assert log_ is not None
    if (
        (e.current_leader_epoch >= 0 and e.current_leader_epoch != part.leader_epoch)
        or part.high_watermark != e.high_watermark
        or log_.log_start_offset != e.leader_log_start_offset
    ):
        return False
    if replica_id < 0:
        return e.fetch_offset >= part.high_watermark
    st = part.followers.get(replica_id)
    return (
        st is not None
        and st.session_entry is e
        and st.log_end_offset == e.fetch_offset
        and (e.log_start_offset < 0 or st.log_start_offset == e.log_start_offset)
        and e.fetch_offset >= log_.log_end_offset
        and replica_id in part.isr
    )


def _read(
    broker: HandlerServices,
    replica_id: int,
    budget: int,
    entries: list[CachedPartition],
    session: FetchSession | None,
    incremental: bool,
    read_committed: bool = False,
) -> tuple[list[Message], int, bool, list[tuple[CachedPartition, Message]]]:
    """Read every entry (an incremental session read skips the idle ones, which leave the session's
    dirty set, and answers only the partitions that have something to say). Synchronous: a session
    read is one instant. Also returns each answered entry with its answer: what the session
    remembers as sent, once this read is the one answered."""
    total = 0
    errors = False
    by_topic: dict[str, list[Message]] = {}
    sent: list[tuple[CachedPartition, Message]] = []
    in_session = session is not None and not session.closed
    for e in entries:
        if incremental and _idle(broker, e, replica_id):
            assert session is not None
            session.clean(e)
            continue
        name, index = e.key
        out: Message = {
            "partition_index": index,
            "error_code": ErrorCode.NONE,
            "high_watermark": -1,
            "last_stable_offset": -1,
            "log_start_offset": -1,
            "aborted_transactions": [],
            "preferred_read_replica": -1,
            "records": b"",
        }
        _read_one(broker, replica_id, budget, e, out, total, in_session, read_committed and replica_id < 0)
        size = _size(out["records"])
        total += size
        if out["error_code"] != ErrorCode.NONE:
            errors = True
        elif (
            incremental
            and not size
            and out["high_watermark"] == e.high_watermark
            and out["log_start_offset"] == e.leader_log_start_offset
        ):
            continue  # nothing new for this partition: left out of an incremental answer
        sent.append((e, out))
        by_topic.setdefault(name, []).append(out)
    responses = [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]
    return responses, total, errors, sent


def _size(records: object) -> int:
    return records.size if isinstance(records, FileRegion) else len(records or b"")  # type: ignore[arg-type]


def _read_one(
    broker: HandlerServices,
    replica_id: int,
    budget: int,
    e: CachedPartition,
    out: Message,
    total: int,
    in_session: bool,
    read_committed: bool = False,
) -> None:
    name, index = e.key
    debugging = replica_id == DEBUGGING_CONSUMER_ID
    try:
        if debugging:
            part, log_ = broker.replicas.local_replica(name, index)
        else:
            part, log_ = broker.replicas.leader_partition(name, index, e.current_leader_epoch)
    except KafkaError as err:
        out["error_code"] = err.code
        return
    if replica_id >= 0:
        broker.replicas.record_follower_fetch(
            part, replica_id, e.fetch_offset, e.log_start_offset, e if in_session else None
        )
    hw = part.high_watermark
    out["high_watermark"] = hw
    lso = log_.last_stable_offset(hw)
    out["last_stable_offset"] = lso
    out["log_start_offset"] = log_.log_start_offset
    limit = min(e.max_bytes, budget - total)
    if limit <= 0 and total > 0:
        return
    if replica_id >= 0 and _leader_throttles(broker, part, replica_id):
        return  # KIP-73: no records for a throttled, out-of-sync follower over the rate
    try:
        data = log_.read(
            e.fetch_offset,
            max(limit, 0),
            max_offset=None if replica_id >= 0 or debugging else lso if read_committed else hw,
            min_one_batch=total == 0,
        )
    except KafkaError as err:
        out["error_code"] = err.code
        return
    if data.region is not None and data.region.size > 0:
        out["records"] = data.region
        if read_committed:
            out["aborted_transactions"] = [
                {"producer_id": a.producer_id, "first_offset": a.first_offset}
                for a in log_.collect_aborted(e.fetch_offset, lso)
            ]
        broker.metrics.topic_out_child(name).inc(data.region.size)
