"""Topic deletion, completed as Kafka 2.3's TopicDeletionManager completes it.

A topic is marked by ``/admin/delete_topics/<topic>`` (DeleteTopics, ``kafka-topics --delete``).
The controller then, on its one event task:

1. takes the topic out of its context (no election, LeaderAndIsr or reassignment touches it from
   now on: a LeaderAndIsr to a replica that already deleted its log would create it again) and
   tells every live broker that its partitions are gone (UpdateMetadata with leader -2, Kafka's
   LeaderDuringDelete: the metadata caches drop them, so Metadata answers UNKNOWN_TOPIC_OR_PARTITION
   and DeleteTopics can answer);
2. sends StopReplica(delete_partitions=true) to every replica on a live broker. A replica answers
   per partition; NONE means its log is deleted (or was never there);
3. only when every replica of every partition has answered NONE removes ``/brokers/topics/<t>``,
   ``/config/topics/<t>`` and last the mark ``/admin/delete_topics/<t>``.

A replica whose broker is down (or died before answering, or answered an error) is Kafka's
ReplicaDeletionIneligible: the mark stays, and the controller sends it StopReplica again when the
broker registers again (a restarted broker finds the old log on disk and deletes it then), or
when a new controller resumes the deletion (it reads every mark on election). While the mark
stays, creating a topic of the same name is refused (TOPIC_ALREADY_EXISTS, "marked for
deletion"), so a re-created topic never meets a log of its predecessor: it gets fresh logs.

Thread model: every method runs on the controller's event task, except the StopReplica answer
callbacks, which run on the loop and only enqueue an event.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kazoo.exceptions import NoNodeError

from headwater.broker.controller import requests as build
from headwater.broker.controller.election import LeaderAndIsr
from headwater.protocol.apis import STOP_REPLICA, UPDATE_METADATA
from headwater.protocol.errors import ErrorCode
from headwater.protocol.schema import Message
from headwater.zk import paths as zkpaths

if TYPE_CHECKING:
    from headwater.broker.controller.controller import Controller

log = logging.getLogger(__name__)

TP = tuple[str, int]
#: Kafka's LeaderDuringDelete: the leader an UpdateMetadata names for a partition being deleted
LEADER_DURING_DELETE = -2


@dataclass
class _Deleting:
    assignment: dict[int, list[int]]
    #: (broker, partition) replicas whose log is not known to be deleted yet
    pending: set[tuple[int, int]] = field(default_factory=set)
    #: of those, the ones a StopReplica(delete) is in flight to
    in_flight: set[tuple[int, int]] = field(default_factory=set)


class TopicDeletion:
    """The topics being deleted (see the module docstring). Owned by one controller incarnation."""

    def __init__(self, controller: Controller) -> None:
        self.c = controller
        self.topics: dict[str, _Deleting] = {}

    def reset(self) -> None:
        """The controller resigned: a new incarnation reads the marks again."""
        self.topics.clear()

    def is_deleting(self, topic: str) -> bool:
        return topic in self.topics

    async def on_marks_changed(self) -> None:
        """Read ``/admin/delete_topics``: start deleting the newly marked topics, then resume all."""
        c = self.c
        for topic in await c.zk.children(zkpaths.DELETE_TOPICS):
            if topic in self.topics:
                continue
            assignment = c.ctx.assignments.get(topic)
            if assignment is None:
                if await c.zk.call(c.zk.client.exists, zkpaths.topic_path(topic)) is None:
                    log.info("[Controller id=%d] %s is marked for deletion but does not exist", c.broker_id, topic)
                    await self._delete_znodes(topic)
                continue  # else: its assignment was unreadable; it stays marked
            self._start(topic, assignment)
        await self.resume()

    def _start(self, topic: str, assignment: dict[int, list[int]]) -> None:
        c = self.c
        ctx = c.ctx
        ctx.assignments.pop(topic, None)
        for p in assignment:
            ctx.states.pop((topic, p), None)
        entry = self.topics[topic] = _Deleting(
            {p: list(rs) for p, rs in assignment.items()}, {(r, p) for p, rs in assignment.items() for r in rs}
        )
        log.info(
            "[Controller id=%d] deleting topic %s: %d replica(s) to delete their logs",
            c.broker_id,
            topic,
            len(entry.pending),
        )
        if c.channel is None:
            return
        gone = {(topic, p): LeaderAndIsr(LEADER_DURING_DELETE, 0, (), c.epoch, 0) for p in assignment}
        body = build.update_metadata(c, gone, {(topic, p): rs for p, rs in assignment.items()})
        for b in ctx.brokers:
            c.channel.send(b, UPDATE_METADATA, body)

    async def resume(self) -> None:
        """StopReplica(delete) to every pending replica on a live broker with none in flight;
        complete the topics with no replica left."""
        c = self.c
        for topic, entry in list(self.topics.items()):
            if not entry.pending:
                await self._complete(topic)
                continue
            by_broker: dict[int, list[int]] = {}
            for b, p in sorted(entry.pending - entry.in_flight):
                if b in c.ctx.brokers:
                    by_broker.setdefault(b, []).append(p)
            for b, parts in by_broker.items():
                self._send_stop_replica(topic, b, parts)
            waiting = sorted({b for b, _ in entry.pending if b not in c.ctx.brokers})
            if waiting:
                log.info(
                    "[Controller id=%d] deletion of %s waits for broker(s) %s to come back",
                    c.broker_id,
                    topic,
                    waiting,
                )

    def _send_stop_replica(self, topic: str, broker: int, parts: list[int]) -> None:
        c = self.c
        if c.channel is None:
            return
        entry = self.topics[topic]
        entry.in_flight |= {(broker, p) for p in parts}
        generation = c.generation
        body = build.stop_replica(c, [(topic, p) for p in parts], delete=True)

        def on_response(response: Message) -> None:  # on the loop, from the channel
            if generation != c.generation:
                return

            async def event() -> None:
                await self._on_stop_replica_response(topic, broker, parts, response)

            c.enqueue(event)

        c.channel.send(broker, STOP_REPLICA, body, on_response)

    async def _on_stop_replica_response(self, topic: str, broker: int, parts: list[int], response: Message) -> None:
        entry = self.topics.get(topic)
        if entry is None:
            return
        done: set[int] = set()
        if response.get("error_code", ErrorCode.NONE) == ErrorCode.NONE:
            for e in response.get("partition_errors") or []:
                if e["topic_name"] == topic and e["error_code"] == ErrorCode.NONE:
                    done.add(int(e["partition_index"]))
        failed: list[int] = []
        for p in parts:
            if (broker, p) not in entry.in_flight:
                continue  # an answer to a request of an earlier deletion of the same name
            entry.in_flight.discard((broker, p))
            if p in done:
                entry.pending.discard((broker, p))
            else:
                failed.append(p)
        if failed:
            # Kafka's ReplicaDeletionIneligible: retried when the broker registers again
            log.warning(
                "[Controller id=%d] broker %d could not delete %s partitions %s (answer %r); retried when it re-registers",
                self.c.broker_id,
                broker,
                topic,
                failed,
                response.get("error_code"),
            )
        if not entry.pending:
            await self._complete(topic)

    def on_brokers_failed(self, dead: set[int]) -> None:
        """Their StopReplica will never be answered: retry them when the brokers come back."""
        for entry in self.topics.values():
            entry.in_flight = {(b, p) for b, p in entry.in_flight if b not in dead}

    async def _complete(self, topic: str) -> None:
        c = self.c
        await self._delete_znodes(topic)
        self.topics.pop(topic, None)
        log.info("[Controller id=%d] deletion of topic %s completed: every replica deleted its log", c.broker_id, topic)

    async def _delete_znodes(self, topic: str) -> None:
        # the mark last: a controller failing over half-way still finds the deletion to finish
        for path in (zkpaths.topic_path(topic), zkpaths.topic_config_path(topic), zkpaths.delete_topic_path(topic)):
            try:
                await self.c.zk.call(self.c.zk.client.delete, path, recursive=True)
            except NoNodeError:
                pass
