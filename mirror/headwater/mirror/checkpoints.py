"""Offset syncs and checkpoints in MirrorMaker 2's own record formats: consumer failover between clusters.

A consumer group that reads ``orders`` in dc1 and must move to the aggregate cluster needs, for
each partition, the offset in the target where it resumes without skipping a record. MM2
(KIP-382) answers with two internal topics, and the mirror writes both, byte for byte as MM2 does,
so MM2's ``RemoteClusterUtils.translateOffsets`` and ``headwater mirror translate`` read them:

``mm2-offset-syncs.<target alias>.internal`` -- in the SOURCE cluster (MM2 3.x's default
``offset-syncs.topic.location = source``; 2.x had no choice), one partition, compacted. Each
record pairs a source record's offset with the offset of its copy in the target::

    key   = topic: STRING, partition: INT32              (org.apache.kafka...OffsetSync.KEY_SCHEMA)
    value = upstreamOffset: INT64, offset: INT64          (VALUE_SCHEMA; "offset" is downstream)

``<source alias>.checkpoints.internal`` -- in the TARGET cluster, one partition, compacted. Each
record is one group's translated offset for one partition of the TARGET topic::

    key   = group: STRING, topic: STRING, partition: INT32          (Checkpoint.KEY_SCHEMA)
    value = version: INT16 (0), upstreamOffset: INT64, offset: INT64, metadata: STRING
                                                         (HEADER_SCHEMA then VALUE_SCHEMA_V0)

STRING is Kafka's protocol string (INT16 length, UTF-8), every integer big-endian: the Struct
encoding of ``org.apache.kafka.common.protocol.types``. ``tests/unit/mirror/mm2-3.9.1-golden.tsv``
holds the bytes MM2 3.9.1's own classes write (``tests/java/mm2/Mm2Golden.java``); the unit test
checks these encoders against them.

When syncs are written (MM2's ``MirrorSourceTask`` rule, applied to every record the target
acknowledged on the fast path): the first record a copier delivers, a record whose source offset
does not follow the previous one (control batches, a gap), a target offset below the previous one,
and otherwise whenever the target offset is ``offset.lag.max`` (100) past the last sync + 1. The
copier knows each record's target offset without decoding: a produce appends its batches
contiguously from the base offset the target answers, and a dense batch (no compaction holes) maps
source ``base + k`` to target ``target base + k``. A compacted (re-encoded) batch gives one sync,
its header's last offset to its copy's last record (the record there may be older: translating
that exact offset re-reads one record, never skips). The re-partitioning path (partition counts
differ, test faults) writes no syncs: its records change partitions, and MM2's translation is per
partition. A produce retried after an ambiguous answer writes syncs for the batches of its last
attempt only.

Translation (MM2 3.5+'s ``OffsetSyncStore.translateDownstream``): for a group's committed source
offset ``C``, the newest sync with ``upstream <= C``; ``C == upstream`` gives its ``offset``, a
larger ``C`` gives ``offset + 1`` (what lies between may not be mirrored yet; never estimate past
it). So a group resumes in the target having re-read at most ``offset.lag.max`` records, never
having skipped one. No sync at or below ``C`` (the group is older than every sync this process
read): no checkpoint for that partition.

Checkpoints are emitted every ``emit.checkpoints.interval.seconds`` (60) by one process of the
flow (the member with the smallest consumer id in the flow's ZooKeeper group), for every
Kafka-coordinated group of the source matched by ``groups`` (``.*``) and not ``groups.exclude``
(``console-consumer-.*, connect-.*, __.*``), and for the partitions of topics the flow mirrors;
a checkpoint is written when its offsets changed since this process last wrote it (the topic is
compacted; the newest per key is what readers keep). ZooKeeper-era consumer groups
(``/consumers``) are not checkpointed: MM2 does not see them either.

One source per target topic (DefaultReplicationPolicy, or IdentityReplicationPolicy with a topic
name that only one source has) is what this is defined for. With IdentityReplicationPolicy and the
same topic in several sources, each source's checkpoints give a target offset into the same
merged partition; each is right for its own source's records (no record of that source is
skipped), but records of the other sources between the two positions are not accounted for: a
group that moves there from one source should start at the smallest of the checkpoints of every
source it read, and will then re-read records of the others.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import re
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from headwater.client.admin import Admin, NewTopic
from headwater.client.cluster import Cluster
from headwater.client.consumer import Consumer
from headwater.client.groups import GroupAdmin
from headwater.client.producer import Producer
from headwater.client.security import ClientSecurity
from headwater.protocol.errors import DecodeError, ErrorCode
from headwater.service.supervisor import Unit, wait_or_stop

__all__ = [
    "Checkpoint",
    "CheckpointEmitter",
    "OffsetSync",
    "OffsetSyncStore",
    "OffsetSyncs",
    "PartitionSyncs",
    "checkpoints_topic",
    "decode_checkpoint",
    "decode_offset_sync",
    "encode_checkpoint",
    "encode_offset_sync",
    "offset_syncs_topic",
    "read_checkpoints",
]

log = logging.getLogger("headwater.mirror")

CHECKPOINT_VERSION = 0
#: syncs kept per partition by the translating side (the newest; a group older than all of them gets no checkpoint)
SYNCS_KEPT = 1024
#: syncs waiting to be written, per flow; beyond it the oldest are dropped (only the re-read bound suffers)
PENDING_MAX = 100_000
_INTERNAL_TOPIC_CONFIGS = {"cleanup.policy": "compact"}


def offset_syncs_topic(target: str, separator: str = ".") -> str:
    """MM2's name: ``replication.policy.separator`` is used in it unless
    ``replication.policy.internal.topic.separator.enabled = false`` (then pass ".")."""
    return f"mm2-offset-syncs{separator}{target}{separator}internal"


def checkpoints_topic(source: str, separator: str = ".") -> str:
    return f"{source}{separator}checkpoints{separator}internal"


# -- the record formats ------------------------------------------------------------------------


def _string(s: str) -> bytes:
    b = s.encode()
    if len(b) > 0x7FFF:
        raise ValueError(f"string of {len(b)} bytes is too long for a Kafka protocol STRING")
    return struct.pack(">h", len(b)) + b


def _read_string(data: bytes, at: int) -> tuple[str, int]:
    (n,) = struct.unpack_from(">h", data, at)
    if n < 0 or at + 2 + n > len(data):
        raise ValueError("truncated STRING")
    return data[at + 2 : at + 2 + n].decode(), at + 2 + n


@dataclass(frozen=True)
class OffsetSync:
    topic: str
    partition: int
    upstream: int
    downstream: int


@dataclass(frozen=True)
class Checkpoint:
    group: str
    topic: str  # the TARGET topic (MM2 renames the partition with the replication policy)
    partition: int
    upstream: int
    downstream: int
    metadata: str = ""


def encode_offset_sync(s: OffsetSync) -> tuple[bytes, bytes]:
    """(key, value) of an offset sync record, as MM2's ``OffsetSync.recordKey()/recordValue()``."""
    return _string(s.topic) + struct.pack(">i", s.partition), struct.pack(">qq", s.upstream, s.downstream)


