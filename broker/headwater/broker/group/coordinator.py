"""The group coordinator: consumer groups of stock clients (JoinGroup, SyncGroup, Heartbeat, ...).

Which broker coordinates a group: the leader of partition ``partition_for(group_id)`` of
``__consumer_offsets`` (see formats.py). When this broker becomes that leader (LeaderAndIsr) it
loads the partition -- every group's last metadata record and every committed offset -- and
answers COORDINATOR_LOAD_IN_PROGRESS until done; when it stops leading, it drops the groups and
answers NOT_COORDINATOR, and clients look the coordinator up again. So a group moves with its
partition's leadership and keeps every offset whose commit was acknowledged.

Writes (a group's metadata once its leader's assignment is in, offset commits, tombstones) are
appends to that partition as leader with acks=all: a commit is answered only when the whole ISR
has it (``offsets.commit.timeout.ms``). Errors map to what clients retry, as Kafka maps them:
COORDINATOR_NOT_AVAILABLE (too few replicas, timeout), NOT_COORDINATOR (leadership moved).

Timers (one task, 10 ticks a second while there are groups): members expire after
``session.timeout.ms`` without a heartbeat; a rebalance completes when every member rejoined or
at the largest rebalance timeout (members that did not rejoin are removed); a group that was
Empty waits ``group.initial.rebalance.delay.ms`` (restarted by each new member, bounded by the
rebalance timeout) so that consumers starting together share one rebalance; offsets of groups
Empty for ``offsets.retention.minutes`` expire (checked every ``offsets.retention.check.interval.ms``).

Transactional offset commits (TxnOffsetCommit, KIP-98): appended as a transactional batch of the
producer (its id and epoch) and kept aside per producer until the transaction's marker reaches
the partition (WriteTxnMarkers calls :meth:`GroupCoordinator.complete_txn`): COMMIT makes them the
group's committed offsets, ABORT drops them. Loading replays the same: offsets of a transactional
batch wait for the producer's marker later in the partition (one that never came stays pending).

Static membership (KIP-345, JoinGroup v5): a member joining with a known ``group.instance.id``
and no member id takes over the member that held it under a new member id; the old id is fenced
(FENCED_INSTANCE_ID). In a Stable group with the same subscription that is all: it gets its
previous assignment back and the others are not rebalanced. Static members are removed by their
session timeout (Kafka 2.3's LeaveGroup has no instance id; stock clients do not send it for them).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from typing import TYPE_CHECKING, Protocol

from headwater.broker.group import formats
from headwater.broker.group.formats import OFFSETS_TOPIC, GroupKey, OffsetKey
from headwater.broker.group.group import CommittedOffset, Group, GroupState, Member
from headwater.broker.replication_wait import ReplicationWait, wait_for_replication
from headwater.protocol.errors import DecodeError, ErrorCode, KafkaError
from headwater.protocol.primitives import Reader
from headwater.protocol.records.control import decode_marker
from headwater.protocol.records.record import RecordInput, encode_batch, iter_batches
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.config import BrokerConfig
    from headwater.broker.metadata_cache import MetadataCache
    from headwater.broker.metrics import BrokerMetrics
    from headwater.broker.purgatory import Purgatory
    from headwater.broker.replica_manager import ReplicaManager

log = logging.getLogger(__name__)


class GroupHost(Protocol):
    """What the group coordinator reaches: the config, the metadata cache (the offsets topic's
    partitions and config), the replica manager (appends as leader), the purgatory (acks=all) and
    the metrics."""

    config: BrokerConfig
    cache: MetadataCache
    replicas: ReplicaManager
    purgatory: Purgatory
    metrics: BrokerMetrics


TICK_S = 0.1
LOAD_READ_BYTES = 1 << 20
_TO_CLIENT = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_FOR_PARTITION: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}

TopicPartition = tuple[str, int]


def _error(code: ErrorCode, member_id: str = "") -> Message:
    return {"error_code": code, "generation_id": -1, "protocol_name": "", "leader": "", "member_id": member_id}


def _now_ms() -> int:
    return int(time.time() * 1000)


class GroupCoordinator:
    def __init__(self, host: GroupHost) -> None:
        self.host = host
        self.config = host.config
        self.groups: dict[str, Group] = {}
        self.owned: set[int] = set()  # partitions of __consumer_offsets loaded and led here
        self.loading: dict[int, asyncio.Task[None]] = {}
        self._ticker: asyncio.Task[None] | None = None
        self._writes: set[asyncio.Task[ErrorCode]] = set()
        self._next_expiry_check = 0.0
        #: transactional offset commits awaiting their marker: partition -> producer id -> group -> offsets
        self.pending_txn: dict[int, dict[int, dict[str, dict[TopicPartition, CommittedOffset]]]] = {}
        # read when /metrics is scraped (the HTTP server's thread): list() copies the values at once
        host.metrics.num_groups.set_function(lambda: len(self.groups))
        host.metrics.num_offsets.set_function(lambda: sum(len(g.offsets) for g in list(self.groups.values())))

    # -- ownership ----------------------------------------------------------------------------

    def num_partitions(self) -> int:
        """The offsets topic's partition count: ZooKeeper's once it exists, else the config's."""
        info = self.host.cache.topics.get(OFFSETS_TOPIC)
        if info is not None and info.partitions:
            return len(info.partitions)
        return self.config.offsets_topic_num_partitions

    def partition_for(self, group_id: str) -> int:
        return formats.partition_for(group_id, self.num_partitions())

    def start(self) -> None:
        self._ticker = asyncio.ensure_future(self._tick_loop())

    async def stop(self) -> None:
        tasks = [t for t in (self._ticker, *self.loading.values()) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, *self._writes, return_exceptions=True)
        for p in list(self.owned):
            self.on_resigned(p)

    def on_elected(self, partition: int) -> None:
        """This broker leads ``partition`` of __consumer_offsets: load its groups (once)."""
        if partition in self.owned or partition in self.loading:
            return
        self.loading[partition] = asyncio.ensure_future(self._load(partition))

    def on_resigned(self, partition: int) -> None:
        """This broker no longer leads ``partition``: its groups move to the new leader."""
        task = self.loading.pop(partition, None)
        if task is not None:
            task.cancel()
        if partition not in self.owned:
            return
        self.owned.discard(partition)
        self.pending_txn.pop(partition, None)
        gone = [g for g in self.groups.values() if g.partition == partition]
        for g in gone:
            self._unload(g, ErrorCode.NOT_COORDINATOR)
        log.info("unloaded %d group(s) of %s-%d: no longer its leader", len(gone), OFFSETS_TOPIC, partition)

    def _unload(self, g: Group, code: ErrorCode) -> None:
        g.state = GroupState.DEAD
        for m in g.members.values():
            m.answer_join(_error(code, m.member_id))
            m.answer_sync({"error_code": code, "assignment": b""})
        self.groups.pop(g.group_id, None)

    def check(self, group_id: str) -> ErrorCode:
        """NONE when this broker coordinates ``group_id`` now."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        p = self.partition_for(group_id)
        if p in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if p not in self.owned:
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.NONE

    async def _load(self, partition: int) -> None:
        started = time.monotonic()
        try:
            _, log_ = self.host.replicas.leader_partition(OFFSETS_TOPIC, partition)
        except KafkaError as e:
            log.warning("cannot load %s-%d: %s", OFFSETS_TOPIC, partition, e)
            self.loading.pop(partition, None)
            return
        metas: dict[str, Message | None] = {}
        offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        pending: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]] = {}
        pos, end, read = log_.log_start_offset, log_.log_end_offset, 0
        while pos < end:
            data = log_.read(pos, LOAD_READ_BYTES, max_offset=end)
            if data.region is None:
                break
            r = data.region
            buf = os.pread(r.file.fileno(), r.size, r.position)
            read += len(buf)
            nxt = pos
            at = 0  # iter_batches walks the buffer's batches back to back
            for header, records in iter_batches(buf):
                if header.is_control:
                    self._replay_marker(buf, at, offsets, pending)
                elif header.is_transactional and header.producer_id >= 0:
                    txn = pending.setdefault(header.producer_id, {})
                    for rec in records:
                        self._replay(rec.key, rec.value, metas, txn)
                else:
                    for rec in records:
                        self._replay(rec.key, rec.value, metas, offsets)
                at += header.size
                nxt = header.base_offset + header.last_offset_delta + 1
            if nxt <= pos:
                log.error("%s-%d: no complete batch at offset %d; loaded up to there", OFFSETS_TOPIC, partition, pos)
                break
            pos = nxt
            await asyncio.sleep(0)  # other requests run between chunks
        now = time.monotonic()
        count = 0
        for gid in metas.keys() | offsets.keys():
            meta = metas.get(gid)
            g = Group.from_record(gid, partition, meta, now) if meta else Group(gid, partition)
            g.offsets = offsets.get(gid, {})
            if g.members or g.offsets or meta:
                self.groups[gid] = g
                count += 1
        self.pending_txn[partition] = {pid: groups for pid, groups in pending.items() if groups}
        self.loading.pop(partition, None)
        self.owned.add(partition)
        log.info(
            "loaded %d group(s) from %s-%d (%d bytes up to offset %d) in %.0f ms",
            count,
            OFFSETS_TOPIC,
            partition,
            read,
            end,
            (time.monotonic() - started) * 1000,
        )

    @staticmethod
    def _replay(
        key: bytes | None,
        value: bytes | None,
        metas: dict[str, Message | None],
        offsets: dict[str, dict[TopicPartition, CommittedOffset]],
    ) -> None:
        if key is None:
            return
        try:
            k = formats.decode_key(key)
            if isinstance(k, OffsetKey):
                group_offsets = offsets.setdefault(k.group, {})
                if value is None:
                    group_offsets.pop((k.topic, k.partition), None)
                else:
                    v = formats.decode_offset_value(value)
                    group_offsets[(k.topic, k.partition)] = CommittedOffset(
                        v["offset"], v["leader_epoch"], v["metadata"], v["commit_timestamp"]
                    )
            elif isinstance(k, GroupKey):
                metas[k.group] = None if value is None else formats.decode_group_value(value)
        except DecodeError as e:
            log.warning("skipping an unreadable %s record: %s", OFFSETS_TOPIC, e)

    @staticmethod
    def _replay_marker(
        buf: bytes,
        at: int,
        offsets: dict[str, dict[TopicPartition, CommittedOffset]],
        pending: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]],
    ) -> None:
        try:
            marker = decode_marker(buf, at)
        except KafkaError as e:
            log.warning("skipping an unreadable %s control batch: %s", OFFSETS_TOPIC, e)
            return
        groups = pending.pop(marker.producer_id, {})
        if marker.commit:
            for gid, committed in groups.items():
                offsets.setdefault(gid, {}).update(committed)

    # -- writes ---------------------------------------------------------------------------------

    async def _append(
        self, partition: int, records: list[tuple[bytes, bytes | None]], producer_id: int = -1, producer_epoch: int = -1
    ) -> ErrorCode:
        """Append to the group's partition as leader and wait for the ISR; the client-facing error.
        With a producer id: a transactional batch of that producer (TxnOffsetCommit)."""
        try:
            part, _ = self.host.replicas.leader_partition(OFFSETS_TOPIC, partition)
            now_ms = _now_ms()
            batch = encode_batch(
                [RecordInput(k, v, now_ms) for k, v in records],
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                transactional=producer_id >= 0,
            )
            min_isr = int(
                self.host.cache.config_of(OFFSETS_TOPIC).get("min.insync.replicas", self.config.min_insync_replicas)
            )
            appended = part.append_as_leader(memoryview(batch), -1, min_isr, coordinator=producer_id >= 0)
        except KafkaError as e:
            log.warning("write to %s-%d failed: %s", OFFSETS_TOPIC, partition, e)
            return _TO_CLIENT.get(e.code, ErrorCode.UNKNOWN_SERVER_ERROR)
        self.host.purgatory.notify(part.key)
        wait = ReplicationWait(part, part.leadership, appended.last_offset + 1, min_isr)
        await wait_for_replication(self.host.purgatory, [wait], self.config.offsets_commit_timeout_ms)
        if wait.error != ErrorCode.NONE:
            log.warning("write to %s-%d not replicated: %s", OFFSETS_TOPIC, partition, wait.error.name)
        return _TO_CLIENT.get(wait.error, wait.error)

    @staticmethod
    def _group_record(g: Group) -> tuple[bytes, bytes | None]:
        """The group's metadata record as it is now."""
        return formats.group_key(g.group_id), formats.group_value(g.to_record(_now_ms()))

    async def _store_group(self, g: Group) -> ErrorCode:
        return await self._append(g.partition, [self._group_record(g)])

    def _spawn_write(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        task = asyncio.ensure_future(self._append(partition, records))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    # -- JoinGroup ------------------------------------------------------------------------------

    async def join(self, req: Message, version: int, client_id: str, client_host: str) -> Message:
        group_id, member_id, instance = req["group_id"], req["member_id"], req["group_instance_id"]
        code = self.check(group_id)
        if code != ErrorCode.NONE:
            return _error(code, member_id)
        session = req["session_timeout_ms"]
        rebalance = req["rebalance_timeout_ms"] if req["rebalance_timeout_ms"] >= 0 else session
        if not self.config.group_min_session_timeout_ms <= session <= self.config.group_max_session_timeout_ms:
            return _error(ErrorCode.INVALID_SESSION_TIMEOUT, member_id)
        protocols = [(p["name"], bytes(p["metadata"])) for p in req["protocols"]]
        g = self.groups.get(group_id)
        if g is None:
            if member_id:
                return _error(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
            g = self.groups[group_id] = Group(group_id, self.partition_for(group_id), state_timestamp_ms=_now_ms())
        if g.state == GroupState.DEAD:
            return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id)
        if not g.supports(req["protocol_type"], protocols):
            return _error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        now = time.monotonic()

        def new_member(mid: str) -> Member:
            return Member(mid, instance, client_id, client_host, rebalance, session, protocols, last_heartbeat=now)

        if not member_id:
            if instance is None and len(g.members) + len(g.pending) >= self.config.group_max_size:
                return _error(ErrorCode.GROUP_MAX_SIZE_REACHED)
            new_id = f"{client_id}-{uuid.uuid4()}"
            if instance is not None and instance in g.static:
                return await self._rejoin_static(g, instance, new_member(new_id))
            if instance is None and version >= 4:
                # KIP-394: the member learns its id first, so a retried join cannot leave a ghost.
                g.pending[new_id] = now + session / 1000.0
                return _error(ErrorCode.MEMBER_ID_REQUIRED, new_id)
            return await self._add_and_wait(g, new_member(new_id), req["protocol_type"])
        if instance is not None and g.static.get(instance, member_id) != member_id:
            return _error(ErrorCode.FENCED_INSTANCE_ID, member_id)
        if member_id in g.pending:
            return await self._add_and_wait(g, new_member(member_id), req["protocol_type"])
        m = g.members.get(member_id)
        if m is None:
            return _error(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
        same = m.protocols == protocols
        m.protocols, m.session_timeout_ms, m.rebalance_timeout_ms = protocols, session, rebalance
        m.last_heartbeat = now
        if g.state == GroupState.COMPLETING_REBALANCE and same:
            return g.join_response(m)  # its join answer was lost: the same generation again
        if g.state == GroupState.STABLE and same and member_id != g.leader_id:
            return g.join_response(m)  # nothing changed for a follower: no rebalance
        if g.state != GroupState.PREPARING_REBALANCE:
            why = "its leader rejoined" if member_id == g.leader_id else f"member {member_id} updated its metadata"
            self._prepare_rebalance(g, why)
        return await self._wait_join(g, m)

    async def _rejoin_static(self, g: Group, instance: str, joining: Member) -> Message:
        """KIP-345: a static member joined again without its member id (it restarted, or a second
        process took its ``group.instance.id``). It takes over the known member under a new id --
        the old id is fenced (FENCED_INSTANCE_ID) -- and, in a Stable group with unchanged
        subscription, gets its previous assignment back with no rebalance of the others (as Kafka
        2.3's coordinator does; the leader gets every member's metadata, and its SyncGroup in the
        Stable group answers the stored assignment). "Unchanged" for the consumer protocol means the
        same protocols subscribed to the same topics: a restarted 2.4+ Java consumer's metadata also
        carries its owned partitions and generation (KIP-429), which differ after any restart.
        Otherwise the group rebalances as for a join."""
        old, m = g.replace_static(instance, joining.member_id)
        fenced = _error(ErrorCode.FENCED_INSTANCE_ID, old.member_id)
        old.answer_join(fenced)
        old.answer_sync({"error_code": ErrorCode.FENCED_INSTANCE_ID, "assignment": b""})
        same = _same_subscription(g.protocol_type, m.protocols, joining.protocols)
        m.protocols, m.client_id, m.client_host = joining.protocols, joining.client_id, joining.client_host
        m.session_timeout_ms, m.rebalance_timeout_ms = joining.session_timeout_ms, joining.rebalance_timeout_ms
        m.last_heartbeat = joining.last_heartbeat
        log.info(
            "Static member %s of group %s rejoined: member id %s replaces %s (fenced)",
            instance,
            g.group_id,
            m.member_id,
            old.member_id,
        )
        if g.state == GroupState.STABLE and same:
            self._spawn_write(g.partition, [self._group_record(g)])  # the new member id survives a failover
            return g.join_response(m)
        if g.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(g, f"static member {instance} rejoined with a changed subscription")
        return await self._wait_join(g, m)

    async def _add_and_wait(self, g: Group, m: Member, protocol_type: str) -> Message:
        if not g.members:
            g.protocol_type = protocol_type
        g.add(m)
        if g.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(g, f"member {m.member_id} joined")
        elif g.join_not_before > 0:
            now = time.monotonic()
            delay = self.config.group_initial_rebalance_delay_ms / 1000.0
            g.join_not_before = min(now + delay, g.rebalance_deadline)
        return await self._wait_join(g, m)

    async def _wait_join(self, g: Group, m: Member) -> Message:
        if m.join_future is not None:
            m.answer_join(_error(ErrorCode.REBALANCE_IN_PROGRESS, m.member_id))  # superseded by this join
        fut: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        m.join_future = fut
        self._maybe_complete_join(g)
        return await fut

    def _prepare_rebalance(self, g: Group, reason: str) -> None:
        if g.state == GroupState.COMPLETING_REBALANCE:
            for m in g.members.values():
                m.assignment = b""
                m.answer_sync({"error_code": ErrorCode.REBALANCE_IN_PROGRESS, "assignment": b""})
        was_empty = g.state == GroupState.EMPTY
        g.state = GroupState.PREPARING_REBALANCE
        g.state_timestamp_ms = _now_ms()
        now = time.monotonic()
        g.rebalance_deadline = now + g.max_rebalance_timeout_ms() / 1000.0
        delay = self.config.group_initial_rebalance_delay_ms / 1000.0
        g.join_not_before = min(now + delay, g.rebalance_deadline) if was_empty and delay > 0 else 0.0
        log.info(
            "Preparing to rebalance group %s in state PreparingRebalance with old generation %d (%s)",
            g.group_id,
            g.generation,
            reason,
        )

    def _maybe_complete_join(self, g: Group) -> None:
        if g.state != GroupState.PREPARING_REBALANCE:
            return
        now = time.monotonic()
        if (g.all_joined() and now >= g.join_not_before) or now >= g.rebalance_deadline:
            self._complete_join(g)

    def _complete_join(self, g: Group) -> None:
        for mid, m in list(g.members.items()):
            if m.join_future is None:
                g.remove(mid)
                log.info("Member %s of group %s did not rejoin before the rebalance timeout: removed", mid, g.group_id)
        g.generation += 1
        now = time.monotonic()
        g.state_timestamp_ms = _now_ms()
        if not g.members:
            g.state, g.protocol, g.leader_id = GroupState.EMPTY, None, None
            log.info("Group %s with generation %d is now empty", g.group_id, g.generation)
            self._spawn_write(g.partition, [self._group_record(g)])
            return
        self.host.metrics.rebalances.inc()
        g.protocol = g.select_protocol()
        g.state = GroupState.COMPLETING_REBALANCE
        for m in g.members.values():
            m.last_heartbeat = now
            m.answer_join(g.join_response(m))
        log.info(
            "Stabilized group %s generation %d (%d member(s), protocol %s, leader %s)",
            g.group_id,
            g.generation,
            len(g.members),
            g.protocol,
            g.leader_id,
        )

    def _remove_member(self, g: Group, member_id: str, reason: str) -> None:
        m = g.remove(member_id)
        if m is None:
            return
        m.answer_join(_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
        m.answer_sync({"error_code": ErrorCode.UNKNOWN_MEMBER_ID, "assignment": b""})
        log.info("Member %s of group %s %s", member_id, g.group_id, reason)
        if g.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(g, f"member {member_id} {reason}")
        self._maybe_complete_join(g)

    # -- SyncGroup, Heartbeat, LeaveGroup -----------------------------------------------------

    def _member_of(self, req: Message) -> tuple[Group | None, Member | None, ErrorCode]:
        """The group and member a request names, or the error for it (generation not checked)."""
        code = self.check(req["group_id"])
        if code != ErrorCode.NONE:
            return None, None, code
        g = self.groups.get(req["group_id"])
        instance = req.get("group_instance_id")
        if g is not None and instance is not None and g.static.get(instance, req["member_id"]) != req["member_id"]:
            return g, None, ErrorCode.FENCED_INSTANCE_ID  # its group.instance.id belongs to a newer member
        m = g.members.get(req["member_id"]) if g is not None else None
        if g is None or m is None or g.state in (GroupState.EMPTY, GroupState.DEAD):
            return g, None, ErrorCode.UNKNOWN_MEMBER_ID
        return g, m, ErrorCode.NONE

    async def sync(self, req: Message) -> Message:
        g, m, code = self._member_of(req)
        if g is None or m is None or code != ErrorCode.NONE:
            return {"error_code": code, "assignment": b""}
        if req["generation_id"] != g.generation:
            return {"error_code": ErrorCode.ILLEGAL_GENERATION, "assignment": b""}
        if g.state == GroupState.PREPARING_REBALANCE:
            return {"error_code": ErrorCode.REBALANCE_IN_PROGRESS, "assignment": b""}
        m.last_heartbeat = time.monotonic()
        if g.state == GroupState.STABLE:
            return {"error_code": ErrorCode.NONE, "assignment": m.assignment}
        if m.sync_future is not None:
            m.answer_sync({"error_code": ErrorCode.REBALANCE_IN_PROGRESS, "assignment": b""})
        fut: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        m.sync_future = fut
        if m.member_id == g.leader_id:
            assignments = {a["member_id"]: bytes(a["assignment"]) for a in req["assignments"]}
            for member in g.members.values():
                member.assignment = assignments.get(member.member_id, b"")
            generation = g.generation
            code = await self._store_group(g)
            if g.generation == generation and g.state == GroupState.COMPLETING_REBALANCE:
                if code != ErrorCode.NONE:
                    for member in g.members.values():
                        member.answer_sync({"error_code": code, "assignment": b""})
                    self._prepare_rebalance(g, f"its assignment could not be stored: {code.name}")
                else:
                    g.state = GroupState.STABLE
                    g.state_timestamp_ms = _now_ms()
                    for member in g.members.values():
                        member.answer_sync({"error_code": ErrorCode.NONE, "assignment": member.assignment})
        return await fut

    def heartbeat(self, req: Message) -> ErrorCode:
        g, m, code = self._member_of(req)
        if g is None or m is None or code != ErrorCode.NONE:
            return code
        if req["generation_id"] != g.generation:
            return ErrorCode.ILLEGAL_GENERATION
        m.last_heartbeat = time.monotonic()
        if g.state == GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(self, req: Message) -> ErrorCode:
        code = self.check(req["group_id"])
        if code != ErrorCode.NONE:
            return code
        g = self.groups.get(req["group_id"])
        if g is not None and g.pending.pop(req["member_id"], None) is not None:
            return ErrorCode.NONE
        if g is None or req["member_id"] not in g.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._remove_member(g, req["member_id"], "left the group")
        return ErrorCode.NONE

    # -- offsets --------------------------------------------------------------------------------

    async def commit(self, req: Message) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit v1+: the error per partition."""
        wanted = [(t["name"], p) for t in req["topics"] for p in t["partitions"]]
        group_id, generation = req["group_id"], req["generation_id"]
        code = self.check(group_id)
        g = self.groups.get(group_id)
        if code == ErrorCode.NONE:
            if g is None:
                if generation < 0:  # a consumer committing without group management
                    g = self.groups[group_id] = Group(
                        group_id, self.partition_for(group_id), state_timestamp_ms=_now_ms()
                    )
                else:
                    code = ErrorCode.ILLEGAL_GENERATION
            elif g.state == GroupState.DEAD:
                code = ErrorCode.COORDINATOR_NOT_AVAILABLE
            elif not (generation < 0 and g.state == GroupState.EMPTY):
                _, m, code = self._member_of(req)
                if code == ErrorCode.NONE and generation != g.generation:
                    code = ErrorCode.ILLEGAL_GENERATION
                elif code == ErrorCode.NONE and g.state == GroupState.COMPLETING_REBALANCE:
                    code = ErrorCode.REBALANCE_IN_PROGRESS
                elif m is not None:
                    m.last_heartbeat = time.monotonic()
        if code != ErrorCode.NONE or g is None:
            return {(t, p["partition_index"]): code for t, p in wanted}
        out: dict[TopicPartition, ErrorCode] = {}
        records: list[tuple[bytes, bytes | None]] = []
        staged: dict[TopicPartition, CommittedOffset] = {}
        now_ms = _now_ms()
        for topic, p in wanted:
            tp = (topic, p["partition_index"])
            metadata = p["committed_metadata"] or ""
            if len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                out[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            offset = CommittedOffset(p["committed_offset"], p["committed_leader_epoch"], metadata, now_ms)
            staged[tp] = offset
            records.append(
                (
                    formats.offset_key(group_id, *tp),
                    formats.offset_value(offset.offset, offset.leader_epoch, metadata, now_ms),
                )
            )
        if records:
            code = await self._append(g.partition, records)
            for tp, offset in staged.items():
                out[tp] = code
                if code == ErrorCode.NONE:
                    g.offsets[tp] = offset
        return out

    async def txn_commit(self, req: Message) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: the error per partition; the offsets wait for the transaction's marker."""
        wanted = [(t["name"], p) for t in req["topics"] for p in t["partitions"]]
        group_id = req["group_id"]
        code = self.check(group_id)
        if code != ErrorCode.NONE:
            return {(t, p["partition_index"]): code for t, p in wanted}
        partition = self.partition_for(group_id)
        out: dict[TopicPartition, ErrorCode] = {}
        records: list[tuple[bytes, bytes | None]] = []
        staged: dict[TopicPartition, CommittedOffset] = {}
        now_ms = _now_ms()
        for topic, p in wanted:
            tp = (topic, p["partition_index"])
            metadata = p["committed_metadata"] or ""
            if len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                out[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            staged[tp] = CommittedOffset(p["committed_offset"], p["committed_leader_epoch"], metadata, now_ms)
            records.append(
                (
                    formats.offset_key(group_id, *tp),
                    formats.offset_value(p["committed_offset"], p["committed_leader_epoch"], metadata, now_ms),
                )
            )
        if records:
            pid = req["producer_id"]
            code = await self._append(partition, records, pid, req["producer_epoch"])
            if code == ErrorCode.NONE and partition in self.owned:
                by_pid = self.pending_txn.setdefault(partition, {}).setdefault(pid, {})
                by_pid.setdefault(group_id, {}).update(staged)
                if group_id not in self.groups:
                    self.groups[group_id] = Group(group_id, partition, state_timestamp_ms=now_ms)
            for tp in staged:
                out[tp] = code
        return out

    def complete_txn(self, partition: int, producer_id: int, commit: bool) -> None:
        """The producer's transaction marker is in ``partition``: apply (commit) or drop its offsets."""
        groups = self.pending_txn.get(partition, {}).pop(producer_id, {})
        if not commit:
            return
        for gid, committed in groups.items():
            g = self.groups.get(gid)
            if g is None:
                g = self.groups[gid] = Group(gid, partition, state_timestamp_ms=_now_ms())
            g.offsets.update(committed)

    def fetch_offsets(
        self, group_id: str, wanted: list[TopicPartition] | None
    ) -> tuple[ErrorCode, dict[TopicPartition, CommittedOffset | None]]:
        """OffsetFetch v1+: the committed offsets (None: none committed); ``wanted`` None: all of them."""
        code = self.check(group_id)
        if code != ErrorCode.NONE:
            return code, {}
        g = self.groups.get(group_id)
        have = g.offsets if g is not None else {}
        if wanted is None:
            return ErrorCode.NONE, dict(sorted(have.items()))
        return ErrorCode.NONE, {tp: have.get(tp) for tp in wanted}

    # -- ListGroups, DescribeGroups, DeleteGroups -----------------------------------------------

    def list_groups(self) -> tuple[ErrorCode, list[Group]]:
        code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.loading else ErrorCode.NONE
        return code, sorted((g for g in self.groups.values() if g.state != GroupState.DEAD), key=lambda g: g.group_id)

    def describe(self, group_id: str) -> Message:
        code = self.check(group_id)
        g = self.groups.get(group_id)
        out: Message = {
            "error_code": code,
            "group_id": group_id,
            "group_state": GroupState.DEAD.value,
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
        }
        if code != ErrorCode.NONE or g is None:
            return out
        stable = g.state == GroupState.STABLE
        out.update(
            group_state=g.state.value,
            protocol_type=g.protocol_type or "",
            protocol_data=(g.protocol or "") if stable else "",
            members=[
                {
                    "member_id": m.member_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": m.metadata(g.protocol) if stable and g.protocol else b"",
                    "member_assignment": m.assignment if stable else b"",
                }
                for m in g.members.values()
            ],
        )
        return out

    async def delete(self, group_id: str) -> ErrorCode:
        code = self.check(group_id)
        if code != ErrorCode.NONE:
            return code
        g = self.groups.get(group_id)
        if g is None or g.state == GroupState.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if g.state != GroupState.EMPTY:
            return ErrorCode.NON_EMPTY_GROUP
        tombstones: list[tuple[bytes, bytes | None]] = [(formats.offset_key(group_id, *tp), None) for tp in g.offsets]
        tombstones.append((formats.group_key(group_id), None))
        code = await self._append(g.partition, tombstones)
        if code == ErrorCode.NONE:
            self._unload(g, ErrorCode.UNKNOWN_MEMBER_ID)
            log.info("deleted group %s and its %d committed offset(s)", group_id, len(g.offsets))
        return code

    # -- timers ---------------------------------------------------------------------------------

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                self.tick(time.monotonic())
            except Exception:
                log.exception("group coordinator timers failed; continuing")

    def tick(self, now: float) -> None:
        for g in list(self.groups.values()):
            for mid, m in list(g.members.items()):
                if m.expired(now):
                    self._remove_member(g, mid, "expired: no heartbeat within its session timeout")
            for mid, deadline in list(g.pending.items()):
                if now > deadline:
                    del g.pending[mid]
            self._maybe_complete_join(g)
        if now >= self._next_expiry_check:
            self._next_expiry_check = now + self.config.offsets_retention_check_interval_ms / 1000.0
            self.expire_offsets(_now_ms())

    def expire_offsets(self, now_ms: int) -> int:
        """Offsets of groups Empty for ``offsets.retention.minutes`` (KIP-211): tombstoned and
        forgotten; a group left with nothing is deleted. Returns how many offsets expired."""
        retention = self.config.offsets_retention_minutes * 60_000
        expired_total = 0
        for g in list(self.groups.values()):
            if g.state != GroupState.EMPTY or g.partition not in self.owned:
                continue
            since = g.state_timestamp_ms if g.protocol_type and g.state_timestamp_ms >= 0 else None
            expired = [
                tp
                for tp, o in g.offsets.items()
                if now_ms >= (o.commit_timestamp if since is None else since) + retention
            ]
            records: list[tuple[bytes, bytes | None]] = [(formats.offset_key(g.group_id, *tp), None) for tp in expired]
            for tp in expired:
                del g.offsets[tp]
            if not g.offsets:
                records.append((formats.group_key(g.group_id), None))
                self._unload(g, ErrorCode.UNKNOWN_MEMBER_ID)
            if records:
                log.info("expired %d offset(s) of group %s", len(expired), g.group_id)
                self._spawn_write(g.partition, records)
            expired_total += len(expired)
        return expired_total


def _same_subscription(protocol_type: str | None, old: list[tuple[str, bytes]], new: list[tuple[str, bytes]]) -> bool:
    """Do two members' protocols ask for the same thing? Byte-equal metadata; for the consumer
    protocol (Subscription: version int16, topics [string], then user data and, from version 1,
    owned partitions and generation) the same protocol names with the same topics."""
    if old == new:
        return True
    if protocol_type != "consumer" or [n for n, _ in old] != [n for n, _ in new]:
        return False
    try:
        return all(_subscribed_topics(a) == _subscribed_topics(b) for (_, a), (_, b) in zip(old, new, strict=True))
    except DecodeError:
        return False


def _subscribed_topics(metadata: bytes) -> list[str]:
    r = Reader(metadata)
    r.int16()
    return sorted(r.string() for _ in range(r.array_length()))
