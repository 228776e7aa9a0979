"""The controller (Kafka's ZooKeeper-era KafkaController).

Election: every broker watches ``/controller``; when it is absent each tries to create it
(ephemeral, ``{"version":1,"brokerid":N,"timestamp":...}``). The winner increments
``/controller_epoch`` with a conditional (versioned) write, so a new controller always has a
higher epoch; brokers ignore requests carrying an older one. A controller whose ZooKeeper
session is lost, or that sees another controller, resigns.

The controller keeps a context (live brokers, replica assignments, partition states) read from
ZooKeeper and reacts, one event at a time on one task, to:

- brokers joining / leaving / bouncing (``/brokers/ids``): elect new leaders from the ISR for
  partitions that lost theirs, remove dead replicas from ISRs, tell the replicas
  (LeaderAndIsr) and every broker (UpdateMetadata);
- new topics (``/brokers/topics``): create each partition's state (leader = first live replica,
  ISR = live replicas, leader epoch 0);
- partitions added to a topic (CreatePartitions rewrites ``/brokers/topics/<t>``, watched per
  topic as Kafka's PartitionModifications handler does): the same for the new partitions;
- deletions (``/admin/delete_topics``): controller/deletion.py, completed only once every replica
  deleted its log (a replica on a broker that is down deletes when it comes back);
- ISR changes made by leaders (``/isr_change_notification``): UpdateMetadata;
- preferred leader election (periodically when ``auto.leader.rebalance.enable``, on
  ``/admin/preferred_replica_election`` and on ElectLeaders);
- partition reassignment (``/admin/reassign_partitions``, controller/reassignment.py);
- controlled shutdown requests: move leadership off the broker before it exits.

Every partition state change is a conditional write on the state znode's version; a conflict
(a leader changed the ISR meanwhile) re-reads the state and re-applies the change.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from headwater.broker.controller import requests as build
from headwater.broker.controller.channel import ControllerChannel
from headwater.broker.controller.deletion import TopicDeletion
from headwater.broker.controller.election import LeaderAndIsr, offline_leader, preferred_leader, shutdown_leader
from headwater.broker.controller.log_dirs import LogDirFailures
from headwater.broker.controller.reassignment import PartitionReassigner
from headwater.broker.metadata_cache import BrokerInfo, parse_broker_registration
from headwater.broker.zk import CheckVersionFailed
from headwater.protocol.apis import LEADER_AND_ISR, UPDATE_METADATA
from headwater.protocol.errors import ErrorCode
from headwater.zk import controller as zkcontroller
from headwater.zk import paths as zkpaths
from headwater.zk import topics as zktopics
from headwater.zk.admin import decode_partition_list
from headwater.zk.json import ZnodeFormatError
from headwater.zk.notifications import decode_isr_change

if TYPE_CHECKING:
    from headwater.broker.config import BrokerConfig
    from headwater.broker.metadata_cache import MetadataCache
    from headwater.broker.metrics import BrokerMetrics
    from headwater.broker.zk import ZooKeeper

log = logging.getLogger(__name__)

TP = tuple[str, int]
ISR_CHANGE = zkpaths.ISR_CHANGE_NOTIFICATION
PREFERRED_ELECTION = zkpaths.PREFERRED_REPLICA_ELECTION
#: seconds between tries of a partition state znode that could not be written
_STATE_RETRY_S = 2.0


class ControllerHost(Protocol):
    """What the controller reaches of the broker it runs in."""

    broker_id: int
    config: BrokerConfig
    cache: MetadataCache
    metrics: BrokerMetrics
    zk: ZooKeeper
    stopping: asyncio.Event


@dataclass
class ControllerContext:
    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    broker_epochs: dict[int, int] = field(default_factory=dict)
    assignments: dict[str, dict[int, list[int]]] = field(default_factory=dict)
    states: dict[TP, LeaderAndIsr] = field(default_factory=dict)
    shutting_down: set[int] = field(default_factory=set)
    watched_topics: set[str] = field(default_factory=set)  # /brokers/topics/<t> data watches of this incarnation
    #: partitions found without a live leader that no election could fix (Kafka's OfflinePartition):
    #: the next election round elects them even if their recorded leader has come back meanwhile
    offline: set[TP] = field(default_factory=set)
    #: broker -> its replicas on a failed log dir (KIP-112, controller/log_dirs.py), as its LeaderAndIsr
    #: answers said; forgotten when the broker leaves or re-registers
    offline_replicas: dict[int, set[TP]] = field(default_factory=dict)

    @property
    def live(self) -> set[int]:
        return set(self.brokers) - self.shutting_down

    def live_for(self, tp: TP) -> set[int]:
        """The live brokers whose replica of ``tp`` is online (not on a failed log dir)."""
        live = self.live
        if not self.offline_replicas:
            return live
        return {b for b in live if tp not in self.offline_replicas.get(b, ())}

    def replicas(self, tp: TP) -> list[int]:
        return self.assignments.get(tp[0], {}).get(tp[1], [])

    def partitions(self) -> list[TP]:
        return [(t, p) for t, parts in self.assignments.items() for p in parts]

    def partitions_on(self, broker_id: int) -> list[TP]:
        return [tp for tp in self.partitions() if broker_id in self.replicas(tp)]


class Controller:
    def __init__(self, broker: ControllerHost) -> None:
        self.broker = broker
        self.zk = broker.zk
        self.broker_id = broker.broker_id
        self.epoch = 0
        self.epoch_zk_version = -1
        self.active = False
        self.ctx = ControllerContext()
        self.channel: ControllerChannel | None = None
        self._events: asyncio.Queue[Callable[[], Awaitable[None]]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._periodic: asyncio.Task[None] | None = None
        # partitions whose state znode could not be written (ZooKeeper away for a moment): tried
        # again after _STATE_RETRY_S until written (see _create_missing_states)
        self._unwritten_states: set[TP] = set()
        self._state_retry: asyncio.Task[None] | None = None
        self._generation = 0  # bumps on every resignation; stale watch callbacks check it
        self.reassigner = PartitionReassigner(self)
        self.deletion = TopicDeletion(self)
        self.log_dirs = LogDirFailures(self)

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())
        self.enqueue(self._elect)

    async def stop(self) -> None:
        await self._resign()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    @property
    def generation(self) -> int:
        """Bumps on every election and resignation: a callback from an older incarnation is stale."""
        return self._generation

    def enqueue(self, event: Callable[[], Awaitable[None]]) -> None:
        self._events.put_nowait(event)

    async def _run(self) -> None:
        while True:
            event = await self._events.get()
            try:
                await event()
            except asyncio.CancelledError:
                raise
            except CheckVersionFailed as e:
                await self._controller_moved(e)
            except Exception:
                log.exception("controller event %s failed", getattr(event, "__name__", event))

    async def _controller_moved(self, e: CheckVersionFailed) -> None:
        """Kafka's ControllerMovedException: a newer controller epoch exists, so this broker is no
        longer the controller, whatever its /controller watch has said so far."""
        log.warning("[Controller id=%d] controller moved (%s): resigning", self.broker_id, e)
        await self._resign()

    def on_controller_change(self, controller_id: int) -> None:
        """From the /controller watch (every broker)."""
        if controller_id == -1:
            self.enqueue(self._elect)
        elif controller_id != self.broker_id and self.active:
            self.enqueue(self._resign)

    def on_session_lost(self) -> None:
        self.enqueue(self._resign)

    def on_session_reconnected(self) -> None:
        self.enqueue(self._elect)

    # -- election ------------------------------------------------------------------------------

    async def _elect(self) -> None:
        if self.active or self.broker.stopping.is_set():
            return
        value = zkcontroller.encode_controller(self.broker_id, int(time.time() * 1000))
        try:
            epoch, version = await self._read_epoch()
            # One transaction: the epoch moves up exactly when /controller is ours, so nobody ever
            # sees a new controller with the old epoch (as Kafka's registerControllerAndIncrementControllerEpoch).
            tx = self.zk.client.transaction()
            tx.set_data(zkpaths.CONTROLLER_EPOCH, zkcontroller.encode_epoch(epoch + 1), version=version)
            tx.create(zkpaths.CONTROLLER, value, ephemeral=True)
            results = await self.zk.call(tx.commit)
        except Exception as e:
            log.warning("controller election failed: %s", e)
            return
        if any(isinstance(r, Exception) for r in results):
            return  # another broker is controller (NodeExists) or won the race to the epoch (BadVersion)
        self.epoch, self.epoch_zk_version = epoch + 1, results[0].version
        self.active = True
        self._generation += 1
        log.info("[Controller id=%d] elected controller with epoch %d", self.broker_id, self.epoch)
        self.broker.metrics.active_controller.set(1)
        self.channel = ControllerChannel(f"controller-{self.broker_id}", self.broker.config.inter_broker_security)
        await self._on_became_controller()

    async def _read_epoch(self) -> tuple[int, int]:
        """(controller epoch, its znode version); the znode is created at 0 the first time."""
        try:
            data, stat = await self.zk.call(self.zk.client.get, zkpaths.CONTROLLER_EPOCH)
        except NoNodeError:
            try:
                await self.zk.call(self.zk.client.create, zkpaths.CONTROLLER_EPOCH, zkcontroller.encode_epoch(0))
            except NodeExistsError:
                pass
            data, stat = await self.zk.call(self.zk.client.get, zkpaths.CONTROLLER_EPOCH)
        return zkcontroller.decode_epoch(data), stat.version

    async def _delete_controller_znode(self) -> None:
        try:
            data, stat = await self.zk.call(self.zk.client.get, zkpaths.CONTROLLER)
            if zkcontroller.decode_controller(data) == self.broker_id:
                await self.zk.call(self.zk.client.delete, zkpaths.CONTROLLER, version=stat.version)
        except Exception:
            pass

    async def _resign(self) -> None:
        if not self.active:
            return
        log.info("[Controller id=%d] resigning (epoch %d)", self.broker_id, self.epoch)
        self.active = False
        self._generation += 1
        self.broker.metrics.active_controller.set(0)
        if self._periodic is not None:
            self._periodic.cancel()
            self._periodic = None
        if self._state_retry is not None:
            self._state_retry.cancel()
            self._state_retry = None
        self._unwritten_states.clear()
        self.reassigner.stop()
        self.deletion.reset()
        if self.channel is not None:
            await self.channel.close()
            self.channel = None
        self.ctx = ControllerContext()

    async def resign_and_release(self) -> None:
        """On shutdown: stop being controller and free /controller for the next one."""
        was_active = self.active
        await self._resign()
        if was_active:
            await self._delete_controller_znode()

    def _watch_children(self, path: str, event: Callable[[], Awaitable[None]]) -> None:
        """Enqueue ``event`` whenever the children of ``path`` change, while this incarnation lasts."""
        generation = self._generation
        loop = self.zk.loop

        def on_change(_children: list[str]) -> bool | None:  # kazoo thread
            if generation != self._generation or loop.is_closed():
                return False  # a stale controller incarnation: stop watching
            loop.call_soon_threadsafe(self.enqueue, event)
            return None

        self.zk.start_watch(self.zk.client.ChildrenWatch, path, on_change)

    def _watch_data(self, path: str, callback: Callable[[bytes | None, Any], None]) -> None:
        generation = self._generation
        loop = self.zk.loop

        def on_change(data: bytes | None, stat: Any, *_: Any) -> bool | None:  # kazoo thread
            if generation != self._generation or loop.is_closed():
                return False
            loop.call_soon_threadsafe(callback, data, stat)
            return None

        self.zk.start_watch(self.zk.client.DataWatch, path, on_change)

    # -- becoming controller -------------------------------------------------------------------------

    async def _on_became_controller(self) -> None:
        for path in (ISR_CHANGE, zkpaths.DELETE_TOPICS, zkpaths.LOG_DIR_EVENT_NOTIFICATION):
            await self.zk.call(self.zk.client.ensure_path, path)
        await self._load_brokers()
        for b in self.ctx.brokers.values():
            self._connect(b)
        # The topics' watches are set once the new states are sent: each costs a ZooKeeper read in
        # a worker thread, and hundreds of them would compete with the elections for the GIL. A
        # partition added meanwhile is still seen: a new watch reports the assignment it finds.
        await self._load_topics(list(await self.zk.children(zkpaths.BROKER_TOPICS)), watch=False)
        # topics marked for deletion leave the context before anything is elected or sent for them
        await self.deletion.on_marks_changed()
        # partitions without a state (topics created while there was no controller)
        await self._create_missing_states(self.ctx.partitions())
        elected = await self._elect_offline_partitions()
        # The new leaders go out first (issue 26): the ISR changes below are a ZooKeeper write per
        # partition the dead brokers followed, and the partitions without a leader should not wait
        # for them. An elected partition's ISR already holds only live brokers.
        self._send_new_states(elected, set(self.ctx.brokers))
        # Brokers that died before this controller took over (the previous controller among them)
        # leave the ISRs now, as they would have had a controller seen them go.
        gone = {r for state in self.ctx.states.values() for r in state.isr if r not in self.ctx.brokers}
        if gone:
            await self._remove_from_isrs(gone)
        sent = set(elected)
        self._send_leader_and_isr([tp for tp in self.ctx.partitions() if tp not in sent], set(self.ctx.brokers))
        self._send_update_metadata(set(self.ctx.brokers), self.ctx.partitions())
        for t in list(self.ctx.assignments):
            self._watch_topic(t)
        self._watch_children(zkpaths.BROKER_IDS, self._on_broker_change)
        self._watch_children(zkpaths.BROKER_TOPICS, self._on_topic_change)
        self._watch_children(zkpaths.DELETE_TOPICS, self._on_delete_topics)
        self._watch_children(ISR_CHANGE, self._on_isr_change)
        self._watch_children(zkpaths.LOG_DIR_EVENT_NOTIFICATION, self.log_dirs.on_notifications)
        self._watch_data(PREFERRED_ELECTION, self._on_preferred_node)
        self.reassigner.start()
        if self.broker.config.auto_leader_rebalance_enable:
            self._periodic = asyncio.ensure_future(self._periodic_preferred_election())

    async def _load_brokers(self) -> dict[int, int]:
        """Read every registration; returns broker id -> czxid (the broker epoch)."""
        brokers: dict[int, BrokerInfo] = {}
        epochs: dict[int, int] = {}
        for child in await self.zk.children(zkpaths.BROKER_IDS):
            if not child.isdigit():
                continue
            got = await self.zk.get_data(zkpaths.broker_path(int(child)))
            if got is None:
                continue
            info = parse_broker_registration(int(child), got[0])
            if info is not None:
                brokers[info.broker_id] = info
                epochs[info.broker_id] = got[1].czxid
        self.ctx.brokers = brokers
        self.ctx.broker_epochs = epochs
        return epochs

    async def _load_topics(self, topics: list[str], watch: bool = True) -> None:
        """Read the topics' assignments, then every partition's state: each set pipelined (issue 26)."""
        loaded: list[str] = []
        paths = [zkpaths.topic_path(t) for t in topics]
        for t, got in zip(
            topics, await self.zk.get_many(paths, decode=partial(zktopics.decode_assignment, "")), strict=True
        ):
            if got is None:
                continue
            self.ctx.assignments[t] = got[0].partitions
            loaded.append(t)
        tps = [(t, p) for t in loaded for p in self.ctx.assignments[t]]
        for tp, state in zip(tps, await self._read_states(tps), strict=True):
            if state is not None:
                self.ctx.states[tp] = state
        if watch:
            for t in loaded:
                self._watch_topic(t)

    def _watch_topic(self, topic: str) -> None:
        """Watch ``/brokers/topics/<topic>`` for partitions added to it, while the topic and this incarnation last."""
        if topic in self.ctx.watched_topics:
            return
        self.ctx.watched_topics.add(topic)
        generation = self._generation
        loop = self.zk.loop

        def on_change(data: bytes | None, stat: Any, *_: Any) -> bool | None:  # kazoo thread
            if generation != self._generation or loop.is_closed():
                return False
            if stat is None:  # the topic was deleted: a recreated one gets a new watch
                loop.call_soon_threadsafe(self.ctx.watched_topics.discard, topic)
                return False
            try:
                value: zktopics.TopicAssignment | None = zktopics.decode_assignment(topic, data)
            except ZnodeFormatError as e:
                log.warning("[Controller id=%d] unreadable assignment of topic %s: %s", self.broker_id, topic, e)
                value = None

            async def event() -> None:
                if value is not None:
                    await self._on_partitions_modified(topic, value)

            loop.call_soon_threadsafe(self.enqueue, event)
            return None

        self.zk.start_watch(self.zk.client.DataWatch, zkpaths.topic_path(topic), on_change)

    async def _on_partitions_modified(self, topic: str, value: zktopics.TopicAssignment) -> None:
        if not self.active or topic not in self.ctx.assignments:
            return
        known = self.ctx.assignments[topic]
        added = {p: rs for p, rs in value.partitions.items() if p not in known}
        if not added:
            return  # Kafka 2.3 ignores changes to existing partitions here (that is reassignment's job)
        known.update(added)
        partitions = [(topic, p) for p in sorted(added)]
        await self._create_missing_states(partitions)
        ready = [tp for tp in partitions if tp in self.ctx.states]
        log.info("[Controller id=%d] topic %s: new partitions %s", self.broker_id, topic, sorted(added))
        self._send_leader_and_isr(ready, self.ctx.live, is_new=True)
        self._send_update_metadata(set(self.ctx.brokers), ready)

    async def _read_state(self, tp: TP) -> LeaderAndIsr | None:
        return (await self._read_states([tp]))[0]

    async def _read_states(self, tps: list[TP]) -> list[LeaderAndIsr | None]:
        """The partitions' state znodes, read with multiRead (ZooKeeper 3.6+) or pipelined; None where
        absent or unreadable."""
        out: list[LeaderAndIsr | None] = []
        paths = [zkpaths.partition_state_path(*tp) for tp in tps]
        for got in await self.zk.get_many(paths, small=True, decode=partial(zktopics.decode_partition_state, "", -1)):
            if got is None:
                out.append(None)
                continue
            s, stat = got
            out.append(LeaderAndIsr(s.leader, s.leader_epoch, s.isr, s.controller_epoch, stat.version))
        return out

    def _connect(self, b: BrokerInfo) -> None:
        assert self.channel is not None
        endpoint = b.endpoints.get(self.broker.config.inter_broker_listener_name)
        if endpoint is None:
            log.warning("broker %d has no %s endpoint", b.broker_id, self.broker.config.inter_broker_listener_name)
            return
        self.channel.add_broker(b.broker_id, endpoint[0], endpoint[1])

    # -- state changes ----------------------------------------------------------------------------------

    async def _create_missing_states(self, partitions: list[TP]) -> list[TP]:
        new: dict[TP, LeaderAndIsr] = {}
        for tp in partitions:
            if tp in self.ctx.states:
                continue
            live = [r for r in self.ctx.replicas(tp) if r in self.ctx.live]
            if not live:
                log.warning("partition %s-%d has no live replica; it stays offline", *tp)
                continue
            new[tp] = LeaderAndIsr(live[0], 0, tuple(live), self.epoch, 0)
        tps = list(new)
        results = await self.zk.create_many(
            [(zkpaths.partition_state_path(*tp), new[tp].to_znode()) for tp in tps], makepath=True
        )
        created: list[TP] = []
        existing: list[TP] = []
        for tp, result in zip(tps, results, strict=True):
            if isinstance(result, NodeExistsError):
                existing.append(tp)
            elif isinstance(result, Exception):
                log.warning(
                    "partition %s-%d: creating its state failed: %s; trying again in %g s",
                    *tp,
                    f"{type(result).__name__} {result}".strip(),
                    _STATE_RETRY_S,
                )
                self._unwritten_states.add(tp)
            else:
                self.ctx.states[tp] = new[tp]
                self._unwritten_states.discard(tp)
                created.append(tp)
        for tp, state in zip(existing, await self._read_states(existing), strict=True):
            if state is not None:
                self.ctx.states[tp] = state
                self._unwritten_states.discard(tp)
            else:
                self._unwritten_states.add(tp)  # there and unreadable, or gone again: read it later
        if self._unwritten_states:
            self._schedule_state_retry()
        return created

    def _schedule_state_retry(self) -> None:
        """Try the unwritten partition states again in _STATE_RETRY_S. Nothing else would: a new
        topic's partitions without a state have no leader, and every producer gets
        LEADER_NOT_AVAILABLE until a broker starts or another controller is elected (seen in the
        lab: one failed write under load left a topic without a leader for good). Kafka's
        controller tries its New partitions again on its next broker event; this one does not wait
        for one."""
        if not self.active or (self._state_retry is not None and not self._state_retry.done()):
            return
        generation = self._generation

        async def later() -> None:
            await asyncio.sleep(_STATE_RETRY_S)
            if self.active and self._generation == generation:
                self.enqueue(self._write_unwritten_states)

        self._state_retry = asyncio.ensure_future(later())

    async def _write_unwritten_states(self) -> None:
        if not self.active:
            return
        assigned = set(self.ctx.partitions())
        wanted = sorted(
            tp
            for tp in self._unwritten_states
            if tp in assigned and tp not in self.ctx.states and tp[0] not in self.deletion.topics
        )
        self._unwritten_states.clear()
        if not wanted:
            return
        before = set(self.ctx.states)
        await self._create_missing_states(wanted)
        ready = [tp for tp in wanted if tp in self.ctx.states and tp not in before]
        if ready:
            log.info("[Controller id=%d] partition states written on a later try: %s", self.broker_id, ready)
            self._send_leader_and_isr(ready, self.ctx.live, is_new=True)
            self._send_update_metadata(set(self.ctx.brokers), ready)

    async def _change_states(self, changes: dict[TP, Callable[[LeaderAndIsr], LeaderAndIsr | None]]) -> list[TP]:
        """Apply each change to the partition's current state with a conditional write; returns the changed.

        The writes of one round go out in ZooKeeper multis, each guarded by the controller epoch
        znode's version (``ZooKeeper.set_many_checked``: a controller that lost its place cannot
        overwrite its successor's states); a partition whose write met a newer version (a leader
        changed its ISR meanwhile) is re-read and its change re-applied, up to three rounds.
        Raises ``CheckVersionFailed`` when another controller has been elected.
        """
        changed: list[TP] = []
        pending = list(changes)
        for _attempt in range(3):
            writes: list[tuple[TP, LeaderAndIsr, int]] = []
            for tp in pending:
                current = self.ctx.states.get(tp)
                if current is None:
                    continue
                new = changes[tp](current)
                if new is not None:
                    writes.append((tp, new, current.zk_version))
            if not writes:
                break
            results = await self.zk.set_many_checked(
                [(zkpaths.partition_state_path(*tp), new.to_znode(), version) for tp, new, version in writes],
                zkpaths.CONTROLLER_EPOCH,
                self.epoch_zk_version,
            )
            conflicts: list[TP] = []
            for (tp, new, _version), result in zip(writes, results, strict=True):
                if isinstance(result, BadVersionError):
                    conflicts.append(tp)
                elif isinstance(result, NoNodeError):
                    continue
                elif isinstance(result, Exception):
                    log.warning("partition %s-%d: state change failed: %s", *tp, result)
                else:
                    self.ctx.states[tp] = LeaderAndIsr(
                        new.leader, new.leader_epoch, new.isr, new.controller_epoch, result.version
                    )
                    changed.append(tp)
            pending = []
            for tp, fresh in zip(conflicts, await self._read_states(conflicts), strict=True):
                if fresh is not None:
                    self.ctx.states[tp] = fresh
                    pending.append(tp)
            if not pending:
                break
        return changed

    def _unclean_allowed(self, topic: str) -> bool:
        cfg = self.broker.cache.config_of(topic)
        value = cfg.get("unclean.leader.election.enable")
        if value is None:
            return self.broker.config.unclean_leader_election_enable
        return value.lower() == "true"

    async def _elect_offline_partitions(self) -> list[TP]:
        """Elect a leader (a new leader epoch, LeaderAndIsr to every replica by the caller) for each
        partition whose leader is not alive, and for each partition that was offline (Kafka's
        OfflinePartition) even if its recorded leader has come back since: its live replicas may
        have been told of that leader while it was away, without its endpoint, and a new leader
        epoch tells them again, with it (as Kafka's triggerOnlinePartitionStateChange)."""
        live = self.ctx.live
        offline = self.ctx.offline
        changes: dict[TP, Callable[[LeaderAndIsr], LeaderAndIsr | None]] = {}
        for tp, state in self.ctx.states.items():
            if (
                tp not in offline
                and state.leader in live
                and (not self.ctx.offline_replicas or state.leader in self.ctx.live_for(tp))
            ):
                continue

            def change(cur: LeaderAndIsr, tp: TP = tp) -> LeaderAndIsr | None:
                online = self.ctx.live_for(tp)
                if cur.leader in online and tp not in self.ctx.offline:
                    return None
                chosen = offline_leader(self.ctx.replicas(tp), cur, online, self._unclean_allowed(tp[0]))
                if chosen is None:
                    return None
                if chosen[0] not in cur.isr:
                    log.warning("unclean leader election for %s-%d: broker %d (not in ISR %s)", *tp, chosen[0], cur.isr)
                return cur.new_leader(chosen[0], chosen[1], self.epoch)

            changes[tp] = change
        changed = await self._change_states(changes)
        elected = set(changed)
        for tp in changes:
            now = self.ctx.states.get(tp)
            if tp not in elected and now is not None and now.leader not in self.ctx.live_for(tp):
                offline.add(tp)
                log.warning("partition %s-%d is offline: no live replica in ISR %s", *tp, list(now.isr))
            else:
                offline.discard(tp)
        return changed

    # -- events -----------------------------------------------------------------------------------

    async def _on_broker_change(self) -> None:
        if not self.active:
            return
        before = dict(self.ctx.broker_epochs)
        epochs = await self._load_brokers()
        dead = {b for b in before if b not in epochs}
        new = {b for b in epochs if b not in before}
        bounced = {b for b in epochs if b in before and before[b] != epochs[b]}
        if not (dead or new or bounced):
            return
        log.info(
            "[Controller id=%d] brokers: new %s, dead %s, bounced %s",
            self.broker_id,
            sorted(new),
            sorted(dead),
            sorted(bounced),
        )
        assert self.channel is not None
        for b in dead | bounced:
            await self.channel.remove_broker(b)
            self.ctx.shutting_down.discard(b)
            self.ctx.offline_replicas.pop(b, None)  # a re-registered broker answers for its log dirs again
        for b in new | bounced:
            self._connect(self.ctx.brokers[b])
        if dead or bounced:
            # a bounced broker lost its in-memory state: treat it as failed, then as new
            live_brokers = self.ctx.brokers
            self.ctx.brokers = {b: i for b, i in live_brokers.items() if b not in bounced}
            await self._on_brokers_failed(dead | bounced)
            self.ctx.brokers = live_brokers
        await self._on_brokers_started(new | bounced)

    async def _on_brokers_failed(self, dead: set[int]) -> None:
        self.deletion.on_brokers_failed(dead)
        # new leaders first, then the ISR shrinks of the partitions that kept theirs (see _on_became_controller)
        self._send_new_states(await self._elect_offline_partitions(), self.ctx.live)
        shrunk = await self._remove_from_isrs(dead)
        self._send_leader_and_isr(shrunk, self.ctx.live)
        self._send_update_metadata(set(self.ctx.brokers), shrunk)  # even if empty: the live brokers changed

    def _send_new_states(self, changed: list[TP], to: set[int]) -> None:
        """LeaderAndIsr of ``changed`` to the replicas among ``to``, then UpdateMetadata to every broker."""
        if changed:
            self._send_leader_and_isr(changed, to)
            self._send_update_metadata(set(self.ctx.brokers), changed)

    async def _remove_from_isrs(self, dead: set[int]) -> list[TP]:
        """Take dead brokers out of the ISR of partitions whose leader lives (a new leader epoch)."""
        changes: dict[TP, Callable[[LeaderAndIsr], LeaderAndIsr | None]] = {}
        for tp, state in self.ctx.states.items():
            if state.leader in self.ctx.live and any(r in dead for r in state.isr):

                def shrink(cur: LeaderAndIsr) -> LeaderAndIsr | None:
                    isr = tuple(r for r in cur.isr if r not in dead)
                    if cur.leader not in self.ctx.live or isr == cur.isr or not isr:
                        return None
                    return cur.new_leader(cur.leader, isr, self.epoch)

                changes[tp] = shrink
        return await self._change_states(changes)

    async def _on_brokers_started(self, new: set[int]) -> None:
        if not new:
            return
        # every broker learns the new broker list; new brokers get the full state
        self._send_update_metadata(set(self.ctx.brokers) - new, [])
        self._send_update_metadata(new, self.ctx.partitions())
        hosted = [tp for tp in self.ctx.partitions() if any(b in self.ctx.replicas(tp) for b in new)]
        self._send_leader_and_isr(hosted, new)
        await self._create_missing_states([tp for tp in hosted if tp not in self.ctx.states])
        changed = await self._elect_offline_partitions()
        self._send_leader_and_isr(changed, self.ctx.live)
        self._send_update_metadata(set(self.ctx.brokers), changed)
        await self.deletion.resume()  # a returning replica deletes the logs of topics deleted meanwhile

    async def _on_topic_change(self) -> None:
        if not self.active:
            return
        children = set(await self.zk.children(zkpaths.BROKER_TOPICS))
        new = sorted(children - set(self.ctx.assignments) - set(self.deletion.topics))
        if not new:
            return
        await self._load_topics(new)
        partitions = [tp for tp in self.ctx.partitions() if tp[0] in new]
        await self._create_missing_states(partitions)
        ready = [tp for tp in partitions if tp in self.ctx.states]
        log.info("[Controller id=%d] new topics %s (%d partitions)", self.broker_id, new, len(partitions))
        self._send_leader_and_isr(ready, self.ctx.live, is_new=True)
        self._send_update_metadata(set(self.ctx.brokers), ready)

    async def _on_delete_topics(self) -> None:
        if self.active:
            await self.deletion.on_marks_changed()

    async def _on_isr_change(self) -> None:
        if not self.active:
            return
        paths = [f"{ISR_CHANGE}/{child}" for child in await self.zk.children(ISR_CHANGE)]
        changed: set[TP] = set()
        for got in await self.zk.get_many(paths, decode=decode_isr_change):
            if got is not None:
                changed.update(got[0])
        await self.zk.delete_many(paths)
        tps = [tp for tp in changed if tp[0] in self.ctx.assignments]
        refreshed = []
        for tp, state in zip(tps, await self._read_states(tps), strict=True):
            if state is not None:
                self.ctx.states[tp] = state
                refreshed.append(tp)
        if refreshed:
            self._send_update_metadata(set(self.ctx.brokers), refreshed)

    def _on_preferred_node(self, data: bytes | None, stat: Any) -> None:
        if stat is None or not self.active:
            return
        try:
            tps: list[TP] | None = decode_partition_list(PREFERRED_ELECTION, data)
        except ZnodeFormatError:
            tps = None  # as Kafka: an unreadable request elects every partition's preferred leader

        async def run() -> None:
            await self.elect_preferred(tps)
            try:
                await self.zk.call(self.zk.client.delete, PREFERRED_ELECTION)
            except NoNodeError:
                pass

        self.enqueue(run)

    async def _periodic_preferred_election(self) -> None:
        interval = self.broker.config.leader_imbalance_check_interval_seconds
        while True:
            await asyncio.sleep(interval)
            self.enqueue(self._elect_all_preferred)

    async def _elect_all_preferred(self) -> None:
        await self.elect_preferred(None)

    async def elect_preferred(self, partitions: list[TP] | None) -> list[TP]:
        if not self.active:
            return []
        live = self.ctx.live
        wanted = partitions if partitions is not None else list(self.ctx.states)
        candidates = [
            tp for tp in wanted if tp in self.ctx.states and self.ctx.replicas(tp)[:1] != [self.ctx.states[tp].leader]
        ]
        # As Kafka's controller, read the candidates' states from ZooKeeper before electing: the
        # leader may have just put the preferred replica back into the ISR, and its ISR change
        # notification (gathered for 50 ms, then queued here) not have reached this cache yet.
        for tp, fresh in zip(candidates, await self._read_states(candidates), strict=True):
            if fresh is not None:
                self.ctx.states[tp] = fresh
        changes: dict[TP, Callable[[LeaderAndIsr], LeaderAndIsr | None]] = {}
        for tp in candidates:

            def change(cur: LeaderAndIsr, tp: TP = tp) -> LeaderAndIsr | None:
                leader = preferred_leader(self.ctx.replicas(tp), cur, self.ctx.live_for(tp))
                return None if leader is None else cur.new_leader(leader, cur.isr, self.epoch)

            changes[tp] = change
        changed = await self._change_states(changes)
        if changed:
            log.info("[Controller id=%d] preferred leaders elected for %d partition(s)", self.broker_id, len(changed))
            self._send_leader_and_isr(changed, live)
            self._send_update_metadata(set(self.ctx.brokers), changed)
        return changed

    async def elect_leaders(
        self, partitions: list[TP] | None, unclean: bool = False
    ) -> dict[TP, tuple[ErrorCode, str | None]] | None:
        """ElectLeaders: elect the preferred replica (``unclean``: any live replica of a partition
        without a live leader) for ``partitions`` (None: every partition), on the controller's
        event queue. Per partition: NONE when elected, ELECTION_NOT_NEEDED when the leader is
        already the one the election would choose, PREFERRED_LEADER_NOT_AVAILABLE /
        ELIGIBLE_LEADERS_NOT_AVAILABLE when it cannot, UNKNOWN_TOPIC_OR_PARTITION,
        INVALID_TOPIC_EXCEPTION for a topic being deleted. None: this broker is not the controller."""
        fut: asyncio.Future[dict[TP, tuple[ErrorCode, str | None]] | None] = asyncio.get_running_loop().create_future()

        async def run() -> None:
            try:
                fut.set_result(await self._elect_leaders(partitions, unclean))
            except CheckVersionFailed as e:
                await self._controller_moved(e)
                fut.set_result(None)  # NOT_CONTROLLER
            except Exception as e:
                fut.set_exception(e)

        self.enqueue(run)
        return await fut

    async def _elect_leaders(
        self, partitions: list[TP] | None, unclean: bool
    ) -> dict[TP, tuple[ErrorCode, str | None]] | None:
        if not self.active:
            return None
        wanted = partitions if partitions is not None else list(self.ctx.states)
        deleting = set(await self.zk.children(zkpaths.DELETE_TOPICS))
        live = self.ctx.live
        out: dict[TP, tuple[ErrorCode, str | None]] = {}
        electable: list[TP] = []
        for tp in wanted:
            state = self.ctx.states.get(tp)
            if state is None:
                out[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
            elif tp[0] in deleting:
                out[tp] = (ErrorCode.INVALID_TOPIC_EXCEPTION, "The topic is being deleted")
            elif (state.leader == self.ctx.replicas(tp)[0]) if not unclean else (state.leader in live):
                out[tp] = (ErrorCode.ELECTION_NOT_NEEDED, None)
            else:
                electable.append(tp)
        if unclean:
            changes: dict[TP, Callable[[LeaderAndIsr], LeaderAndIsr | None]] = {}
            for tp in electable:

                def change(cur: LeaderAndIsr, tp: TP = tp) -> LeaderAndIsr | None:
                    if cur.leader in self.ctx.live:
                        return None
                    chosen = offline_leader(self.ctx.replicas(tp), cur, self.ctx.live, unclean=True)
                    return None if chosen is None else cur.new_leader(chosen[0], chosen[1], self.epoch)

                changes[tp] = change
            changed = await self._change_states(changes)
            if changed:
                log.info("[Controller id=%d] unclean leader election for %d partition(s)", self.broker_id, len(changed))
                self._send_leader_and_isr(changed, live)
                self._send_update_metadata(set(self.ctx.brokers), changed)
            failure = (ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, "No live replica of the partition")
        else:
            changed = await self.elect_preferred(electable)
            failure = (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, "The preferred replica is not alive or not in the ISR")
        done = set(changed)
        for tp in electable:
            if tp in done:
                out[tp] = (ErrorCode.NONE, None)
            else:
                replicas = self.ctx.replicas(tp)
                state = self.ctx.states.get(tp)
                msg = failure[1]
                if not unclean and state is not None:
                    msg = f"Failed to elect leader for partition {tp[0]}-{tp[1]}: preferred replica {replicas[0]} is not live or not in the ISR {list(state.isr)}"
                out[tp] = (failure[0], msg)
        return out

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[TP] | None:
        """Move leadership off ``broker_id``; returns the partitions it still leads (None: not controller)."""
        fut: asyncio.Future[list[TP] | None] = asyncio.get_running_loop().create_future()

        async def run() -> None:
            try:
                fut.set_result(await self._controlled_shutdown(broker_id, broker_epoch))
            except CheckVersionFailed as e:
                await self._controller_moved(e)
                fut.set_result(None)  # NOT_CONTROLLER: the broker asks the new controller
            except Exception as e:
                fut.set_exception(e)

        self.enqueue(run)
        return await fut

    async def _controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[TP] | None:
        if not self.active:
            return None
        if broker_id not in self.ctx.brokers:
            return []
        known_epoch = self.ctx.broker_epochs.get(broker_id, -1)
        if broker_epoch >= 0 and known_epoch >= 0 and broker_epoch < known_epoch:
            raise StaleBrokerEpoch(f"broker {broker_id} epoch {broker_epoch} < {known_epoch}")
        self.ctx.shutting_down.add(broker_id)
        live = self.ctx.live
        shutting = self.ctx.shutting_down
        changes: dict[TP, Callable[[LeaderAndIsr], LeaderAndIsr | None]] = {}
        for tp in self.ctx.partitions_on(broker_id):
            if len(self.ctx.replicas(tp)) <= 1:
                continue

            def change(cur: LeaderAndIsr, tp: TP = tp) -> LeaderAndIsr | None:
                isr = tuple(r for r in cur.isr if r != broker_id)
                if cur.leader == broker_id:
                    leader = shutdown_leader(self.ctx.replicas(tp), cur, self.ctx.live_for(tp), shutting)
                    return None if leader is None else cur.new_leader(leader, isr, self.epoch)
                if broker_id in cur.isr and isr:
                    return cur.new_leader(cur.leader, isr, self.epoch)
                return None

            changes[tp] = change
        changed = await self._change_states(changes)
        # The broker shutting down gets the new states too: it must stop leading the moved partitions
        # now (become a follower), not keep taking writes at the old epoch until it exits.
        self._send_leader_and_isr(changed, live | {broker_id})
        self._send_update_metadata(set(self.ctx.brokers), changed)
        remaining = [
            tp
            for tp in self.ctx.partitions_on(broker_id)
            if self.ctx.states.get(tp) is not None
            and self.ctx.states[tp].leader == broker_id
            and len(self.ctx.replicas(tp)) > 1
        ]
        log.info(
            "[Controller id=%d] controlled shutdown of broker %d: moved %d partition(s), %d remain led by it",
            self.broker_id,
            broker_id,
            len(changed),
            len(remaining),
        )
        return remaining

    # -- requests --------------------------------------------------------------------------------------

    def _send_leader_and_isr(self, partitions: list[TP], to: set[int], is_new: bool = False) -> None:
        if self.channel is None or not partitions:
            return
        by_broker: dict[int, list[TP]] = {}
        for tp in partitions:
            if tp not in self.ctx.states:
                continue
            for r in self.ctx.replicas(tp):
                if r in to and r in self.ctx.brokers:
                    by_broker.setdefault(r, []).append(tp)
        for b, tps in by_broker.items():
            # every answer is read for KAFKA_STORAGE_ERROR: replicas on a failed log dir (log_dirs.py)
            self.channel.send(
                b, LEADER_AND_ISR, build.leader_and_isr(self, b, tps, is_new), self.log_dirs.response_handler(b)
            )

    def _send_update_metadata(self, to: set[int], partitions: list[TP]) -> None:
        if self.channel is None:
            return
        states = {tp: self.ctx.states[tp] for tp in partitions if tp in self.ctx.states}
        replicas = {tp: self.ctx.replicas(tp) for tp in states}
        targets = [b for b in to if b in self.ctx.brokers]
        if not targets:
            return
        body = build.update_metadata(self, states, replicas)  # the same for every broker: built once
        for b in targets:
            self.channel.send(b, UPDATE_METADATA, body)


class StaleBrokerEpoch(Exception):
    pass