def decode_offset_sync(key: bytes, value: bytes) -> OffsetSync:
    """Raises DecodeError for a short or malformed record."""
    try:
        topic, at = _string_and_end(key)
        (partition,) = struct.unpack_from(">i", key, at)
        upstream, downstream = struct.unpack_from(">qq", value, 0)
    except (struct.error, ValueError) as e:  # UnicodeDecodeError is a ValueError
        raise DecodeError(f"not an offset sync: {e}") from None
    return OffsetSync(topic, partition, upstream, downstream)


def encode_checkpoint(c: Checkpoint) -> tuple[bytes, bytes]:
    """(key, value) of a checkpoint record, as MM2's ``Checkpoint.recordKey()/recordValue()`` (version 0)."""
    key = _string(c.group) + _string(c.topic) + struct.pack(">i", c.partition)
    value = struct.pack(">hqq", CHECKPOINT_VERSION, c.upstream, c.downstream) + _string(c.metadata)
    return key, value


def decode_checkpoint(key: bytes, value: bytes) -> Checkpoint:
    """Raises DecodeError for a short or malformed record."""
    try:
        group, at = _string_and_end(key)
        topic, at = _read_string(key, at)
        (partition,) = struct.unpack_from(">i", key, at)
        version, upstream, downstream = struct.unpack_from(">hqq", value, 0)
        metadata, _ = _read_string(value, 18)
    except (struct.error, ValueError) as e:  # UnicodeDecodeError is a ValueError
        raise DecodeError(f"not a checkpoint: {e}") from None
    if version < 0:  # MM2 reads any version >= 0 with the V0 schema; so do we
        raise DecodeError(f"checkpoint version {version}")
    return Checkpoint(group, topic, partition, upstream, downstream, metadata)


