"""The replica manager: this broker's partitions and their roles, as the controller assigns them.

- LeaderAndIsr makes each listed partition a leader or a follower (only when its leader epoch
  is newer than the one we have), creating the log when needed; followers start fetching from
  their leader (after truncating by leader epoch, see the fetcher).
- StopReplica stops a replica (and deletes its log when asked).
- As leader it shrinks the ISR of followers that have not caught up for
  ``replica.lag.time.max.ms`` and expands it when they catch up, each time with a conditional
  write of the partition state znode (and an ``/isr_change_notification`` for the controller).
  A conflicting write means the controller changed the partition meanwhile: the change is
  dropped and the controller's next LeaderAndIsr decides.
- Leading a partition of ``__consumer_offsets`` makes this broker the coordinator of its groups
  (the group coordinator loads them); following it or losing it hands them on.
- When the ZooKeeper session is lost, every partition stops acting as leader or follower until
  the controller, seeing the broker re-register, tells it again.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import TYPE_CHECKING, Protocol

from kazoo.exceptions import BadVersionError, NoNodeError

from headwater.broker.config import topic_log_config
from headwater.broker.fetch_session import DEFAULT_SLOTS, CachedPartition, FetchSessionCache
from headwater.broker.group.formats import OFFSETS_TOPIC
from headwater.broker.partition import Partition
from headwater.broker.replica_fetcher import FetcherHost, ReplicaFetcherManager
from headwater.broker.txn.formats import TRANSACTION_STATE_TOPIC
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.schema import Message
from headwater.zk import paths as zkpaths
from headwater.zk.notifications import encode_isr_change
from headwater.zk.topics import PartitionState

if TYPE_CHECKING:
    from headwater.broker.metadata_cache import MetadataCache
    from headwater.broker.metrics import BrokerMetrics
    from headwater.broker.storage.clock import Clock
    from headwater.broker.storage.log import Log
    from headwater.broker.storage.log_manager import LogManager
    from headwater.broker.zk import ZooKeeper

log = logging.getLogger(__name__)

#: Kafka's internal topics (Topic.isInternal): their records are never deleted on request
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

TP = tuple[str, int]
ISR_CHANGE_PREFIX = zkpaths.ISR_CHANGE_PREFIX
#: how long ISR changes are gathered into one /isr_change_notification znode
ISR_CHANGE_BATCH_S = 0.05
#: ISR gauges are refreshed at most this often while ISRs change
GAUGES_DEBOUNCE_S = 0.2


class LeadershipListener(Protocol):
    """Told when this broker becomes or stops being leader of a partition of ``__consumer_offsets``
    (the group coordinator: Kafka's onLeadershipChange callbacks)."""

    def on_elected(self, partition: int) -> None: ...

    def on_resigned(self, partition: int) -> None: ...


class TxnLeadershipListener(Protocol):
    """Told when this broker becomes (at which leader epoch: the coordinator epoch) or stops being
    leader of a partition of ``__transaction_state`` (the transaction coordinator)."""

    def on_elected(self, partition: int, leader_epoch: int) -> None: ...

    def on_resigned(self, partition: int) -> None: ...


class ReplicaHost(FetcherHost, Protocol):
    """What the replica manager reaches of the broker it runs in (the fetchers' needs, and more)."""

    cache: MetadataCache  # topic configs, live brokers' endpoints, which partitions exist
    clock: Clock
    stopping: asyncio.Event  # controlled shutdown under way: no new fetching
    zk: ZooKeeper  # the leader's ISR writes and change notifications
    metrics: BrokerMetrics

    @property
    def groups(self) -> LeadershipListener: ...

    @property
    def txns(self) -> TxnLeadershipListener: ...


class ReplicaManager:
    def __init__(self, broker: ReplicaHost) -> None:
        self.broker = broker
        self.broker_id = broker.broker_id
        self.partitions: dict[TP, Partition] = {}
        #: partitions whose log is in a failed log dir (KIP-112): Kafka's OfflinePartition. Produce,
        #: fetch and LeaderAndIsr for them answer KAFKA_STORAGE_ERROR until the broker restarts.
        self.offline_partitions: set[TP] = set()
        self.controller_epoch = 0
        self.fetchers = ReplicaFetcherManager(broker)
        #: Fetch sessions (KIP-227) of the followers and consumers fetching from this broker
        self.fetch_sessions = FetchSessionCache(
            int(broker.config.raw.get("max.incremental.fetch.session.cache.slots", DEFAULT_SLOTS)), broker.purgatory
        )
        self._isr_task: asyncio.Task[None] | None = None
        self._isr_updates: set[asyncio.Task[None]] = set()
        self._isr_changed: set[TP] = set()
        self._isr_flush: asyncio.Task[None] | None = None
        self._gauges_handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._isr_task = asyncio.ensure_future(self._isr_maintenance())

    async def stop(self) -> None:
        if self._isr_task is not None:
            self._isr_task.cancel()
            await asyncio.gather(self._isr_task, return_exceptions=True)
        if self._isr_flush is not None:
            self._isr_flush.cancel()
        if self._gauges_handle is not None:
            self._gauges_handle.cancel()
        await self.fetchers.stop()

    def high_watermark_of(self, tp: TP) -> int | None:
        """This replica's high watermark of ``tp`` (None while it has no replica state for it): the
        limit of retention. Called from the log manager's thread; one dict read, one int read."""
        part = self.partitions.get(tp)
        return None if part is None else part.high_watermark

    @property
    def log_manager(self) -> LogManager | None:
        """This broker's logs (None before start-up loaded them)."""
        return self.broker.log_manager

    def partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def leader_partition(self, topic: str, index: int, leader_epoch: int = -1) -> tuple[Partition, Log]:
        """The partition if this broker leads it at the request's leader epoch (-1: any).

        Raises KafkaError: UNKNOWN_TOPIC_OR_PARTITION for a partition the cluster does not have,
        NOT_LEADER_FOR_PARTITION for one led elsewhere, FENCED/UNKNOWN_LEADER_EPOCH (KIP-320).
        """
        if (topic, index) in self.offline_partitions:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{topic}-{index} is offline on broker {self.broker_id}")
        part = self.partitions.get((topic, index))
        if part is None or not part.is_leader:
            known = self.broker.cache.partition(topic, index) is not None
            raise KafkaError(
                ErrorCode.NOT_LEADER_FOR_PARTITION if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"{topic}-{index} is not led by broker {self.broker_id}",
            )
        log_ = part.require_leader()
        part.check_leader_epoch(leader_epoch)
        return part, log_

    def local_replica(self, topic: str, index: int) -> tuple[Partition, Log]:
        """This broker's replica of the partition, leader or follower (Kafka's debugging consumer,
        replica id -2, reads it). Raises KafkaError as :meth:`leader_partition`, NOT_LEADER_FOR_PARTITION
        when this broker holds no replica of it."""
        if (topic, index) in self.offline_partitions:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{topic}-{index} is offline on broker {self.broker_id}")
        part = self.partitions.get((topic, index))
        if part is None or part.log is None:
            known = self.broker.cache.partition(topic, index) is not None
            raise KafkaError(
                ErrorCode.NOT_LEADER_FOR_PARTITION if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"broker {self.broker_id} holds no replica of {topic}-{index}",
            )
        return part, part.log

    def now_ms(self) -> int:
        return self.broker.clock.monotonic_ms()

    # -- requests from the controller ---------------------------------------------------------------

    def check_controller_epoch(self, epoch: int) -> bool:
        if epoch < self.controller_epoch:
            log.warning("ignoring a request from a controller with epoch %d < %d", epoch, self.controller_epoch)
            return False
        self.controller_epoch = epoch
        return True

    def become_leader_or_follower(
        self, states: list[Message], live_leaders: dict[int, tuple[str, int]]
    ) -> list[Message]:
        errors: list[Message] = []
        assert self.broker.log_manager is not None
        led = followed = stale = failed = 0
        for st in states:
            topic, index = st["topic_name"], st["partition_index"]
            code = ErrorCode.NONE
            part = self.partitions.get((topic, index))
            if (topic, index) in self.offline_partitions:
                code = ErrorCode.KAFKA_STORAGE_ERROR  # the controller learns of the failed log dir from it
                failed += 1
            elif part is not None and st["leader_epoch"] <= part.leader_epoch:
                stale += 1
                log.debug(
                    "%s-%d: ignoring LeaderAndIsr at leader epoch %d (have %d)",
                    topic,
                    index,
                    st["leader_epoch"],
                    part.leader_epoch,
                )
                code = ErrorCode.STALE_CONTROLLER_EPOCH
            elif self.broker_id not in st["replicas"]:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                try:
                    self._apply_state(st, part, live_leaders)
                    if st["leader"] == self.broker_id:
                        led += 1
                    else:
                        followed += 1
                except Exception as e:
                    # One partition this broker cannot host (a log it cannot open or create, a
                    # config its log refuses) is an error for that partition alone: the others in
                    # the request are applied, and the controller gets an answer, not a closed
                    # connection it would retry forever (issue 9, defect 2).
                    if isinstance(e, KafkaError):  # e.g. its log dir is offline: expected, no traceback
                        log.error(
                            "%s-%d: cannot apply LeaderAndIsr at leader epoch %d: %s",
                            topic,
                            index,
                            st["leader_epoch"],
                            e,
                        )
                    else:
                        log.exception(
                            "%s-%d: cannot apply LeaderAndIsr at leader epoch %d", topic, index, st["leader_epoch"]
                        )
                    code = (
                        e.code
                        if isinstance(e, KafkaError)
                        else ErrorCode.KAFKA_STORAGE_ERROR
                        if isinstance(e, OSError)
                        else ErrorCode.UNKNOWN_SERVER_ERROR
                    )
                    if part is None:
                        self.partitions.pop((topic, index), None)
                    failed += 1
            errors.append({"topic_name": topic, "partition_index": index, "error_code": code})
        # Not before the answer: after a failover the gauges of thousands of partitions change
        # (~0.4 s of labelled children at 10,000 partitions), and the controller's UpdateMetadata
        # waits for this answer (issue 26).
        self._update_gauges_soon()
        # One line per request, not per partition (each partition's change is at DEBUG): after a
        # controller failover every broker gets a LeaderAndIsr listing all its partitions.
        log.info(
            "LeaderAndIsr (controller epoch %d): %d partition(s) led, %d followed, %d already at that "
            "leader epoch or newer, %d not hosted here, %d failed",
            self.controller_epoch,
            led,
            followed,
            stale,
            len(states) - led - followed - stale - failed,
            failed,
        )
        return errors

    def _apply_state(self, st: Message, part: Partition | None, live_leaders: dict[int, tuple[str, int]]) -> None:
        """Make this broker leader or follower of one partition, as LeaderAndIsr says."""
        assert self.broker.log_manager is not None
        topic, index = st["topic_name"], st["partition_index"]
        cfg = topic_log_config(self.broker.config.log_defaults, self.broker.cache.config_of(topic))
        log_ = self.broker.log_manager.get_log(topic, index) or self.broker.log_manager.create_log(
            topic, index, cfg, is_new=bool(st.get("is_new", False))
        )
        # every move of its log end or log start offset wakes (and marks dirty for) the fetches
        # watching it: fetch sessions skip the partitions nothing notified (fetch_session.py)
        log_.on_offsets_moved = partial(self.broker.purgatory.notify, (topic, index))
        if part is None:
            part = self.partitions[(topic, index)] = Partition(topic, index, self.broker_id)
            # Where the high watermark was when this broker last checkpointed it (never past the
            # log end: an unclean stop may have lost an unflushed tail), not 0: a restarted leader
            # would otherwise answer ListOffsets and fetches from its log start until its
            # followers fetch again.
            checkpointed = self.broker.log_manager.checkpointed_high_watermark(topic, index)
            if checkpointed is not None:
                part.high_watermark = max(min(checkpointed, log_.log_end_offset), log_.log_start_offset)
        if st["leader"] == self.broker_id:
            self.fetchers.remove_partition((topic, index))
            was_leader = part.is_leader
            part.make_leader(
                log_,
                st["leader_epoch"],
                st["isr"],
                st["replicas"],
                st["partition_epoch"],
                st["controller_epoch"],
                self.now_ms(),
            )
            if topic == OFFSETS_TOPIC and not was_leader:
                self.broker.groups.on_elected(index)
            if topic == TRANSACTION_STATE_TOPIC and not was_leader:
                self.broker.txns.on_elected(index, st["leader_epoch"])
        else:
            if topic == OFFSETS_TOPIC:
                self.broker.groups.on_resigned(index)
            if topic == TRANSACTION_STATE_TOPIC:
                self.broker.txns.on_resigned(index)
            part.make_follower(
                log_,
                st["leader"],
                st["leader_epoch"],
                st["isr"],
                st["replicas"],
                st["partition_epoch"],
                st["controller_epoch"],
            )
            # Kafka's controller names the leaders' endpoints in the request (live_leaders); a leader
            # it did not know alive yet is looked up in the metadata cache, and failing that this
            # partition waits for the endpoint (ReplicaFetcherManager.on_endpoints_known).
            endpoint = live_leaders.get(st["leader"]) or self.leader_endpoint(st["leader"])
            if self.broker.stopping.is_set():
                # In controlled shutdown (where Kafka's controller sends this broker StopReplica):
                # fetching now would bring it back into the ISR the controller just took it out
                # of, and the leader would then count on a broker about to exit.
                self.fetchers.remove_partition((topic, index))
                log.debug("%s-%d: shutting down: not fetching from broker %d", topic, index, st["leader"])
            else:
                self.fetchers.add_partition(part, st["leader"], endpoint)
        self.broker.purgatory.notify((topic, index))

    def leader_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        """Where ``broker_id`` listens for replication, as this broker's metadata cache knows."""
        b = self.broker.cache.brokers.get(broker_id)
        return b.endpoints.get(self.broker.config.inter_broker_listener_name) if b else None

    def on_live_brokers_changed(self) -> None:
        """UpdateMetadata brought a list of live brokers: followers waiting for their leader's
        endpoint start fetching now that it may be known."""
        if self.fetchers.awaiting and not self.broker.stopping.is_set():
            self.fetchers.on_endpoints_known(self.leader_endpoint)

    def stop_replicas(self, tps: list[TP], delete: bool) -> list[Message]:
        out = []
        for tp in tps:
            self.fetchers.remove_partition(tp)
            part = self.partitions.pop(tp, None)
            if part is not None:
                part.make_offline()
            if tp[0] == OFFSETS_TOPIC:
                self.broker.groups.on_resigned(tp[1])
            if tp[0] == TRANSACTION_STATE_TOPIC:
                self.broker.txns.on_resigned(tp[1])
            code = ErrorCode.NONE
            if delete and tp in self.offline_partitions:
                code = ErrorCode.KAFKA_STORAGE_ERROR  # its log is in a failed dir: not deleted
            elif delete and self.broker.log_manager is not None:
                try:
                    if self.broker.log_manager.delete_log(*tp):
                        log.info("deleted log %s-%d", *tp)
                except (OSError, KafkaError) as e:  # the controller retries it (topic deletion)
                    log.error("cannot delete the log of %s-%d: %s", *tp, e)
                    code = ErrorCode.KAFKA_STORAGE_ERROR
            self.broker.purgatory.notify(tp)
            out.append({"topic_name": tp[0], "partition_index": tp[1], "error_code": code})
        self.update_gauges()
        return out

    def handle_log_dir_failure(self, log_dir: str, tps: list[TP]) -> None:
        """The log dir holding ``tps`` failed (KIP-112): they go offline on this broker, as Kafka's
        ReplicaManager.handleLogDirFailure (stop fetching, stop leading, answer KAFKA_STORAGE_ERROR);
        the broker then notifies the controller, which elects other leaders."""
        for tp in tps:
            self.fetchers.remove_partition(tp)
            part = self.partitions.pop(tp, None)
            if part is not None:
                part.make_offline()
            if tp[0] == OFFSETS_TOPIC:
                self.broker.groups.on_resigned(tp[1])
            if tp[0] == TRANSACTION_STATE_TOPIC:
                self.broker.txns.on_resigned(tp[1])
            self.offline_partitions.add(tp)
            self.broker.purgatory.notify(tp)
        log.error("log dir %s failed: %d partition(s) offline on this broker", log_dir, len(tps))
        self.update_gauges()

    def on_session_lost(self) -> None:
        for part in self.partitions.values():
            part.make_offline()
            if part.topic == OFFSETS_TOPIC:
                self.broker.groups.on_resigned(part.index)
            if part.topic == TRANSACTION_STATE_TOPIC:
                self.broker.txns.on_resigned(part.index)
        self.fetchers.remove_all()
        self.broker.purgatory.notify_all()
        log.warning(
            "ZooKeeper session lost: no longer acting as leader or follower for %d partition(s)", len(self.partitions)
        )

    # -- leader: followers' fetches and the ISR --------------------------------------------------------

    def record_follower_fetch(
        self,
        part: Partition,
        replica_id: int,
        fetch_offset: int,
        log_start_offset: int = -1,
        session_entry: CachedPartition | None = None,
    ) -> None:
        # The low watermark can only move when the follower's log start offset does: most fetches
        # (an idle follower's, every round, for each of thousands of partitions) skip computing it
        st = part.followers.get(replica_id)
        start_moves = st is not None and part.log is not None and 0 <= log_start_offset != st.log_start_offset
        before = part.low_watermark() if start_moves else -1
        part.update_follower(replica_id, fetch_offset, self.now_ms(), log_start_offset, session_entry)
        if start_moves and part.low_watermark() != before:
            self.broker.purgatory.notify(part.key)  # a DeleteRecords may wait for it
        moved = part.maybe_increment_high_watermark()
        if part.follower_to_add(replica_id) and not part.isr_update_in_flight:
            task = asyncio.ensure_future(self._update_isr(part, sorted({*part.isr, replica_id}), expand=True))
            self._isr_updates.add(task)
            task.add_done_callback(self._isr_updates.discard)
        if moved:
            self.broker.purgatory.notify(part.key)

    def delete_records(self, topic: str, partition: int, offset: int) -> Partition:
        """DeleteRecords on the leader: move the log start offset to ``offset`` (-1: the high
        watermark), checkpoint it before answering, and return the partition (its
        ``low_watermark()`` says when every in-sync follower followed). Raises KafkaError:
        NOT_LEADER_FOR_PARTITION / UNKNOWN_TOPIC_OR_PARTITION, OFFSET_OUT_OF_RANGE above the high
        watermark or below zero; INVALID_TOPIC_EXCEPTION for an internal topic (``__consumer_offsets``,
        ``__transaction_state``), whoever asks, as Kafka 2.3's ReplicaManager."""
        if topic in INTERNAL_TOPICS:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot delete records of internal topic {topic}")
        part, log_ = self.leader_partition(topic, partition, -1)
        target = part.high_watermark if offset == -1 else offset
        if target < 0 or target > part.high_watermark:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"Cannot delete records of {topic}-{partition} below {offset}: the high watermark is "
                f"{part.high_watermark}",
            )
        if log_.advance_log_start_offset(target, "DeleteRecords"):
            assert self.broker.log_manager is not None
            self.broker.log_manager.checkpoint_log_start_offsets()
        return part

    async def _isr_maintenance(self) -> None:
        lag = self.broker.config.replica_lag_time_max_ms
        while True:
            await asyncio.sleep(max(lag / 2, 50) / 1000.0)
            now = self.now_ms()
            for part in list(self.partitions.values()):
                try:
                    # a synchronous look first: a coroutine per partition and pass would cost more
                    # than the check itself at thousands of partitions
                    if part.is_leader and not part.isr_update_in_flight and part.out_of_sync(now, lag):
                        await self._maintain_isr(part, now, lag)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    # one bad pass over one partition must not end the task for every partition
                    log.exception("%s-%d: ISR maintenance failed; retrying on the next pass", part.topic, part.index)
            self.update_gauges()

    async def _maintain_isr(self, part: Partition, now: int, lag: int) -> None:
        """Shrink the ISR of a partition this broker leads by the followers that fell behind."""
        if not part.is_leader or part.isr_update_in_flight:
            return
        stale = part.out_of_sync(now, lag)
        if stale:
            log.info(
                "%s-%d: shrinking ISR from %s: %s not caught up within replica.lag.time.max.ms=%d",
                part.topic,
                part.index,
                part.isr,
                stale,
                lag,
            )
            await self._update_isr(part, [r for r in part.isr if r not in stale], expand=False)

    async def _update_isr(self, part: Partition, new_isr: list[int], expand: bool) -> None:
        if part.isr_update_in_flight or not part.is_leader:
            return
        part.isr_update_in_flight = True
        if expand:  # the joiner counts for the high watermark from now on (Partition.pending_isr)
            part.pending_isr = tuple(new_isr)
        zk = self.broker.zk
        epoch = part.leader_epoch
        state = PartitionState(self.broker_id, epoch, tuple(new_isr), part.controller_epoch)
        try:
            (result,) = await zk.set_many(
                [(zkpaths.partition_state_path(part.topic, part.index), state.encode(), part.zk_version)]
            )
        finally:
            part.isr_update_in_flight = False
            part.pending_isr = ()
        if isinstance(result, (BadVersionError, NoNodeError)):
            log.info(
                "%s-%d: ISR change to %s skipped: the partition state changed in ZooKeeper",
                part.topic,
                part.index,
                new_isr,
            )
            return
        if isinstance(result, Exception):
            log.warning("%s-%d: ISR change to %s failed: %s", part.topic, part.index, new_isr, result)
            return
        if part.leader_epoch != epoch or not part.is_leader:
            return
        part.zk_version = result.version
        old = part.isr
        part.isr = new_isr
        (self.broker.metrics.isr_expands if expand else self.broker.metrics.isr_shrinks).inc()
        log.info("%s-%d: ISR %s -> %s (zk version %d)", part.topic, part.index, old, new_isr, result.version)
        self._update_gauges_soon()
        self._notify_isr_change(part.key)
        part.maybe_increment_high_watermark()
        self.broker.purgatory.notify(part.key)

    def _notify_isr_change(self, tp: TP) -> None:
        """Tell the controller (``/isr_change_notification``) that ``tp``'s ISR changed.

        Changes are gathered for ISR_CHANGE_BATCH_S and written as one sequential znode listing
        them all (Kafka propagates them in batches too): when a broker rejoins, its leaders expand
        thousands of ISRs at once, and one notification per partition would cost the controller a
        watch event and three ZooKeeper round trips each.
        """
        self._isr_changed.add(tp)
        if self._isr_flush is None or self._isr_flush.done():
            self._isr_flush = asyncio.ensure_future(self._flush_isr_changes())

    async def _flush_isr_changes(self) -> None:
        # Loops until nothing is left: changes made while a notification is being written wait
        # for the next round here (no new task is started while this one runs).
        zk = self.broker.zk
        while self._isr_changed:
            await asyncio.sleep(ISR_CHANGE_BATCH_S)
            changed, self._isr_changed = sorted(self._isr_changed), set()
            (result,) = await zk.create_many(
                [(ISR_CHANGE_PREFIX, encode_isr_change(changed))], makepath=True, sequence=True
            )
            if isinstance(result, Exception):
                log.warning("could not notify the controller of %d ISR change(s): %s", len(changed), result)

    def _update_gauges_soon(self) -> None:
        """One gauge update for a burst of ISR changes: ``update_gauges`` walks every partition, and
        a returning broker makes its leaders change thousands of ISRs in a few seconds."""
        if self._gauges_handle is None:

            def run() -> None:
                self._gauges_handle = None
                self.update_gauges()

            self._gauges_handle = asyncio.get_running_loop().call_later(GAUGES_DEBOUNCE_S, run)

    def update_gauges(self) -> None:
        m = self.broker.metrics
        leaders = [p for p in self.partitions.values() if p.is_leader]
        m.leader_count.set(len(leaders))
        m.partition_count.set(len(self.partitions))
        m.under_replicated.set(sum(1 for p in leaders if len(p.isr) < len(p.replicas)))
        default_min_isr = self.broker.config.min_insync_replicas
        min_isr: dict[str, int] = {}  # per topic, looked up once a pass
        for p in leaders:
            if p.topic not in min_isr:
                min_isr[p.topic] = int(self.broker.cache.config_of(p.topic).get("min.insync.replicas", default_min_isr))
        under_min = {p.key: len(p.isr) < min_isr[p.topic] for p in leaders}
        m.under_min_isr.set(sum(under_min.values()))
        m.set_led_partitions({p.key: (len(p.isr), under_min[p.key]) for p in leaders})
