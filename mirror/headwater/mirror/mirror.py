"""The mirror: every enabled flow's source partitions copied into the target (aggregate) cluster.

Per flow, one :class:`~headwater.mirror.group.ZkGroup` in the source's ZooKeeper decides which
source partitions this process mirrors; each owned partition gets one copier task:

    fetch (raw) from the source leader at the next offset
      -> fast path: the complete batches as they are (control batches dropped, producer state of
         idempotent batches reset), produced raw with acks=all to the SAME partition number
      -> re-partitioning path (partition counts differ, or a test fault is set): records decoded
         and produced with acks=all to murmur2(key) % n (the Java client's choice; a null key keeps
         its source partition modulo n), keys / values / headers / CreateTime kept
      -> only when the target acknowledged every batch of the fetch does the partition's
         acknowledged offset move past them.

The acknowledged offset is what gets committed to ``/consumers/<group>/offsets`` (every
``offset.commit.interval.ms``, when a partition moves away, and at shutdown), so a crash
re-mirrors at most what was acknowledged since the last commit: duplicates bounded by the commit
interval, never a loss. A partition moving to another process is handed over cleanly: the copier
finishes its in-flight produce, the offset is committed, and only then is the owner node released.

Destination topics are created with the source's partition count and its non-default configs
(retention, ``cleanup.policy``, ``max.message.bytes`` ...). New source topics matching a flow
are picked up from ZooKeeper's ``/brokers/topics`` watch within seconds, without a restart;
SIGHUP re-reads the topic lists (see :mod:`headwater.mirror.main`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from headwater.client.admin import Admin, NewTopic
from headwater.client.cluster import Cluster
from headwater.client.consumer import EARLIEST, LATEST, Consumer
from headwater.client.errors import KafkaConnectionError, KafkaTimeoutError, OffsetOutOfRangeError, UnknownTopicError
from headwater.client.partitioner import murmur2, to_positive
from headwater.client.raw import as_plain_batch, fetch_raw, produce_raw
from headwater.mirror.config import Flow, MirrorConfig
from headwater.mirror.copies import TargetCopies, scan_target, skip_copied
from headwater.mirror.gaps import GapReporter, reporter_for
from headwater.mirror.group import ZkGroup, assign, new_consumer_id
from headwater.mirror.heartbeats import HEARTBEATS_TOPIC, Heartbeats
from headwater.mirror.metrics import MirrorMetrics
from headwater.mirror.writer import SourceWriter
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records.header import ATTRIBUTES_OFFSET, BatchHeader
from headwater.protocol.records.record import RecordInput, decode_batch, encode_batch

log = logging.getLogger("headwater.mirror")

TopicPartition = tuple[str, int]
_BACKOFF_MAX = 5.0
# Topic configs a destination topic takes from its source when they are set there (not defaults).
_COPIED_CONFIGS = (
    "cleanup.policy",
    "retention.ms",
    "retention.bytes",
    "max.message.bytes",
    "segment.bytes",
    "segment.ms",
    "min.compaction.lag.ms",
    "delete.retention.ms",
    "message.timestamp.type",
    "compression.type",
)


@dataclass
class _TopicPlan:
    target_topic: str
    source_partitions: int
    target_partitions: int

    @property
    def identity(self) -> bool:
        return self.source_partitions == self.target_partitions


@dataclass
class _Copier:
    stop: asyncio.Event
    next_offset: int  # the source offset after everything the target acknowledged
    committed: int  # what the group in ZooKeeper holds (-1: nothing yet)
    task: asyncio.Task[None] | None = None
    #: fast path: the target offset right after this copier's last acknowledged append (-1: unknown)
    target_end: int = -1
    #: fast path, after a change of owner: copies the previous owner made past the committed offset
    copies: TargetCopies | None = None
    resume_scan: bool = False  # scan the target from target_end before the first fetch


@dataclass
class _FlowState:
    flow: Flow
    group: ZkGroup
    source: Cluster
    source_admin: Admin
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    plans: dict[str, _TopicPlan] = field(default_factory=dict)
    copiers: dict[TopicPartition, _Copier] = field(default_factory=dict)
    pending: set[TopicPartition] = field(default_factory=set)  # ours, still held by another member
    records_seen: int = 0  # for the test faults
    healthy_reason: str = "starting"


def _span(batch: bytes | memoryview) -> int:
    """How many offsets a batch takes in the log (last offset delta + 1)."""
    return int.from_bytes(batch[_LAST_OFFSET_DELTA : _LAST_OFFSET_DELTA + 4], "big", signed=True) + 1


_LAST_OFFSET_DELTA = ATTRIBUTES_OFFSET + 2


class Mirror:
    def __init__(self, config: MirrorConfig, metrics: MirrorMetrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or MirrorMetrics()
        target_alias = config.flows[0].target
        self.target = Cluster(
            config.clusters[target_alias].bootstrap, client_id="headwater-mirror", allow_auto_create_topics=False
        )
        self.target_admin = Admin("", cluster=self.target)
        self.flows: list[_FlowState] = []
        self.started = False
        # the mirror's own records in each source: gap events (gaps.py) and heartbeats (heartbeats.py)
        self.writers: dict[str, SourceWriter] = {}
        self.gaps: dict[str, GapReporter] = {}
        self.heartbeats = Heartbeats(self.metrics, config.heartbeats_interval_s or 1.0)

    def reload_topics(self, fresh: MirrorConfig) -> None:
        """SIGHUP: take the topic lists of the re-read file for the flows that still exist (adding or
        removing flows and clusters needs a restart)."""
        by_name = {f.name: f for f in fresh.flows}
        for state in self.flows:
            new = by_name.get(state.flow.name)
            if new is not None and (new.topics, new.exclude) != (state.flow.topics, state.flow.exclude):
                log.info("%s: topics now %s", new.name, ", ".join(p.pattern for p in new.topics))
                state.flow = new

    # -- health --------------------------------------------------------------------------------

    def health(self) -> tuple[bool, str]:
        """Healthy once every flow has taken its share: it owns partitions, or none match yet."""
        if not self.started:
            return False, "starting"
        parts = []
        ok = True
        for f in self.flows:
            owned = sorted(f.copiers)
            if f.pending or (not owned and f.plans and f.healthy_reason != "no partitions assigned to this process"):
                ok = False
            parts.append(
                f"{f.flow.name}: {len(owned)} partition(s) owned, {len(f.pending)} pending; {f.healthy_reason}"
            )
        return ok, "; ".join(parts)

    # -- lifecycle -----------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event, reload: asyncio.Event | None = None) -> None:
        loop = asyncio.get_running_loop()
        tasks: list[asyncio.Task[None]] = []
        try:
            for flow in self.config.flows:
                src = self.config.clusters[flow.source]
                assert src.zookeeper_connect is not None
                group = ZkGroup(
                    src.zookeeper_connect,
                    self.config.group_for(flow),
                    new_consumer_id(self.config.group_for(flow)),
                    [p.pattern for p in flow.topics],
                )
                source = Cluster(src.bootstrap, client_id="headwater-mirror", allow_auto_create_topics=False)
                state = _FlowState(flow, group, source, Admin("", cluster=source))
                self.flows.append(state)
                tasks.append(asyncio.ensure_future(self._run_flow(state, loop, stop)))
                writer = self.writers[flow.name] = SourceWriter(source, state.source_admin)
                self.gaps[flow.name] = reporter_for(
                    flow.source,
                    flow.target,
                    source,
                    writer,
                    self.metrics,
                    on_data_loss=self.config.on_data_loss,
                    reset_to_latest=self.config.auto_offset_reset == "latest",
                )
                if self.config.heartbeats_interval_s is not None:
                    tasks.append(asyncio.ensure_future(self.heartbeats.emit(flow.source, flow.target, writer, stop)))
            tasks.append(asyncio.ensure_future(self._commit_loop(stop)))
            if reload is not None:
                tasks.append(asyncio.ensure_future(self._reload_loop(reload, stop)))
            self.started = True
            await stop.wait()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._shutdown()

    async def _reload_loop(self, reload: asyncio.Event, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await reload.wait()
            reload.clear()
            for f in self.flows:
                f.changed.set()

    async def _run_flow(self, f: _FlowState, loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
        """Join the group (retrying while the source is unreachable), then rebalance on every change."""
        backoff = 0.5
        while not stop.is_set():
            try:
                await asyncio.to_thread(f.group.start, _threadsafe(loop, f.changed))
                break
            except Exception as e:
                f.healthy_reason = f"source ZooKeeper {f.group.zk_connect} unreachable: {e}"
                log.warning(
                    "%s: cannot join the group in %s (%s); retrying in %.1fs",
                    f.flow.name,
                    f.group.zk_connect,
                    e,
                    backoff,
                )
                try:
                    f.group.zk.stop()
                except Exception:
                    pass
                f.group = ZkGroup(f.group.zk_connect, f.group.group, f.group.consumer_id, f.group.subscription)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX)
        log.info("%s: joined group %s in %s as %s", f.flow.name, f.group.group, f.group.zk_connect, f.group.consumer_id)
        f.changed.set()
        while not stop.is_set():
            try:
                await asyncio.wait_for(f.changed.wait(), 1.0 if f.pending else 10.0)
            except TimeoutError:
                pass
            f.changed.clear()
            try:
                await self._rebalance(f)
            except Exception as e:  # the source or target is unreachable: keep trying, keep other flows going
                f.healthy_reason = f"rebalance failed: {e}"
                log.warning("%s: rebalance failed (%s); retrying", f.flow.name, e)
                await asyncio.sleep(1.0)
                f.changed.set()

    async def _rebalance(self, f: _FlowState) -> None:
        g = f.group
        if g.session_lost:
            log.warning("%s: ZooKeeper session lost: stopping every copier and registering again", f.flow.name)
            for tp in list(f.copiers):
                await self._stop_copier(f, tp, release=False)
            await asyncio.to_thread(g.register)
        members, topics, deleting = await asyncio.to_thread(lambda: (g.members(), g.topics(), g.deleting()))
        wanted = [t for t in topics if f.flow.matches(t) and t not in deleting]
        partitions: list[TopicPartition] = []
        for t in wanted:
            n = len(await asyncio.to_thread(g.partitions, t))
            if n == 0:
                continue
            plan = f.plans.get(t)
            if plan is None or plan.source_partitions != n:
                plan = await self._plan_topic(f, t, n)
                f.plans[t] = plan
            partitions.extend((t, p) for p in range(n))
        if g.consumer_id not in members:
            members = sorted({*members, g.consumer_id})  # our registration is on its way
        mine = assign(partitions, members, g.consumer_id)
        before = set(f.copiers)
        for tp in sorted(before - mine):
            await self._stop_copier(f, tp, release=True)
        f.pending &= mine
        for tp in sorted(mine - set(f.copiers)):
            if await asyncio.to_thread(g.claim, tp):
                f.pending.discard(tp)
                committed = await asyncio.to_thread(g.read_offset, tp)
                await self._start_copier(f, tp, committed)
            else:
                f.pending.add(tp)
        self.metrics.owned.labels(f.flow.name).set(len(f.copiers))
        f.healthy_reason = "mirroring" if f.copiers else "no partitions assigned to this process"
        if set(f.copiers) != before or f.pending:
            owned = ", ".join(f"{t}-{p}" for t, p in sorted(f.copiers)) or "none"
            waiting = f"; waiting for {len(f.pending)} partition(s) still held by another member" if f.pending else ""
            log.info(
                "%s: rebalanced among %d member(s): this process owns %d partition(s): %s%s",
                f.flow.name,
                len(members),
                len(f.copiers),
                owned,
                waiting,
            )

    async def _plan_topic(self, f: _FlowState, topic: str, source_partitions: int) -> _TopicPlan:
        """Make sure the target topic exists: created with the source's partition count and configs."""
        target_topic = self.config.target_topic(f.flow, topic)
        await self.target.refresh([target_topic])
        tm = self.target.topics.get(target_topic)
        if tm is None or not tm.partitions:
            configs: dict[str, str] = {}
            try:
                entries = await f.source_admin.describe_configs(topic, _COPIED_CONFIGS)
                configs = {k: e.value for k, e in entries.items() if e.value is not None and not e.is_default}
            except KafkaError as e:
                log.warning(
                    "%s: could not read the configs of %s (%s); creating %s with defaults",
                    f.flow.name,
                    topic,
                    e,
                    target_topic,
                )
            rf = self.config.replication_factor or min(3, max(len(self.target.brokers), 1))
            result = await self.target_admin.create_topics(
                [NewTopic(target_topic, source_partitions, rf, configs)], timeout_ms=30000
            )
            error = result.get(target_topic)
            if error is not None and error.code is not ErrorCode.TOPIC_ALREADY_EXISTS:
                raise error
            if error is None:
                log.info(
                    "%s: created %s in the target: %d partition(s), replication factor %d, configs %s",
                    f.flow.name,
                    target_topic,
                    source_partitions,
                    rf,
                    configs or "(defaults)",
                )
            await self.target_admin.wait_for_topic(target_topic, timeout=60)
            tm = self.target.topics.get(target_topic)
        target_partitions = len(tm.partitions) if tm is not None else source_partitions
        plan = _TopicPlan(target_topic, source_partitions, target_partitions)
        if not plan.identity:
            log.warning(
                "%s: %s has %d partition(s) in the source and %s has %d in the target: records are re-partitioned by key",
                f.flow.name,
                topic,
                source_partitions,
                target_topic,
                target_partitions,
            )
        return plan

    # -- copiers -------------------------------------------------------------------------------

    async def _start_copier(self, f: _FlowState, tp: TopicPartition, committed: int | None) -> None:
        stop = asyncio.Event()
        offset = committed if committed is not None else await self._reset_offset(f, tp)
        copier = _Copier(stop, offset, offset if committed is not None else -1)
        if committed is not None and self._fast_path(f, tp[0]):
            target = await asyncio.to_thread(f.group.read_target_offset, tp)
            if target is not None:
                copier.target_end, copier.resume_scan = target, True
        copier.task = asyncio.ensure_future(self._copy(f, tp, copier))
        f.copiers[tp] = copier

    async def _stop_copier(self, f: _FlowState, tp: TopicPartition, *, release: bool) -> None:
        copier = f.copiers.pop(tp)
        copier.stop.set()
        assert copier.task is not None
        try:
            await asyncio.wait_for(asyncio.shield(copier.task), 60)
        except TimeoutError:
            log.warning("%s: copier of %s-%d did not stop within 60s: cancelling it", f.flow.name, *tp)
            copier.task.cancel()
            await asyncio.gather(copier.task, return_exceptions=True)
        if release:
            try:
                await self._commit(f, tp, copier)
                await asyncio.to_thread(f.group.release, tp)
            except Exception as e:
                log.warning("%s: handing over %s-%d: %s", f.flow.name, *tp, e)
        for gauge in (self.metrics.lag, self.metrics.committed):
            try:
                gauge.remove(f.flow.name, tp[0], str(tp[1]))
            except KeyError:
                pass

    async def _reset_offset(self, f: _FlowState, tp: TopicPartition) -> int:
        consumer = Consumer("", cluster=f.source)
        when = EARLIEST if self.config.auto_offset_reset == "earliest" else LATEST
        return (await consumer.offsets_before(tp[0], tp[1], when, 1))[0]

    def _fast_path(self, f: _FlowState, topic: str) -> bool:
        plan = f.plans[topic]
        faults = self.config.drop_every or self.config.duplicate_every
        return plan.identity and not self.config.always_repartition and not faults

    async def _copy(self, f: _FlowState, tp: TopicPartition, c: _Copier) -> None:
        topic, partition = tp
        backoff = 0.1
        name = f.flow.name
        while not c.stop.is_set():
            try:
                if c.resume_scan:
                    # What did the previous owner copy past the committed offset before it stopped?
                    c.copies, _ = await scan_target(self.target, f.plans[topic].target_topic, partition, c.target_end)
                    c.resume_scan = False
                    if c.copies is None:
                        log.warning("%s: %s-%d: too much to scan in the target; resuming at-least-once", name, *tp)
                    c.copies = c.copies or None
                got, failed = await fetch_raw(
                    f.source,
                    [(topic, partition, c.next_offset)],
                    max_bytes=self.config.fetch_max_bytes,
                    max_wait_ms=self.config.fetch_max_wait_ms,
                )
                if tp in failed or tp not in got:
                    await f.source.refresh([topic])
                    raise KafkaError(failed.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR), "fetch failed")
                part = got[tp]
                self.metrics.lag.labels(name, topic, str(partition)).set(max(part.high_watermark - c.next_offset, 0))
                if not part.batches:
                    backoff = 0.1
                    continue
                data = [(h, b) for h, b in part.batches if not h.is_control]
                if data and c.copies is not None:
                    data = self._skip_previous_copies(f, tp, c, data)
                if data:
                    await self._deliver(f, tp, c, data)
                c.next_offset = max(c.next_offset, part.batches[-1][0].next_offset)
                backoff = 0.1
            except OffsetOutOfRangeError:
                # never a silent reset: a gap below the log start is reported (or stops the partition)
                c.next_offset = await self.gaps[name].out_of_range(topic, partition, c.next_offset)
            except (KafkaConnectionError, KafkaTimeoutError, KafkaError, UnknownTopicError) as e:
                log.info("%s: %s-%d: %s; retrying in %.1fs", name, topic, partition, e, backoff)
                try:
                    await asyncio.wait_for(c.stop.wait(), backoff)
                except TimeoutError:
                    pass
                backoff = min(backoff * 2, _BACKOFF_MAX)

    def _skip_previous_copies(
        self, f: _FlowState, tp: TopicPartition, c: _Copier, data: list[tuple[BatchHeader, memoryview]]
    ) -> list[tuple[BatchHeader, memoryview]]:
        """Drop the leading batches the previous owner already copied into the target."""
        assert c.copies is not None
        n, end = skip_copied([as_plain_batch(h, b) for h, b in data], c.copies)
        if n:
            c.target_end = max(c.target_end, end)
            records = sum(h.records_count for h, _ in data[:n])
            self.metrics.skipped.labels(f.flow.name, tp[0]).inc(records)
            log.info(
                "%s: %s-%d: %d batch(es), %d record(s) from offset %d were already copied by the previous owner: skipped",
                f.flow.name,
                *tp,
                n,
                records,
                data[0][0].base_offset,
            )
        if n < len(data):
            c.copies = None  # the rest was never copied: a prefix only, so matching is over
        return data[n:]

    async def _deliver(
        self, f: _FlowState, tp: TopicPartition, c: _Copier, batches: list[tuple[BatchHeader, memoryview]]
    ) -> None:
        """Produce the batches into the target until it acknowledged all of them (acks=all)."""
        plan = f.plans[tp[0]]
        name = f.flow.name
        if self._fast_path(f, tp[0]):
            await self._produce_same_partition(
                f, c, plan.target_topic, tp[1], [as_plain_batch(h, b) for h, b in batches]
            )
        else:
            for partition, payload in self._repartition(f, plan, tp[1], batches).items():
                await self._produce(f, plan.target_topic, partition, payload)
        count = sum(h.records_count for h, _ in batches)
        self.metrics.records.labels(name, tp[0]).inc(count)
        self.metrics.bytes.labels(name, tp[0]).inc(sum(len(b) for _, b in batches))
        newest = max(h.max_timestamp for h, _ in batches)
        if newest > 0:
            self.metrics.latency.labels(name).observe(max(time.time() - newest / 1000.0, 0.0))
            if tp[0] == HEARTBEATS_TOPIC:
                self.heartbeats.acked(name, newest)

    def _repartition(
        self, f: _FlowState, plan: _TopicPlan, source_partition: int, batches: list[tuple[BatchHeader, memoryview]]
    ) -> dict[int, bytes]:
        """Decode, choose each record's target partition as the Java client would, re-encode per
        partition (same codec and timestamp type as the source batch). Applies the test faults."""
        per_partition: dict[int, list[bytes]] = defaultdict(list)
        n = plan.target_partitions
        for _, b in batches:
            header, records = decode_batch(b)
            out: dict[int, list[RecordInput]] = defaultdict(list)
            for r in records:
                f.records_seen += 1
                copies = 1
                if self.config.drop_every and f.records_seen % self.config.drop_every == 0:
                    self.metrics.dropped.labels(f.flow.name).inc()
                    continue
                if self.config.duplicate_every and f.records_seen % self.config.duplicate_every == 0:
                    self.metrics.duplicated.labels(f.flow.name).inc()
                    copies = 2
                target = to_positive(murmur2(r.key)) % n if r.key is not None else source_partition % n
                for _ in range(copies):
                    out[target].append(RecordInput(r.key, r.value, r.timestamp, r.headers))
            for target, recs in out.items():
                per_partition[target].append(
                    encode_batch(recs, compression=header.codec, timestamp_type=1 if header.attributes & 0x08 else 0)
                )
        return {p: b"".join(parts) for p, parts in per_partition.items()}

    async def _produce_same_partition(
        self, f: _FlowState, c: _Copier, topic: str, partition: int, batches: list[bytes | memoryview]
    ) -> None:
        """The fast path's produce: acks=all, retried until acknowledged; before a retry, the batches
        an unanswered attempt did append (found in the target past ``c.target_end``) are dropped,
        so a lost answer does not turn into a duplicate."""
        backoff = 0.1
        while batches:
            try:
                base = await produce_raw(self.target, topic, partition, b"".join(batches), acks=-1)
                c.target_end = base + sum(_span(b) for b in batches)
                return
            except (KafkaConnectionError, KafkaTimeoutError, KafkaError) as e:
                self.metrics.produce_errors.labels(f.flow.name).inc()
                level = logging.INFO if isinstance(e, KafkaError) and e.retriable else logging.WARNING
                log.log(
                    level, "%s: producing to %s-%d: %s; retrying in %.1fs", f.flow.name, topic, partition, e, backoff
                )
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _BACKOFF_MAX)
            try:
                await self.target.refresh([topic])
                if c.target_end >= 0:
                    n, end = await self._find_appended(topic, partition, c.target_end, batches)
                    if n:
                        log.info(
                            "%s: %s-%d: %d of %d batch(es) of the unanswered produce are in the target: not sent again",
                            f.flow.name,
                            topic,
                            partition,
                            n,
                            len(batches),
                        )
                        c.target_end = max(c.target_end, end)
                        batches = batches[n:]
            except (KafkaConnectionError, KafkaTimeoutError, KafkaError):
                pass

    async def _find_appended(
        self, topic: str, partition: int, start: int, batches: list[bytes | memoryview]
    ) -> tuple[int, int]:
        """How many leading ``batches`` an unanswered produce appended (see :func:`skip_copied`):
        scans until all are found or the high watermark stood still for three seconds (a new
        leader's high watermark catches up with what it holds within a follower fetch or two)."""
        last_hw, still = -2, 0
        found = (0, -1)
        for _ in range(60):
            copies, hw = await scan_target(self.target, topic, partition, start)
            found = skip_copied(batches, copies or {})
            if found[0] == len(batches) or copies is None:
                return found
            still = still + 1 if hw == last_hw else 0
            if still >= 3:
                return found
            last_hw = hw
            await asyncio.sleep(1.0)
        return found

    async def _produce(self, f: _FlowState, topic: str, partition: int, payload: bytes) -> None:
        backoff = 0.1
        while True:
            try:
                await produce_raw(self.target, topic, partition, payload, acks=-1)
                return
            except (KafkaConnectionError, KafkaTimeoutError, KafkaError) as e:
                self.metrics.produce_errors.labels(f.flow.name).inc()
                level = logging.INFO if isinstance(e, KafkaError) and e.retriable else logging.WARNING
                log.log(
                    level, "%s: producing to %s-%d: %s; retrying in %.1fs", f.flow.name, topic, partition, e, backoff
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX)
                try:
                    await self.target.refresh([topic])
                except (KafkaConnectionError, KafkaTimeoutError, KafkaError):
                    pass

    # -- offsets -------------------------------------------------------------------------------

    async def _commit(self, f: _FlowState, tp: TopicPartition, c: _Copier) -> None:
        if c.next_offset != c.committed:
            offset = c.next_offset
            # read together (no await between): the target offset that goes with this source offset
            target = c.target_end if c.target_end >= 0 and c.copies is None and not c.resume_scan else None
            await asyncio.to_thread(f.group.commit_offset, tp, offset, target)
            c.committed = offset
            self.metrics.committed.labels(f.flow.name, tp[0], str(tp[1])).set(offset)

    async def _commit_all(self) -> None:
        for f in self.flows:
            for tp, c in list(f.copiers.items()):
                try:
                    await self._commit(f, tp, c)
                except Exception as e:
                    log.warning("%s: committing %s-%d: %s", f.flow.name, *tp, e)

    async def _commit_loop(self, stop: asyncio.Event) -> None:
        interval = self.config.offset_commit_interval_ms / 1000.0
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), interval)
            except TimeoutError:
                pass
            await self._commit_all()

    async def _shutdown(self) -> None:
        for f in self.flows:
            for tp in list(f.copiers):
                await self._stop_copier(f, tp, release=True)
        for writer in self.writers.values():
            await writer.close()
        for f in self.flows:
            await asyncio.to_thread(f.group.stop)
            await f.source.close()
        await self.target.close()


def _threadsafe(loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> Callable[[], None]:
    """A callback for kazoo's thread that sets ``event`` on the loop."""

    def fire() -> None:
        loop.call_soon_threadsafe(event.set)

    return fire