def _string_and_end(data: bytes) -> tuple[str, int]:
    return _read_string(data, 0)


# -- the writing side: which records get a sync ------------------------------------------------


class PartitionSyncs:
    """MM2's per-partition rule (``MirrorSourceTask.PartitionState.update``), fed whole batches."""

    def __init__(self, lag_max: int) -> None:
        self.lag_max = lag_max
        self.last_sync_downstream = -1
        self.previous_upstream = -1
        self.previous_downstream = -1

    def update(self, upstream: int, downstream: int) -> bool:
        emit = (
            self.last_sync_downstream == -1
            or downstream - (self.last_sync_downstream + 1) >= self.lag_max
            or upstream - self.previous_upstream != 1
            or downstream < self.previous_downstream
        )
        if emit:
            self.last_sync_downstream = downstream
        self.previous_upstream, self.previous_downstream = upstream, downstream
        return emit

    def dense_batch(self, upstream_base: int, downstream_base: int, n: int) -> list[tuple[int, int]]:
        """The syncs of ``n`` records at ``upstream_base + k -> downstream_base + k`` (what the
        record-by-record rule gives, without walking every record)."""
        out: list[tuple[int, int]] = []
        if n <= 0:
            return out
        if self.update(upstream_base, downstream_base):
            out.append((upstream_base, downstream_base))
        last = n - 1
        while True:  # inside the batch only the lag rule can fire (offsets are consecutive)
            k = self.last_sync_downstream + 1 + self.lag_max - downstream_base
            if k > last or k <= 0:
                break
            self.last_sync_downstream = downstream_base + k
            out.append((upstream_base + k, downstream_base + k))
        if last > 0:
            self.previous_upstream, self.previous_downstream = upstream_base + last, downstream_base + last
        return out

    def sparse_batch(self, upstream_last: int, downstream_last: int) -> list[tuple[int, int]]:
        """A compacted batch: only its last place is known; always a sync (MM2's rule fires on the gap)."""
        self.last_sync_downstream = downstream_last
        self.previous_upstream, self.previous_downstream = upstream_last, downstream_last
        return [(upstream_last, downstream_last)]


