"""The mirror: every enabled flow's source partitions copied into the target (aggregate) cluster.

Per flow, one :class:`~headwater.mirror.group.ZkGroup` in the source's ZooKeeper decides which
source partitions this process mirrors; each owned partition gets one
:class:`~headwater.mirror.copier.Copier` (fetch from the source, produce into the target), and
each matching topic a :class:`~headwater.mirror.plan.TopicPlan` (its destination topic, created
when missing).

The acknowledged offset is what gets committed to ``/consumers/<group>/offsets`` (every
``offset.commit.interval.ms``, when a partition moves away, and at shutdown), so a crash
re-mirrors at most what was acknowledged since the last commit: duplicates bounded by the commit
interval, never a loss. A partition moving to another process is handed over cleanly: the copier
finishes its in-flight produce, the offset is committed, and only then is the owner node released.

Every copier runs under the services' supervisor (:mod:`headwater.service.supervisor`): a copier
that raises is logged at ERROR, counted and restarted; one that raises FatalError stays stopped;
``/healthz`` answers 503 with the reasons while an owned partition has no live copier, a topic
cannot be planned, or the member has lost touch with its source ZooKeeper (see
:mod:`headwater.mirror.group` for the lease and the commit fencing).

Destination topics are created with the source's partition count and the configs set on the
source topic (less ``config.properties.exclude``), kept in step after (:mod:`headwater.mirror.config_sync`). New source topics matching a flow
are picked up from ZooKeeper's ``/brokers/topics`` watch within seconds, without a restart;
SIGHUP re-reads the topic lists (see :mod:`headwater.mirror.main`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from headwater.client.admin import Admin
from headwater.client.cluster import Cluster
from headwater.client.consumer import Consumer
from headwater.mirror import placement
from headwater.mirror.acl_sync import AclSync
from headwater.mirror.checkpoints import CheckpointEmitter, OffsetSyncs
from headwater.mirror.config import HEARTBEATS_TOPIC, Flow, MirrorConfig
from headwater.mirror.config_sync import ConfigSync
from headwater.mirror.copier import BACKOFF_MAX, STUCK_AFTER_S, Copier, TopicPartition
from headwater.mirror.copies import ScanBudget
from headwater.mirror.fetcher import SourceFetcher
from headwater.mirror.gaps import GapReporter, reporter_for
from headwater.mirror.group import FencedError, ZkGroup, new_consumer_id
from headwater.mirror.heartbeats import Heartbeats
from headwater.mirror.lag import EndOffsets
from headwater.mirror.metrics import MirrorMetrics
from headwater.mirror.plan import TopicPlan, plan_topic
from headwater.mirror.writer import SourceWriter
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.service.supervisor import HealthRegistry, Supervisor, Unit, wait_or_stop

log = logging.getLogger("headwater.mirror")

#: topics planned (target topics created) and partitions claimed at once in a rebalance
CONCURRENT_SETUPS = 16
#: placement evaluations skipped in a row while a partition has no byte rate yet (then counted as 0)
PLACEMENT_WAITS = 3
T = TypeVar("T")


@dataclass
class FlowState:
    flow: Flow
    group: ZkGroup
    source: Cluster
    source_admin: Admin
    fetcher: SourceFetcher
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    plans: dict[str, TopicPlan] = field(default_factory=dict)
    copiers: dict[TopicPartition, Copier] = field(default_factory=dict)
    pending: set[TopicPartition] = field(default_factory=set)  # ours, still held by another member
    records_seen: int = 0  # for the test faults
    healthy_reason: str = "starting"
    #: the answer to OFFSET_OUT_OF_RANGE (gaps.py) and the heartbeats seen in the target (heartbeats.py)
    gaps: GapReporter | None = None
    heartbeats: Heartbeats | None = None
    joined: bool = False  # the group's ZooKeeper session is up (then its lease counts)
    #: MM2's offset syncs of the fast-path copiers (checkpoints.py); None: emit.offset-syncs.enabled = false
    offset_syncs: OffsetSyncs | None = None
    #: the bytes the target acknowledged per source partition, counted by the copiers (never reset)
    copied_bytes: dict[TopicPartition, int] = field(default_factory=dict)
    #: the partitions the last rebalance placed (the leader's input to the load-aware placement)
    partitions: list[TopicPartition] = field(default_factory=list)
    #: the leader's last known byte rate of each partition (a partition that just moved has none
    #: published until its new owner measured it)
    known_rates: dict[TopicPartition, float] = field(default_factory=dict)
    placement_waits: int = 0  # evaluations skipped in a row while some partition had no rate


class Mirror:
    def __init__(self, config: MirrorConfig, metrics: MirrorMetrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or MirrorMetrics()
        target_alias = config.flows[0].target
        target = config.clusters[target_alias]
        self.target = Cluster(
            target.bootstrap, client_id="headwater-mirror", allow_auto_create_topics=False, security=target.security
        )
        self.target_admin = Admin("", cluster=self.target)
        self.flows: list[FlowState] = []
        self.started = False
        #: what /healthz reports beside the flows' shares: copiers down or stuck, topics that cannot be planned
        self.health_registry = HealthRegistry()
        #: every copier runs under it: an exception is logged at ERROR, counted in
        #: headwater_mirror_task_failures_total{flow} and the copier restarted with backoff
        #: resume scans hold their target batches within this (review finding 8)
        self.scan_budget = ScanBudget(config.resume_scan_max_bytes, config.resume_scan_total_max_bytes)
        self.supervisor = Supervisor("mirror", self.health_registry, self.metrics.registry, label_names=("flow",))
        # the mirror's own records in each source: gap events (gaps.py) and heartbeats (heartbeats.py)
        self.writers: dict[str, SourceWriter] = {}
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
        """Healthy once every flow has taken its share (it owns partitions, or none match yet) and
        nothing is wrong: no owned partition without a live copier (failed, restarting, or stuck
        for STUCK_AFTER_S), no topic that cannot be planned, no rebalance failing."""
        if not self.started:
            return False, "starting"
        reasons = self.health_registry.reasons()
        ok = not reasons
        parts = []
        for f in self.flows:
            owned = sorted(f.copiers)
            if f.joined and not f.group.may_produce():
                ok = False
                reasons.append(
                    f"{f.flow.name}: no recent contact with the source ZooKeeper (the session may expire): producing "
                    "and committing paused"
                )
            if f.pending or (not owned and f.plans and f.healthy_reason != "no partitions assigned to this process"):
                ok = False
            parts.append(
                f"{f.flow.name}: {len(owned)} partition(s) owned, {len(f.pending)} pending; {f.healthy_reason}"
            )
        return ok, "; ".join(reasons + parts)

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
                source = Cluster(
                    src.bootstrap, client_id="headwater-mirror", allow_auto_create_topics=False, security=src.security
                )
                fetcher = SourceFetcher(
                    source,
                    max_bytes=self.config.fetch_max_bytes,
                    max_wait_ms=self.config.fetch_max_wait_ms,
                    in_flight=self.config.fetch_max_in_flight,
                    isolation_level=self.config.isolation,
                )
                state = FlowState(flow, group, source, Admin("", cluster=source), fetcher)
                self.flows.append(state)
                tasks.append(asyncio.ensure_future(self._run_flow(state, loop, stop)))
                writer = self.writers[flow.name] = SourceWriter(source, state.source_admin)
                state.gaps = reporter_for(
                    flow.source,
                    flow.target,
                    source,
                    writer,
                    self.metrics,
                    on_data_loss=self.config.on_data_loss,
                    reset_to_latest=self.config.auto_offset_reset == "latest",
                    signing_key=self.config.audit_signing_key,
                    isolation_level=self.config.isolation,
                )
                state.heartbeats = self.heartbeats
                self._start_checkpoint_tasks(state, stop)
                self._start_acl_sync(state, stop)
                self._start_config_sync(state, stop)
                self._start_placement(state, stop)
                self._start_end_offsets(state, stop)
                if self.config.heartbeats_interval_s is not None:
                    # DefaultReplicationPolicy: MM2's heartbeat connector's record in the target's own
                    # heartbeats too (IdentityReplicationPolicy mirrors the source's record there)
                    into_target = None
                    if self.config.policy == "default":
                        into_target = self.writers.get("target") or SourceWriter(self.target, self.target_admin)
                        self.writers["target"] = into_target
                    tasks.append(
                        asyncio.ensure_future(
                            self.heartbeats.emit(flow.source, flow.target, writer, stop, target_writer=into_target)
                        )
                    )
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

    def _start_checkpoint_tasks(self, f: FlowState, stop: asyncio.Event) -> None:
        """MM2's offset syncs (written into the source as the copiers deliver) and checkpoints
        (written into the target every emit.checkpoints.interval.seconds by one member of the
        flow), supervised beside the copiers (see :mod:`headwater.mirror.checkpoints`)."""
        flow, config = f.flow, self.config
        if config.offset_lag_max is None:
            return
        syncs = f.offset_syncs = OffsetSyncs(config.offset_lag_max)
        self.supervisor.start(
            f"{flow.name} offset syncs",
            lambda unit: syncs.write(
                unit,
                f.source,
                f.source_admin,
                config.offset_syncs_topic(flow),
                stop,
                config.offset_syncs_replication_factor,
            ),
            labels={"flow": flow.name},
        )
        if config.checkpoints_interval_s is None:
            return

        async def is_leader() -> bool:
            return await self._is_leader(f)

        src = config.clusters[flow.source]
        emitter = CheckpointEmitter(
            source_alias=flow.source,
            target_alias=flow.target,
            source=f.source,
            source_bootstrap=src.bootstrap,
            source_security=src.security,
            target=self.target,
            target_admin=self.target_admin,
            interval_s=config.checkpoints_interval_s,
            groups=config.groups,
            groups_exclude=config.groups_exclude,
            target_topic=lambda topic: config.target_topic(f.flow, topic),
            mirrors_topic=lambda topic: topic != HEARTBEATS_TOPIC and f.flow.matches(topic),
            is_leader=is_leader,
            syncs_topic=config.offset_syncs_topic(flow),
            checkpoints_topic=config.checkpoints_topic(flow.source),
            replication_factor=config.checkpoints_replication_factor,
            sync_group_offsets_s=config.sync_group_offsets_s,
            target_bootstrap=config.clusters[flow.target].bootstrap,
            target_security=config.clusters[flow.target].security,
            on_latency=lambda c, ms: self.metrics.checkpoint_latency.labels(
                flow.name, c.group, c.topic, str(c.partition)
            ).set(ms),
        )
        self.supervisor.start(
            f"{flow.name} checkpoints", lambda unit: emitter.run(unit, stop), labels={"flow": flow.name}
        )

    async def _is_leader(self, f: FlowState) -> bool:
        """The flow's member with the smallest consumer id: it alone writes checkpoints, syncs ACLs and configs."""
        if not f.joined:
            return False
        members = await asyncio.to_thread(f.group.members)
        return bool(members) and min(members) == f.group.consumer_id

    def _start_acl_sync(self, f: FlowState, stop: asyncio.Event) -> None:
        """sync.topic.acls (see :mod:`headwater.mirror.acl_sync`), supervised beside the copiers."""
        if self.config.acl_sync_interval_s is None:
            return
        sync = AclSync(
            flow=f.flow.name,
            source=f.source,
            target=self.target,
            interval_s=self.config.acl_sync_interval_s,
            mirrors_topic=lambda topic: topic != HEARTBEATS_TOPIC and f.flow.matches(topic),
            target_topic=lambda topic: self.config.target_topic(f.flow, topic),
            is_leader=lambda: self._is_leader(f),
        )
        self.supervisor.start(
            f"{f.flow.name} topic ACLs", lambda unit: sync.run(unit, stop), labels={"flow": f.flow.name}
        )

    def _start_config_sync(self, f: FlowState, stop: asyncio.Event) -> None:
        """sync.topic.configs (see :mod:`headwater.mirror.config_sync`), supervised beside the copiers,
        on the flow's leader, for the topics the flow has planned (its target topics exist)."""
        if self.config.config_sync_interval_s is None:
            return
        sync = ConfigSync(
            flow=f.flow.name,
            source_admin=f.source_admin,
            target_admin=self.target_admin,
            interval_s=self.config.config_sync_interval_s,
            exclude=self.config.config_exclude,
            topics=lambda: {
                t: plan.target_topic for t, plan in f.plans.items() if t != HEARTBEATS_TOPIC and f.flow.matches(t)
            },
            is_leader=lambda: self._is_leader(f),
        )
        self.supervisor.start(
            f"{f.flow.name} topic configs", lambda unit: sync.run(unit, stop), labels={"flow": f.flow.name}
        )

    def _start_end_offsets(self, f: FlowState, stop: asyncio.Event) -> None:
        """The source's end offsets of the partitions this member owns, read every
        end.offsets.refresh.interval.ms for their lag (see :mod:`headwater.mirror.lag`), supervised
        beside the copiers and independent of them."""
        refresh = EndOffsets(
            f.flow.name,
            Consumer("", cluster=f.source, isolation_level=self.config.isolation),
            lambda: {tp: c.set_end_offset for tp, c in f.copiers.items()},
            self.config.end_offsets_refresh_interval_ms / 1000.0,
        )
        self.supervisor.start(
            f"{f.flow.name} end offsets", lambda unit: refresh.run(unit, stop), labels={"flow": f.flow.name}
        )

    def _start_placement(self, f: FlowState, stop: asyncio.Event) -> None:
        """Load-aware placement (see :mod:`headwater.mirror.placement`), supervised beside the copiers:
        every member publishes its partitions' byte rates every half interval; the leader evaluates
        the placement every interval."""
        interval = self.config.placement_interval_s
        rates = placement.ByteRates(interval)

        async def run(unit: Unit) -> None:
            tick = 0
            while not stop.is_set():
                unit.progress()
                await wait_or_stop(stop, interval / 2)
                if stop.is_set() or not f.joined or not f.group.may_produce():
                    continue
                mine = {tp: f.copied_bytes.get(tp, 0) for tp in f.copiers}
                measured = rates.sample(mine)
                for (topic, partition), rate in measured.items():
                    self.metrics.byte_rate.labels(f.flow.name, topic, str(partition)).set(rate)
                if tick > 0:  # the first sample measures nothing
                    await asyncio.to_thread(f.group.publish_rates, measured, interval)
                tick += 1
                if tick % 2 == 1 and tick > 1 and await self._is_leader(f):
                    await self._evaluate_placement(f)

        self.supervisor.start(f"{f.flow.name} placement", run, labels={"flow": f.flow.name})

    async def _evaluate_placement(self, f: FlowState) -> None:
        """The leader's round: every member's published rates (the last known one for a partition
        that just moved), the placement balanced, written when it changed."""
        g = f.group

        def read() -> tuple[
            list[str], dict[str, dict[TopicPartition, float]], set[str], dict[TopicPartition, str], int | None
        ]:
            members, published, topics = g.members(), g.read_rates(), set(g.topics())
            return members, published, topics, *g.read_placement()

        members, published, topics, overrides, version = await asyncio.to_thread(read)
        waiting = sorted(set(members) - set(published))
        if waiting:
            log.debug("%s: placement: no byte rates yet from %s", f.flow.name, ", ".join(waiting))
            return
        for m in members:
            f.known_rates.update(published[m])
        partitions = list(f.partitions)
        placed = set(partitions)
        f.known_rates = {tp: r for tp, r in f.known_rates.items() if tp in placed}
        unknown = placed - set(f.known_rates)
        if unknown and f.placement_waits < PLACEMENT_WAITS:
            # still being claimed (start-up, a hand-over): counted as 0 it could be moved off again at once
            f.placement_waits += 1
            log.debug("%s: placement: no byte rate yet for %d partition(s)", f.flow.name, len(unknown))
            return
        f.placement_waits = 0
        new = placement.place(partitions, members, overrides, f.known_rates, self.config.placement_tolerance)
        # a topic this leader could not plan (yet) keeps its overrides (no churn while it retries); a
        # deleted topic's go
        new |= {tp: m for tp, m in overrides.items() if tp not in placed and tp[0] in topics and m in members}
        if new == overrides:
            return
        if await asyncio.to_thread(g.write_placement, new, version):
            before, after = (placement.effective_owners(partitions, members, o) for o in (overrides, new))
            moved = sorted(tp for tp in partitions if before.get(tp) != after.get(tp))
            loads = {m: sum(f.known_rates.get(tp, 0.0) for tp, o in after.items() if o == m) for m in members}
            log.info(
                "%s: placement by byte rates: moving %s; bytes/s per member now %s",
                f.flow.name,
                ", ".join(f"{t}-{p} to {after[(t, p)]}" for t, p in moved) or "nothing",
                ", ".join(f"{m}: {loads[m]:.0f}" for m in members),
            )

    async def _reload_loop(self, reload: asyncio.Event, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await reload.wait()
            reload.clear()
            for f in self.flows:
                f.changed.set()

    async def _run_flow(self, f: FlowState, loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
        """Join the group (retrying while the source is unreachable), then rebalance on every change."""
        backoff = 0.5
        while not stop.is_set():
            try:
                await asyncio.to_thread(f.group.start, _threadsafe(loop, f.changed))
                break
            except Exception as e:
                f.healthy_reason = f"source ZooKeeper {f.group.zk_connect} unreachable: {e}"
                self.health_registry.set_problem(f"{f.flow.name}: joining the group", f.healthy_reason)
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
                backoff = min(backoff * 2, BACKOFF_MAX)
        self.health_registry.clear_problem(f"{f.flow.name}: joining the group")
        f.joined = True
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
                self.health_registry.clear_problem(f"{f.flow.name}: rebalance")
            except Exception as e:  # the source ZooKeeper is unreachable: keep trying, keep other flows going
                f.healthy_reason = f"rebalance failed: {e}"
                self.health_registry.set_problem(f"{f.flow.name}: rebalance", f"failed, retrying: {e}")
                log.warning("%s: rebalance failed (%s); retrying", f.flow.name, e)
                await asyncio.sleep(1.0)
                f.changed.set()

    async def _rebalance(self, f: FlowState) -> None:
        g = f.group
        if g.session_lost:
            log.warning("%s: ZooKeeper session lost: stopping every copier and registering again", f.flow.name)
            await self._stop_copiers(f, list(f.copiers), release=False)
            await asyncio.to_thread(g.register)
        members, topics, deleting, overrides = await asyncio.to_thread(
            lambda: (g.members(), g.topics(), g.deleting(), g.read_placement()[0])
        )
        wanted = [t for t in topics if f.flow.matches(t) and t not in deleting]
        # one thread hop for every topic's partition count, then the topics planned (the target
        # topics created) CONCURRENT_SETUPS at a time: with hundreds of topics, one after the other
        # was most of the start-up (docs/performance.md, "The mirror with 2,000 partitions")
        counts = await asyncio.to_thread(lambda: [(t, len(g.partitions(t))) for t in wanted])
        counts = [(t, n) for t, n in counts if n > 0]
        plans = await _bounded(self._plan(f, t, n) for t, n in counts)
        partitions: list[TopicPartition] = []
        for (t, _), plan in zip(counts, plans, strict=True):
            if plan is not None:
                partitions.extend((t, p) for p in range(plan.mirrored_partitions))
        if g.consumer_id not in members:
            members = sorted({*members, g.consumer_id})  # our registration is on its way
        f.partitions = partitions
        mine = placement.owned(partitions, members, overrides, g.consumer_id)
        before = set(f.copiers)
        await self._stop_copiers(f, sorted(before - mine), release=True)
        f.pending &= mine
        await _bounded(self._claim(f, tp) for tp in sorted(mine - set(f.copiers)))
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

    async def _plan(self, f: FlowState, topic: str, n: int) -> TopicPlan | None:
        """The topic's plan for ``n`` source partitions. A topic that cannot be planned (the target
        refuses to create it, or cannot be reached) is reported (ERROR, /healthz) and left out of
        this rebalance -- the other topics go on -- or keeps its previous plan if it had one."""
        previous = f.plans.get(topic)
        if previous is not None and previous.source_partitions == n and not previous.target_short:
            return previous
        key = f"{f.flow.name}: topic {topic}"
        try:
            plan = await self._plan_topic(f, topic, n)
            if plan.target_partitions < n and (
                (previous is not None and previous.identity)
                or await asyncio.to_thread(f.group.has_target_offsets, topic)
            ):
                plan.target_short = True  # it was mirrored partition for partition: keep that
                plan = await self._grow_target(f, topic, plan)
        except Exception as e:
            self.health_registry.set_problem(key, f"cannot be mirrored (retrying): {type(e).__name__}: {e}")
            self.metrics.plan_failures.labels(f.flow.name, topic).inc()
            return previous
        self.health_registry.clear_problem(key)
        self._report_partition_counts(f, topic, plan)
        if not plan.identity and (previous is None or previous.identity):
            log.warning(
                "%s: %s has %d partition(s) in the source and %s has %d in the target: records are re-partitioned "
                "by key",
                f.flow.name,
                topic,
                plan.source_partitions,
                plan.target_topic,
                plan.target_partitions,
            )
        f.plans[topic] = plan
        return plan

    async def _grow_target(self, f: FlowState, topic: str, plan: TopicPlan) -> TopicPlan:
        """The source topic gained partitions: add them to the target topic (CreatePartitions, as
        MM2 does), so they are mirrored partition for partition like the others. Returns the new
        plan, or ``plan`` (still short: reported, retried at the next rebalance) when the target
        refuses or does not show them yet."""
        n = plan.source_partitions
        try:
            result = await self.target_admin.create_partitions({plan.target_topic: n}, timeout_ms=30000)
            error = result.get(plan.target_topic)
            # INVALID_PARTITIONS: it already has them (another mirror process grew it first)
            if error is not None and error.code is not ErrorCode.INVALID_PARTITIONS:
                raise error
            grown = await self._plan_topic(f, topic, n)
        except (KafkaError, OSError, TimeoutError) as e:  # a refusal, the target unreachable or slow
            log.error(
                "%s: could not add partitions to %s in the target to match the source's %d: %s: %s",
                f.flow.name,
                plan.target_topic,
                n,
                type(e).__name__,
                e,
            )
            return plan
        if grown.target_partitions < n:
            return plan
        if grown.target_partitions == n and error is None:
            log.info(
                "%s: %s gained partitions in the source: added partitions %d..%d to %s in the target",
                f.flow.name,
                topic,
                plan.target_partitions,
                n - 1,
                plan.target_topic,
            )
        return grown

    def _report_partition_counts(self, f: FlowState, topic: str, plan: TopicPlan) -> None:
        key = f"{f.flow.name}: topic {topic} partitions"
        missing = plan.source_partitions - plan.target_partitions if plan.target_short else 0
        self.metrics.partition_count_mismatch.labels(f.flow.name, topic).set(missing)
        if missing:
            self.health_registry.set_problem(
                key,
                f"the source has {plan.source_partitions} partition(s), the target topic {plan.target_topic} "
                f"{plan.target_partitions}: source partitions {plan.target_partitions}..{plan.source_partitions - 1} "
                f"are NOT mirrored (the others keep their partition numbers); add partitions to {plan.target_topic} "
                f"in the target (kafka-topics --alter --partitions {plan.source_partitions})",
            )
        else:
            self.health_registry.clear_problem(key)

    async def _plan_topic(self, f: FlowState, topic: str, source_partitions: int) -> TopicPlan:
        return await plan_topic(
            self.config, self.target, self.target_admin, f.source_admin, f.flow, topic, source_partitions
        )

    # -- copiers -------------------------------------------------------------------------------

    async def _claim(self, f: FlowState, tp: TopicPartition) -> None:
        """Claim the partition and start its copier, or leave it pending while another member holds
        it. The ZooKeeper round trips of one claim (owner node, offset node, target offset) run in
        one thread hop; several claims run at once (kazoo pipelines them on its connection)."""
        g = f.group

        def claim() -> tuple[bool, int | None, int | None]:
            if not g.claim(tp):
                return False, None, None
            committed = g.take_over(tp)
            target = g.read_target_offset(tp) if committed is not None and committed >= 0 else None
            return True, committed, target

        claimed, committed, target = await asyncio.to_thread(claim)
        if claimed:
            f.pending.discard(tp)
            await self._start_copier(f, tp, committed, target)
        else:
            f.pending.add(tp)

    async def _start_copier(
        self, f: FlowState, tp: TopicPartition, committed: int | None, target: int | None = None
    ) -> None:
        """Start the partition's copier under the supervisor (from ``auto.offset.reset`` when
        nothing is committed: the copier looks it up itself, supervised). ``target``: the target
        offset committed with ``committed`` (read by :meth:`_claim`)."""
        offset = committed if committed is not None and committed >= 0 else -1
        copier = Copier(
            f,
            tp,
            config=self.config,
            target=self.target,
            metrics=self.metrics,
            next_offset=offset,
            committed=offset,
            scan_budget=self.scan_budget,
        )
        if offset >= 0 and copier.fast_path() and target is not None:
            copier.target_end, copier.resume_scan = target, True
        f.copiers[tp] = copier
        self.supervisor.start(
            copier.unit_name,
            copier.run,
            labels={"flow": f.flow.name},
            stuck_after_s=STUCK_AFTER_S,
            detail=copier.describe,
        )

    async def _stop_copiers(self, f: FlowState, tps: list[TopicPartition], *, release: bool) -> None:
        """Stop several copiers at once: each finishes its in-flight produce at the same time as
        the others, so a hand-over waits for the slowest, not for the sum."""
        for tp in tps:
            f.copiers[tp].stop.set()
        await asyncio.gather(*(self._stop_copier(f, tp, release=release) for tp in tps))

    async def _stop_copier(self, f: FlowState, tp: TopicPartition, *, release: bool) -> None:
        """Stop the copier (it finishes its in-flight produce), then, when handing the partition
        over, commit its acknowledged offset and release the owner node. Never raises: a copier
        that failed, or a commit that fails, does not hold up the hand-over of the others."""
        copier = f.copiers.pop(tp)
        copier.stop.set()
        unit = self.supervisor.unit(copier.unit_name)
        running = unit is not None and unit.state == "running"  # not failed, not in a restart's backoff
        if running and not await self.supervisor.join(copier.unit_name, 60):
            log.warning("%s: copier of %s-%d did not stop within 60s: cancelling it", f.flow.name, *tp)
        await self.supervisor.stop(copier.unit_name)
        if release and not f.group.may_produce():
            # No live session: a commit could not be fenced (and would wait for ZooKeeper forever);
            # the owner node goes with the session. The next owner resumes at the last commit.
            log.warning(
                "%s: %s-%d stopped without a commit: no live session with the source ZooKeeper (offset %d not "
                "committed; %d is)",
                f.flow.name,
                *tp,
                copier.next_offset,
                copier.committed,
            )
        elif release:
            try:
                await self._commit(f, tp, copier)
            except Exception as e:
                log.warning("%s: handing over %s-%d: commit failed: %s", f.flow.name, *tp, e)
            try:
                await asyncio.to_thread(f.group.release, tp)
            except Exception as e:
                log.warning("%s: handing over %s-%d: releasing the owner node failed: %s", f.flow.name, *tp, e)
        for gauge in (
            self.metrics.lag,
            self.metrics.committed,
            self.metrics.record_age,
            self.metrics.replication_latency,
            self.metrics.byte_rate,
        ):
            try:
                gauge.remove(f.flow.name, tp[0], str(tp[1]))
            except KeyError:
                pass

    # -- offsets -------------------------------------------------------------------------------

    async def _commit(self, f: FlowState, tp: TopicPartition, c: Copier) -> None:
        if c.next_offset >= 0 and c.next_offset != c.committed:
            offset = c.next_offset
            # read together (no await between): the target offset that goes with this source offset
            target = c.target_end if c.target_end >= 0 and c.copies is None and not c.resume_scan else None
            await asyncio.to_thread(f.group.commit_offset, tp, offset, target)
            c.committed = offset
            self.metrics.committed.labels(f.flow.name, tp[0], str(tp[1])).set(offset)

    async def _commit_all(self) -> None:
        for f in self.flows:
            if not f.group.may_produce():
                continue  # the session may expire: the next owner's offsets are not ours to write
            for tp, c in list(f.copiers.items()):
                try:
                    await self._commit(f, tp, c)
                except FencedError as e:
                    # the expected end of a copier whose partition moved in a rebalance (released
                    # by this member or taken over by another): nothing is lost, the new owner
                    # resumes from the offsets committed so far
                    log.warning("%s: %s: handing %s-%d over, stopping its copier", f.flow.name, e, *tp)
                    c.stop.set()
                    f.changed.set()
                except Exception as e:
                    log.warning("%s: committing %s-%d: %s", f.flow.name, *tp, e)

    async def _commit_loop(self, stop: asyncio.Event) -> None:
        interval = self.config.offset_commit_interval_ms / 1000.0
        while not stop.is_set():
            await wait_or_stop(stop, interval)
            await self._commit_all()

    async def _shutdown(self) -> None:
        for f in self.flows:
            await self._stop_copiers(f, list(f.copiers), release=True)
        await self.supervisor.stop_all()
        for writer in self.writers.values():
            await writer.close()
        for f in self.flows:
            try:
                await asyncio.to_thread(f.group.stop)
            except Exception as e:
                log.warning("%s: leaving the group: %s", f.flow.name, e)
            await f.fetcher.close()
            await f.source.close()
        await self.target.close()


async def _bounded(aws: Iterable[Awaitable[T]], limit: int = CONCURRENT_SETUPS) -> list[T]:
    """Await ``aws`` at most ``limit`` at a time; their results in order. Every one runs to its end
    before the first exception (if any) is raised, so none is left running behind a failed rebalance."""
    semaphore = asyncio.Semaphore(limit)

    async def one(aw: Awaitable[T]) -> T:
        async with semaphore:
            return await aw

    results = await asyncio.gather(*(one(aw) for aw in aws), return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results  # type: ignore[return-value]


def _threadsafe(loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> Callable[[], None]:
    """A callback for kazoo's thread that sets ``event`` on the loop."""

    def fire() -> None:
        loop.call_soon_threadsafe(event.set)

    return fire
