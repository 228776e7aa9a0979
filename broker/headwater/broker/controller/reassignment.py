"""Partition reassignment, as Kafka 2.3's controller does it (``onPartitionReassignment``).

Started by ``/admin/reassign_partitions`` (what ``headwater reassign-partitions --execute`` and
Kafka's kafka-reassign-partitions write)::

    {"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[4,2]}, ...]}

For each partition, with OAR its current replicas and RAR the ones asked for:

1. The assignment in ``/brokers/topics/<t>`` becomes OAR + (RAR - OAR) (the current replicas
   first, so the preferred leader does not move yet); a new leader epoch, with the same leader and
   ISR, goes to every replica in LeaderAndIsr: the new ones create their log and start fetching
   from the leader (subject to the replication throttle), the leader accepts them as followers.
2. The controller waits until every replica of RAR is in the ISR (the leader adds a follower that
   caught up, as for any follower; the controller re-reads the partition state every 0.5 s while
   reassignments run).
3. Then, in one state change: the leader stays if it is in RAR, else the first live RAR replica in
   the ISR leads; the ISR loses OAR - RAR; the assignment becomes RAR (in memory, so LeaderAndIsr
   carries it, then in ZooKeeper); StopReplica(delete) to the replicas leaving, which delete their
   log; UpdateMetadata to every broker; the partition leaves ``/admin/reassign_partitions``
   (the znode is deleted when none remain).

A partition of an unknown topic, an empty or duplicated replica list, or a RAR equal to the
current replicas is dropped from the znode at once (logged). A new controller resumes the
reassignments the znode still lists (step 1 is idempotent). Progress is logged per partition,
and ``headwater reassign-partitions --verify`` reads it from ZooKeeper.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import BadVersionError, NoNodeError

from headwater.broker.controller import requests as build
from headwater.broker.controller.election import LeaderAndIsr
from headwater.protocol.apis import STOP_REPLICA
from headwater.zk import admin as zkadmin
from headwater.zk import paths as zkpaths
from headwater.zk import topics as zktopics
from headwater.zk.json import ZnodeFormatError

if TYPE_CHECKING:
    from headwater.broker.controller.controller import Controller

log = logging.getLogger(__name__)

TP = tuple[str, int]
REASSIGN_PARTITIONS = zkpaths.REASSIGN_PARTITIONS
CHECK_INTERVAL_S = 0.5


def parse_reassignment(data: bytes | None) -> dict[TP, list[int]]:
    """The partitions of ``/admin/reassign_partitions`` (malformed entries are skipped and logged)."""
    try:
        moves, malformed = zkadmin.decode_reassignment_entries(data)
    except ZnodeFormatError as e:
        log.warning("ignoring %s: %s", REASSIGN_PARTITIONS, e)
        return {}
    for entry in malformed:
        log.warning("ignoring a malformed entry of %s: %r", REASSIGN_PARTITIONS, entry)
    return moves


class PartitionReassigner:
    """The controller's reassignment state machine; runs on the controller's event queue."""

    def __init__(self, controller: Controller) -> None:
        self.c = controller
        self.in_progress: dict[TP, list[int]] = {}
        self._checker: asyncio.Task[None] | None = None

    def start(self) -> None:
        """On becoming controller: watch the znode (its current value resumes what it lists)."""
        self.c._watch_data(REASSIGN_PARTITIONS, self._on_node)

    def stop(self) -> None:
        if self._checker is not None:
            self._checker.cancel()
            self._checker = None
        self.in_progress = {}

    def _on_node(self, data: bytes | None, stat: Any) -> None:
        if stat is None or not self.c.active:
            return
        wanted = parse_reassignment(data)

        async def run() -> None:
            await self._start(wanted)

        self.c.enqueue(run)

    # -- step 1 ----------------------------------------------------------------------------------

    async def _start(self, wanted: dict[TP, list[int]]) -> None:
        if not self.c.active:
            return
        drop: set[TP] = set()
        for tp, rar in wanted.items():
            if self.in_progress.get(tp) == rar:
                continue
            current = self.c.ctx.replicas(tp)
            problem = None
            if not current or tp not in self.c.ctx.states:
                problem = "the partition does not exist"
            elif not rar or len(set(rar)) != len(rar):
                problem = f"the replica list {rar} is empty or names a broker twice"
            elif rar == current:
                problem = "the partition already has these replicas"
            if problem:
                log.warning("[Controller id=%d] not reassigning %s-%d to %s: %s", self.c.broker_id, *tp, rar, problem)
                drop.add(tp)
                continue
            self.in_progress[tp] = rar
            await self._begin(tp, rar)
        if drop:
            await self._remove_from_node(drop)
        if self.in_progress and (self._checker is None or self._checker.done()):
            self._checker = asyncio.ensure_future(self._check_periodically())

    async def _begin(self, tp: TP, rar: list[int]) -> None:
        current = self.c.ctx.replicas(tp)
        union = current + [r for r in rar if r not in current]
        if union != current:
            await self._write_assignment(tp, union)
        self.c.ctx.assignments[tp[0]][tp[1]] = union

        def bump(cur: LeaderAndIsr) -> LeaderAndIsr:
            return cur.new_leader(cur.leader, cur.isr, self.c.epoch)

        changed = await self.c._change_states({tp: bump})
        live = self.c.ctx.live
        self.c._send_leader_and_isr(changed, live)
        self.c._send_update_metadata(set(self.c.ctx.brokers), changed)
        log.info(
            "[Controller id=%d] reassignment of %s-%d started: %s -> %s; waiting for %s to join the ISR",
            self.c.broker_id,
            *tp,
            current,
            rar,
            [r for r in rar if r not in self.c.ctx.states[tp].isr],
        )

    # -- steps 2 and 3 -----------------------------------------------------------------------------

    async def _check_periodically(self) -> None:
        while self.in_progress:
            await asyncio.sleep(CHECK_INTERVAL_S)
            self.c.enqueue(self.check)

    async def check(self) -> None:
        """Complete every reassignment whose new replicas are all in the ISR."""
        if not self.c.active:
            return
        for tp, rar in list(self.in_progress.items()):
            state = await self.c._read_state(tp)
            if state is None or tp[0] not in self.c.ctx.assignments:
                self.in_progress.pop(tp, None)
                await self._remove_from_node({tp})
                continue
            self.c.ctx.states[tp] = state
            if set(rar) <= set(state.isr):
                await self._complete(tp, rar)

    async def _complete(self, tp: TP, rar: list[int]) -> None:
        c = self.c
        current = c.ctx.replicas(tp)
        leaving = [r for r in current if r not in rar]
        live = c.ctx.live

        def change(cur: LeaderAndIsr) -> LeaderAndIsr | None:
            isr = tuple(r for r in cur.isr if r in rar)
            if cur.leader in rar and cur.leader in live:
                leader = cur.leader
            else:
                leader = next((r for r in rar if r in isr and r in live), -1)
            if leader < 0:
                return None
            return cur.new_leader(leader, isr, c.epoch)

        c.ctx.assignments[tp[0]][tp[1]] = rar  # LeaderAndIsr carries the new replica list
        if tp not in await c._change_states({tp: change}):
            c.ctx.assignments[tp[0]][tp[1]] = current  # no live RAR replica in the ISR yet: retry later
            return
        c._send_leader_and_isr([tp], live)
        if c.channel is not None:
            for b in leaving:
                if b in c.ctx.brokers:
                    c.channel.send(b, STOP_REPLICA, build.stop_replica(c, [tp], delete=True))
        await self._write_assignment(tp, rar)
        self.in_progress.pop(tp, None)
        await self._remove_from_node({tp})
        c._send_update_metadata(set(c.ctx.brokers), [tp])
        state = c.ctx.states[tp]
        log.info(
            "[Controller id=%d] reassignment of %s-%d completed: replicas %s, leader %d, ISR %s; removed %s",
            c.broker_id,
            *tp,
            rar,
            state.leader,
            list(state.isr),
            leaving,
        )

    # -- ZooKeeper ---------------------------------------------------------------------------------

    async def _write_assignment(self, tp: TP, replicas: list[int]) -> None:
        """Set one partition's replicas in ``/brokers/topics/<t>`` (conditional write, re-read on conflict)."""
        zk = self.c.zk
        path = zkpaths.topic_path(tp[0])
        for _ in range(10):
            try:
                data, stat = await zk.call(zk.client.get, path)
            except NoNodeError:
                return
            assignment = zktopics.decode_assignment(tp[0], data)
            assignment.partitions[tp[1]] = replicas
            try:
                await zk.call(zk.client.set, path, assignment.encode(), version=stat.version)
                return
            except BadVersionError:
                continue
        raise RuntimeError(f"could not write the assignment of {tp[0]}-{tp[1]}: concurrent writers")

    async def _remove_from_node(self, done: set[TP]) -> None:
        zk = self.c.zk
        for _ in range(10):
            try:
                data, stat = await zk.call(zk.client.get, REASSIGN_PARTITIONS)
            except NoNodeError:
                return
            remaining = {tp: rs for tp, rs in parse_reassignment(data).items() if tp not in done}
            try:
                if remaining:
                    body = zkadmin.encode_reassignment(remaining)
                    await zk.call(zk.client.set, REASSIGN_PARTITIONS, body, version=stat.version)
                else:
                    await zk.call(zk.client.delete, REASSIGN_PARTITIONS, version=stat.version)
                return
            except (BadVersionError, NoNodeError):
                continue