class OffsetSyncs:
    """A flow's offset syncs, from its copiers to the writer task (one queue per flow)."""

    def __init__(self, lag_max: int) -> None:
        self.lag_max = lag_max
        self.partitions: dict[tuple[str, int], PartitionSyncs] = {}
        self.pending: deque[OffsetSync] = deque(maxlen=PENDING_MAX)
        self.ready = asyncio.Event()
        self.written = 0

    def restart(self, topic: str, partition: int) -> None:
        """A copier (re)starts the partition: its first delivered record gets a sync (MM2: "this lifetime")."""
        self.partitions.pop((topic, partition), None)

    def of(self, topic: str, partition: int) -> PartitionSyncs:
        tp = (topic, partition)
        state = self.partitions.get(tp)
        if state is None:
            state = self.partitions[tp] = PartitionSyncs(self.lag_max)
        return state

    def add(self, topic: str, partition: int, pairs: Iterable[tuple[int, int]]) -> None:
        for up, down in pairs:
            self.pending.append(OffsetSync(topic, partition, up, down))
        if self.pending:
            self.ready.set()

    async def write(
        self,
        unit: Unit,
        source: Cluster,
        admin: Admin,
        topic: str,
        stop: asyncio.Event,
        replication_factor: int | None = None,
    ) -> None:
        """The supervised writer: everything pending, into the source's offset-syncs ``topic`` (acks=all)."""
        producer = Producer(
            "", cluster=source, acks="all", linger_ms=5, delivery_timeout_ms=60000, request_timeout_ms=15000
        )
        created = False
        try:
            while not stop.is_set():
                unit.progress()
                try:
                    await asyncio.wait_for(self.ready.wait(), 5.0)
                except TimeoutError:
                    continue
                self.ready.clear()
                if not created:  # created with the first sync: a mirror without fast-path copies writes none
                    await ensure_topic(source, admin, topic, replication_factor)
                    created = True
                batch, self.pending = self.pending, deque(maxlen=PENDING_MAX)
                try:
                    futures = []
                    for s in batch:
                        key, value = encode_offset_sync(s)
                        futures.append(await producer.send(topic, value, key, partition=0))
                    for fut in futures:
                        await fut
                except BaseException:  # not all written: back in front of the newer ones, for the restart
                    self.pending.extendleft(reversed(batch))
                    self.ready.set()
                    raise
                self.written += len(batch)
        finally:
            await producer.close(timeout=10)


async def ensure_topic(cluster: Cluster, admin: Admin, topic: str, replication_factor: int | None = None) -> None:
    """An internal topic (one partition, compacted), created when missing."""
    await cluster.refresh([topic])
    tm = cluster.topics.get(topic)
    if tm is not None and tm.partitions:
        return
    rf = replication_factor or min(3, max(len(cluster.brokers), 1))
    result = await admin.create_topics([NewTopic(topic, 1, rf, dict(_INTERNAL_TOPIC_CONFIGS))], timeout_ms=30000)
    error = result.get(topic)
    if error is not None and error.code is not ErrorCode.TOPIC_ALREADY_EXISTS:
        raise error
    if error is None:
        log.info("created %s: 1 partition, replication factor %d, compacted", topic, rf)
    await admin.wait_for_topic(topic, timeout=60)


# -- the translating side ----------------------------------------------------------------------


@dataclass
class OffsetSyncStore:
    """The syncs read back from the offset-syncs topic: the newest SYNCS_KEPT per partition."""

    syncs: dict[tuple[str, int], list[tuple[int, int]]] = field(default_factory=dict)
    position: int = 0  # the next offset of the offset-syncs topic to read

    def add(self, s: OffsetSync) -> None:
        kept = self.syncs.setdefault((s.topic, s.partition), [])
        if kept and (s.downstream < kept[-1][1] or s.upstream < kept[-1][0]):
            kept.clear()  # the target or source partition was truncated / recreated: older syncs no longer hold
        kept.append((s.upstream, s.downstream))
        if len(kept) > SYNCS_KEPT:
            del kept[: len(kept) - SYNCS_KEPT]

    def translate(self, topic: str, partition: int, upstream: int) -> int | None:
        """The target offset a group committed at source offset ``upstream`` resumes from (None: unknown)."""
        kept = self.syncs.get((topic, partition))
        if not kept:
            return None
        i = bisect.bisect_right(kept, (upstream, 1 << 63)) - 1
        if i < 0:
            return None  # older than every sync kept
        up, down = kept[i]
        return down if up == upstream else down + 1

    async def read(self, consumer: Consumer, topic: str) -> int:
        """Read what is new in the offset-syncs topic (up to its high watermark); how many syncs."""
        n = 0
        while True:
            got = await consumer.fetch(topic, 0, self.position, max_wait_ms=0)
            for r in got.records:
                if r.key is not None and r.value is not None:
                    try:
                        self.add(decode_offset_sync(r.key, r.value))
                        n += 1
                    except DecodeError as e:
                        log.warning("%s offset %d: not an offset sync (%s): skipped", topic, r.offset, e)
                self.position = r.offset + 1
            if not got.records or self.position >= got.high_watermark:
                return n


