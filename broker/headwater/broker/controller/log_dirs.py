"""Failed log dirs (KIP-112), the controller's side, as Kafka 2.3's controller handles them.

A broker whose log dir failed keeps running; it takes that dir's partitions offline and creates
``/log_dir_event_notification/log_dir_event_<seq>`` (``{"version":1,"broker":<id>,"event":1}``).
The notification says only *which broker*: the controller

1. reads and deletes the notifications, then sends each named (live) broker a LeaderAndIsr for
   every partition it hosts, as Kafka's ``onBrokerLogDirFailure`` does;
2. learns which replicas are offline from the answers: a partition answered KAFKA_STORAGE_ERROR is
   a replica on a failed dir. Every LeaderAndIsr answer is read so, also those to a broker that
   starts with a failed dir and those a new controller sends when it takes over, so the controller
   needs no other record of failed dirs than the brokers' own answers;
3. takes those replicas offline (Kafka's OfflineReplica): a partition they led gets a new leader
   from its ISR without them (the election rules of election.py, with the replica counted as not
   live for that partition), a partition they followed loses them from its ISR (a new leader epoch,
   as when a broker dies); then LeaderAndIsr to the replicas and UpdateMetadata to every broker,
   whose ``offline_replicas`` now name them.

A replica stays offline for the controller until its broker leaves or re-registers (a restarted
broker answers for its dirs again). Runs on the controller's event task; the LeaderAndIsr answer
callbacks run on the loop and only enqueue an event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from headwater.broker.controller.election import LeaderAndIsr, offline_leader
from headwater.protocol.errors import ErrorCode
from headwater.protocol.schema import Message
from headwater.zk import notifications
from headwater.zk import paths as zkpaths

if TYPE_CHECKING:
    from headwater.broker.controller.controller import Controller

log = logging.getLogger(__name__)

TP = tuple[str, int]


class LogDirFailures:
    def __init__(self, controller: Controller) -> None:
        self.c = controller

    async def on_notifications(self) -> None:
        """The children of ``/log_dir_event_notification`` changed."""
        c = self.c
        if not c.active:
            return
        names = await c.zk.children(zkpaths.LOG_DIR_EVENT_NOTIFICATION)
        paths = [f"{zkpaths.LOG_DIR_EVENT_NOTIFICATION}/{n}" for n in names]
        brokers: set[int] = set()
        for got in await c.zk.get_many(paths):
            value = got[0] if got is not None else None
            if isinstance(value, dict) and value.get("event") == notifications.LOG_DIR_FAILURE:
                try:
                    brokers.add(int(value["broker"]))
                except (KeyError, TypeError, ValueError):
                    log.warning("[Controller id=%d] unreadable log dir event %r", c.broker_id, value)
        await c.zk.delete_many(paths)
        for b in sorted(brokers):
            if b not in c.ctx.brokers:
                continue
            hosted = [tp for tp in c.ctx.partitions_on(b) if tp in c.ctx.states]
            log.info(
                "[Controller id=%d] broker %d reported a failed log dir: asking it about its %d partition(s)",
                c.broker_id,
                b,
                len(hosted),
            )
            c._send_leader_and_isr(hosted, {b})

    def response_handler(self, broker_id: int) -> Callable[[Message], None]:
        """The callback for a LeaderAndIsr answer from ``broker_id`` (runs on the loop)."""
        c = self.c
        generation = c.generation

        def on_response(response: Message) -> None:
            if generation != c.generation or response.get("error_code", ErrorCode.NONE) != ErrorCode.NONE:
                return
            offline = {
                (str(e["topic_name"]), int(e["partition_index"]))
                for e in response.get("partition_errors") or []
                if e["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR
            }
            new = offline - c.ctx.offline_replicas.get(broker_id, set())
            if new:

                async def event() -> None:
                    await self._replicas_offline(broker_id, new)

                c.enqueue(event)

        return on_response

    async def _replicas_offline(self, broker_id: int, tps: set[TP]) -> None:
        c = self.c
        ctx = c.ctx
        if not c.active or broker_id not in ctx.brokers:
            return
        hosted = sorted(tp for tp in tps if tp in ctx.states and broker_id in ctx.replicas(tp))
        if not hosted:
            return
        ctx.offline_replicas.setdefault(broker_id, set()).update(hosted)
        changes: dict[TP, Callable[[LeaderAndIsr], LeaderAndIsr | None]] = {}
        for tp in hosted:

            def change(cur: LeaderAndIsr, tp: TP = tp) -> LeaderAndIsr | None:
                online = ctx.live_for(tp)
                if cur.leader == broker_id:
                    chosen = offline_leader(ctx.replicas(tp), cur, online, c._unclean_allowed(tp[0]))
                    if chosen is None:
                        log.warning(
                            "[Controller id=%d] %s-%d: its leader's log dir failed and no other replica of ISR %s is online",
                            c.broker_id,
                            *tp,
                            list(cur.isr),
                        )
                        return None
                    return cur.new_leader(chosen[0], chosen[1], c.epoch)
                isr = tuple(r for r in cur.isr if r != broker_id)
                if isr != cur.isr and isr and cur.leader in online:
                    return cur.new_leader(cur.leader, isr, c.epoch)
                return None

            changes[tp] = change
        changed = await c._change_states(changes)
        moved = sum(1 for tp in changed if ctx.states[tp].leader != broker_id)
        log.info(
            "[Controller id=%d] %d replica(s) on broker %d are offline (failed log dir): %d partition(s) changed",
            c.broker_id,
            len(hosted),
            broker_id,
            moved,
        )
        c._send_new_states(changed, ctx.live)
        c._send_update_metadata(set(ctx.brokers), [tp for tp in hosted if tp not in set(changed)])