def compile_groups(value: str) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(v.strip()) for v in value.split(",") if v.strip())


class CheckpointEmitter:
    """A flow's checkpoints: every interval, the source groups' committed offsets translated with
    the syncs read back from the source, written into the target's checkpoints topic."""

    def __init__(
        self,
        *,
        source_alias: str,
        target_alias: str,
        source: Cluster,
        source_bootstrap: str,
        source_security: ClientSecurity,
        target: Cluster,
        target_admin: Admin,
        interval_s: float,
        groups: tuple[re.Pattern[str], ...],
        groups_exclude: tuple[re.Pattern[str], ...],
        target_topic: Callable[[str], str],
        mirrors_topic: Callable[[str], bool],
        is_leader: Callable[[], Awaitable[bool]],
        syncs_topic: str,
        checkpoints_topic: str,
        replication_factor: int | None = None,
        sync_group_offsets_s: float | None = None,
        target_bootstrap: str = "",
        target_security: ClientSecurity | None = None,
        on_latency: Callable[[Checkpoint, float], None] | None = None,
    ) -> None:
        self.source_alias = source_alias
        #: called with each checkpoint the target acknowledged and its latency in ms (MM2's
        #: checkpoint-latency-ms: acknowledged minus made, the group's offsets read just before)
        self.on_latency = on_latency
        self.target_alias = target_alias
        self.source = source
        self.source_bootstrap = source_bootstrap
        self.source_security = source_security
        self.target = target
        self.target_admin = target_admin
        self.interval_s = interval_s
        self.groups = groups
        self.groups_exclude = groups_exclude
        self.target_topic = target_topic
        self.mirrors_topic = mirrors_topic
        self.is_leader = is_leader
        self.syncs_topic = syncs_topic
        self.checkpoints_topic = checkpoints_topic
        self.replication_factor = replication_factor
        #: sync.group.offsets (KIP-545): every this many seconds, None: off
        self.sync_group_offsets_s = sync_group_offsets_s
        self.target_bootstrap = target_bootstrap
        self.target_security = target_security
        self.last_sync_s = -1e18
        #: every group's newest translated offsets: group -> (target topic, partition) -> target offset
        self.latest: dict[str, dict[tuple[str, int], int]] = {}
        self.store = OffsetSyncStore()
        self.emitted: dict[tuple[str, str, int], tuple[int, int]] = {}
        self.last_emit_s: float | None = None

    def wants_group(self, group: str) -> bool:
        return any(p.fullmatch(group) for p in self.groups) and not any(p.fullmatch(group) for p in self.groups_exclude)

    async def run(self, unit: Unit, stop: asyncio.Event) -> None:
        """The supervised loop."""
        consumer = Consumer("", cluster=self.source)
        groups = GroupAdmin(
            self.source_bootstrap, client_id="headwater-mirror-checkpoints", security=self.source_security
        )
        producer = Producer(
            "", cluster=self.target, acks="all", linger_ms=5, delivery_timeout_ms=60000, request_timeout_ms=15000
        )
        topic = self.checkpoints_topic
        target_groups = None
        if self.sync_group_offsets_s is not None:
            target_groups = GroupAdmin(
                self.target_bootstrap, client_id="headwater-mirror-group-offsets", security=self.target_security
            )
        loop = asyncio.get_running_loop()
        try:
            while not stop.is_set():
                unit.progress()
                if await self.is_leader():
                    n = await self.emit_once(consumer, groups, producer, topic)
                    if n:
                        log.info(
                            "%s->%s: %d checkpoint(s) written into %s", self.source_alias, self.target_alias, n, topic
                        )
                    due = self.sync_group_offsets_s is not None and (
                        loop.time() - self.last_sync_s >= self.sync_group_offsets_s
                    )
                    if target_groups is not None and due:
                        await self.sync_group_offsets(target_groups)
                        self.last_sync_s = loop.time()
                await wait_or_stop(stop, self.interval_s)
        finally:
            await producer.close(timeout=10)
            await groups.close()
            if target_groups is not None:
                await target_groups.close()

    async def sync_group_offsets(self, target_groups: GroupAdmin) -> int:
        """KIP-545: commit the translated offsets into the target for each group with no active
        member there, where the target has none for the partition or an older one (a group that
        already moved on in the target is never set back). How many offsets were committed."""
        done = 0
        for group, offsets in sorted(self.latest.items()):
            try:
                state = (await target_groups.describe(group, with_lag=False)).state
                if state not in ("Empty", "Dead"):
                    continue  # active in the target: its own commits rule
                committed = await target_groups.committed(group)
                ahead = {tp: down for tp, down in offsets.items() if committed.get(tp, -1) < down}
                if ahead:
                    await target_groups.commit(group, ahead)
                    done += len(ahead)
                    log.info(
                        "%s->%s: group %s: %d translated offset(s) committed in the target",
                        self.source_alias,
                        self.target_alias,
                        group,
                        len(ahead),
                    )
            except Exception as e:  # one group's refusal (members joined meanwhile) does not stop the others
                log.warning("%s: syncing the offsets of group %s into the target: %s", self.target_alias, group, e)
        return done

    async def emit_once(self, consumer: Consumer, groups: GroupAdmin, producer: Producer, topic: str) -> int:
        syncs_topic = self.syncs_topic
        await self.source.refresh([syncs_topic])
        if syncs_topic in self.source.topics and self.source.topics[syncs_topic].partitions:
            await self.store.read(consumer, syncs_topic)
        checkpoints = []
        made: list[float] = []
        for group, protocol_type, _ in await groups.list_groups():
            if protocol_type not in ("consumer", "") or not self.wants_group(group):
                continue
            try:
                committed = await groups.committed(group)
            except Exception as e:
                log.warning("%s: reading the offsets of group %s: %s", self.source_alias, group, e)
                continue
            for (t, p), offset in sorted(committed.items()):
                if not self.mirrors_topic(t):
                    continue
                down = self.store.translate(t, p, offset)
                if down is None or down < 0:
                    continue
                target_topic = self.target_topic(t)
                self.latest.setdefault(group, {})[(target_topic, p)] = down
                key = (group, target_topic, p)
                if self.emitted.get(key) == (offset, down):
                    continue
                checkpoints.append(Checkpoint(group, target_topic, p, offset, down))
                made.append(time.time())
        if checkpoints:
            await ensure_topic(self.target, self.target_admin, topic, self.replication_factor)
        futures = []
        for c in checkpoints:
            k, v = encode_checkpoint(c)
            futures.append(await producer.send(topic, v, k, partition=0))
        for fut in futures:
            await fut
        acked = time.time()
        for c, at in zip(checkpoints, made, strict=True):
            self.emitted[(c.group, c.topic, c.partition)] = (c.upstream, c.downstream)
            if self.on_latency is not None:
                self.on_latency(c, max(acked - at, 0.0) * 1000.0)
        return len(checkpoints)


async def read_checkpoints(cluster: Cluster, topic: str, group: str) -> dict[tuple[str, int], Checkpoint]:
    """The newest checkpoint per target partition of ``group`` in the target's checkpoints ``topic``
    (what MM2's ``RemoteClusterUtils.translateOffsets`` reads)."""
    out: dict[tuple[str, int], Checkpoint] = {}
    consumer = Consumer("", cluster=cluster)
    position = await consumer.earliest_offset(topic, 0)
    end = await consumer.latest_offset(topic, 0)
    while position < end:
        got = await consumer.fetch(topic, 0, position, max_wait_ms=0)
        if not got.records:
            break
        for r in got.records:
            position = r.offset + 1
            if r.key is None or r.value is None:
                continue
            try:
                c = decode_checkpoint(r.key, r.value)
            except DecodeError:
                continue
            if c.group == group:
                out[(c.topic, c.partition)] = c
    return out
